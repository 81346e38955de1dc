"""mha.TinyEncoder: equals PyTorch's pre-norm encoder layers, gates and structural pruning agree."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

import mha

pytestmark = pytest.mark.chapter(7)  # make chapter runs this file (issue 38)


def small_encoder(seed=0, heads=4, layers=2, dtype=torch.float64):
    torch.manual_seed(seed)
    return mha.TinyEncoder(7, 5, 9, embed_dim=16, num_heads=heads, num_layers=layers).to(dtype)


def torch_layer_like(block):
    """nn.TransformerEncoderLayer (norm_first, GELU, no dropout) with the block's weights."""
    d = block.norm1.normalized_shape[0]
    ref = nn.TransformerEncoderLayer(d, block.attn.num_heads,
                                     dim_feedforward=block.mlp[0].out_features, dropout=0.0,
                                     activation="gelu", batch_first=True, norm_first=True,
                                     dtype=torch.float64).eval()
    a = block.attn
    with torch.no_grad():
        ref.self_attn.in_proj_weight.copy_(torch.cat([a.q_proj.weight, a.k_proj.weight,
                                                      a.v_proj.weight]))
        ref.self_attn.in_proj_bias.copy_(torch.cat([a.q_proj.bias, a.k_proj.bias, a.v_proj.bias]))
        ref.self_attn.out_proj.load_state_dict(a.out_proj.state_dict())
        ref.linear1.load_state_dict(block.mlp[0].state_dict())
        ref.linear2.load_state_dict(block.mlp[2].state_dict())
        ref.norm1.load_state_dict(block.norm1.state_dict())
        ref.norm2.load_state_dict(block.norm2.state_dict())
    return ref


def test_encoder_equals_torch_transformer_encoder_layers():
    model = small_encoder()
    tokens = torch.randint(7, (3, 9), generator=torch.Generator().manual_seed(1))
    x = model.token_embedding(tokens) + model.position_embedding[:9]
    for block in model.blocks:
        x = torch_layer_like(block)(x)
    expected = model.readout(model.norm(x))
    logits, weights = model(tokens)
    torch.testing.assert_close(logits, expected)
    assert weights is None
    logits_w, weights = model(tokens, need_weights=True)
    torch.testing.assert_close(logits_w, expected)
    assert [tuple(w.shape) for w in weights] == [(3, 4, 9, 9)] * 2


def test_all_ones_gates_change_nothing_and_zero_gates_remove_the_attention_sublayer():
    model = small_encoder()
    tokens = torch.randint(7, (2, 9), generator=torch.Generator().manual_seed(2))
    plain, _ = model(tokens)
    torch.testing.assert_close(model(tokens, head_mask=torch.ones(2, 4, dtype=torch.float64))[0],
                               plain)
    # all heads of layer 0 gated off: layer 0 adds only out_proj's bias, then its MLP
    gates = torch.ones(2, 4, dtype=torch.float64)
    gates[0] = 0.0
    x = model.token_embedding(tokens) + model.position_embedding[:9]
    block = model.blocks[0]
    x = x + block.attn.out_proj.bias
    x = x + block.mlp(block.norm2(x))
    x = torch_layer_like(model.blocks[1])(x)
    torch.testing.assert_close(model(tokens, head_mask=gates)[0], model.readout(model.norm(x)))


def test_per_example_gates_equal_separate_runs():
    model = small_encoder()
    tokens = torch.randint(7, (3, 9), generator=torch.Generator().manual_seed(3))
    gates = torch.rand(3, 2, 4, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    together, _ = model(tokens, head_mask=gates)
    for b in range(3):
        alone, _ = model(tokens[b:b + 1], head_mask=gates[b])
        torch.testing.assert_close(together[b:b + 1], alone)


@settings(max_examples=25, deadline=None)
@given(keep=st.lists(st.lists(st.booleans(), min_size=4, max_size=4).filter(any),
                     min_size=2, max_size=2))
def test_pruned_encoder_equals_gated_encoder_with_fewer_parameters(keep):
    model = small_encoder()
    keep = torch.tensor(keep)
    tokens = torch.randint(7, (2, 9), generator=torch.Generator().manual_seed(5))
    gated, _ = model(tokens, head_mask=keep.double())
    smaller = model.pruned(keep)
    out, weights = smaller(tokens, need_weights=True)
    torch.testing.assert_close(out, gated)
    assert smaller.heads_per_layer == keep.sum(dim=1).tolist()
    assert [w.shape[1] for w in weights] == keep.sum(dim=1).tolist()
    n_before = sum(p.numel() for p in model.parameters())
    n_after = sum(p.numel() for p in smaller.parameters())
    # each removed head had 3 * (d * d_h + d_h) projection weights and d * d_h output weights
    d, d_h = 16, 4
    assert n_before - n_after == int((~keep).sum()) * (3 * (d * d_h + d_h) + d * d_h)
    torch.testing.assert_close(model(tokens)[0], small_encoder()(tokens)[0])  # original intact


def test_an_encoder_pruned_to_unequal_heads_prunes_again_with_one_row_per_layer():
    """Rows of unequal length cannot form a (layers, heads) tensor: a list of rows is taken,
    and a tensor gets a message naming the heads per layer (it said 'keep at least one')."""
    model = small_encoder()
    tokens = torch.randint(7, (2, 9), generator=torch.Generator().manual_seed(5))
    first = torch.tensor([[True, False, True, True], [False, False, True, True]])
    once = model.pruned(first)
    assert once.heads_per_layer == [3, 2]
    with pytest.raises(ValueError, match=r"row 1 has 3 entries .* 2 heads .* list of one"):
        once.pruned(torch.tensor([[True, True, False], [True, True, False]]))
    twice = once.pruned([torch.tensor([True, False, True]), torch.tensor([False, True])])
    # the original encoder gated to the heads both prunings keep: heads 0 and 3; head 3
    gated, _ = model(tokens, head_mask=torch.tensor([[1.0, 0, 0, 1], [0, 0, 0, 1]]).double())
    torch.testing.assert_close(twice(tokens)[0], gated)
    with pytest.raises(ValueError, match="layer 1 must keep at least one head"):
        once.pruned([torch.tensor([True, True, True]), torch.tensor([False, False])])
    with pytest.raises(ValueError, match="one 1-D bool tensor per layer"):
        once.pruned([torch.tensor([True, True, True])])


def test_bad_inputs_raise_value_errors_naming_the_shape():
    model = small_encoder()
    with pytest.raises(ValueError, match=r"1 <= n <= 9, got \(2, 10\)"):
        model(torch.zeros(2, 10, dtype=torch.long))
    with pytest.raises(ValueError, match="integer tensor"):
        model(torch.zeros(2, 3))
    with pytest.raises(ValueError, match=r"head_mask must have shape \(2, 4\) or \(1, 2, 4\)"):
        model(torch.zeros(1, 3, dtype=torch.long), head_mask=torch.ones(4))
    with pytest.raises(ValueError, match="must keep at least one"):
        model.pruned(torch.tensor([[True] * 4, [False] * 4]))
    with pytest.raises(ValueError, match=r"keep must be a bool tensor of shape"):
        model.pruned(torch.ones(2, 4))
    smaller = model.pruned(torch.tensor([[True, False, True, True], [True] * 4]))
    with pytest.raises(ValueError, match=r"same number of heads in every layer.*\[3, 4\]"):
        smaller(torch.zeros(1, 3, dtype=torch.long), head_mask=torch.ones(2, 4))
    with pytest.raises(ValueError, match="vocab_size must be a positive int"):
        mha.TinyEncoder(0, 3, 4)


def test_batch_importance_is_at_most_the_per_example_one_and_equal_when_signs_agree():
    """|mean of the per-example gate gradients| <= mean of their sizes (triangle inequality):
    smaller when their signs differ within a batch, equal when they agree, here a batch of
    four copies of one example."""
    model = small_encoder(seed=6)
    tokens, targets = mha.lookup_batch(8, 8, 5, torch.Generator().manual_seed(8))

    def loss_fn(batch, gates):
        logits = model(batch[0], head_mask=gates.double())[0]
        return mha.tasks.neighbour_task.cross_entropy(logits, batch[1])

    def raw(batches):
        return mha.head_importance(loss_fn, batches, 2, 4, normalize_layers=False)

    one_batch = raw([(tokens, targets)])
    per_example = raw([(tokens[i:i + 1], targets[i:i + 1]) for i in range(8)])
    assert bool((one_batch <= per_example + 1e-6).all())
    assert bool((one_batch < per_example - 1e-4).any())  # signs differ: strictly smaller
    copies = (tokens[:1].expand(4, -1), targets[:1].expand(4, -1))
    torch.testing.assert_close(raw([copies]), raw([(tokens[:1], targets[:1])]))


def test_head_importance_is_the_absolute_gate_gradient_in_the_models_dtype():
    """Michel et al.'s I_h against central finite differences of the loss in the gates; the
    gates come in the dtype asked for, so a float64 model takes them as its head_mask."""
    model = small_encoder(seed=6)
    gen = torch.Generator().manual_seed(7)
    batches = [mha.lookup_batch(4, 8, 5, gen) for _ in range(3)]  # 1 + 8 tokens, 5 classes

    def loss_fn(batch, gates):
        tokens, targets = batch
        logits = model(tokens, head_mask=gates)[0]
        return mha.tasks.neighbour_task.cross_entropy(logits, targets)

    raw = mha.head_importance(loss_fn, batches, 2, 4, normalize_layers=False,
                              dtype=torch.float64)
    assert raw.dtype == torch.float64
    eps = 1e-6
    expected = torch.zeros(2, 4, dtype=torch.float64)
    for layer in range(2):
        for head in range(4):
            for batch in batches:
                plus = torch.ones(2, 4, dtype=torch.float64)
                minus = plus.clone()
                plus[layer, head] += eps
                minus[layer, head] -= eps
                with torch.no_grad():
                    slope = (loss_fn(batch, plus) - loss_fn(batch, minus)) / (2 * eps)
                expected[layer, head] += slope.abs() / len(batches)
    torch.testing.assert_close(raw, expected, rtol=1e-6, atol=1e-8)
    normalized = mha.head_importance(loss_fn, batches, 2, 4, dtype=torch.float64)
    torch.testing.assert_close(normalized.norm(dim=1), torch.ones(2, dtype=torch.float64))
    torch.testing.assert_close(normalized, raw / raw.norm(dim=1, keepdim=True))


def test_head_importance_gates_default_to_torchs_default_dtype_and_refuse_other_dtypes():
    seen = []

    def loss_fn(batch, gates):
        seen.append(gates.dtype)
        return gates.sum()

    assert mha.head_importance(loss_fn, [0], 1, 2).dtype == torch.get_default_dtype()
    assert seen == [torch.get_default_dtype()]
    with pytest.raises(ValueError, match="dtype must be a floating torch dtype"):
        mha.head_importance(loss_fn, [0], 1, 2, dtype=torch.int64)


def test_head_importance_sums_float16_gradients_past_float16s_range():
    """Three batches of gradient 30,000 sum to 90,000 > 65,504: in float16 the running sum
    was inf, and so was every importance, with no error."""
    def loss_fn(batch, gates):
        return (gates * batch).sum()  # d loss / d gate = batch, for every gate

    got = mha.head_importance(loss_fn, [30000.0] * 3, 1, 2, normalize_layers=False,
                              dtype=torch.float16)
    assert got.dtype == torch.float16
    # by hand: the mean of |30,000| over three batches (30,000 is a float16 number)
    assert got.double().tolist() == [[30000.0, 30000.0]]
