"""MultiHeadAttention (chapter 4): equal to nn.MultiheadAttention for every option, the two
views of multi-head attention, the fused fast path, parameter counts and bad input."""

import itertools
import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from torch import nn

import mha

pytestmark = pytest.mark.chapter(4)  # make chapter runs this file (issue 38)

F64 = torch.float64


# --- an independent float64 reference: h separate heads, written from the paper's formula ---

def separate_heads_reference(layer, query, key, value, bool_mask=None):
    """``Concat_i softmax(Q W_Q,i (K W_K,i)^T / sqrt(d_k)) V W_V,i  W_O`` head by head."""
    h, dk = layer.num_heads, layer.head_dim
    query, key, value = query.double(), key.double(), value.double()

    def matrix(linear, i):  # the seed's W_i (in x d_k): rows i*dk..(i+1)*dk of weight, transposed
        return linear.weight.double()[i * dk:(i + 1) * dk].T

    def bias(linear, i):
        return 0.0 if linear.bias is None else linear.bias.double()[i * dk:(i + 1) * dk]

    heads, all_weights = [], []
    for i in range(h):
        q = query @ matrix(layer.q_proj, i) + bias(layer.q_proj, i)
        k = key @ matrix(layer.k_proj, i) + bias(layer.k_proj, i)
        v = value @ matrix(layer.v_proj, i) + bias(layer.v_proj, i)
        scores = q @ k.transpose(-2, -1) / math.sqrt(dk)
        if bool_mask is not None:
            m = torch.broadcast_to(bool_mask, (query.shape[0], h) + scores.shape[-2:])[:, i]
            scores = scores.masked_fill(~m, float("-inf"))
        weights = torch.softmax(scores, dim=-1)
        heads.append(weights @ v)
        all_weights.append(weights)
    concat = torch.cat(heads, dim=-1)
    out = concat @ layer.out_proj.weight.double().T
    if layer.out_proj.bias is not None:
        out = out + layer.out_proj.bias.double()
    return out, torch.stack(all_weights, dim=1)


# --- equal to PyTorch: from_torch for every option of nn.MultiheadAttention ---

def _torch_call(module, query, key, value, batch_first, **kwargs):
    """Call ``module`` on batch-first tensors, whatever its own ``batch_first``; batch-first out."""
    if not batch_first:
        query, key, value = (t.transpose(0, 1) for t in (query, key, value))
    out, weights = module(query, key, value, **kwargs)
    return (out if batch_first else out.transpose(0, 1)), weights


MASKS = ["none", "key_padding", "bool_attn", "float_attn", "bool_attn_3d", "padding_and_float"]


@pytest.mark.parametrize(
    "kv_dims, bias, batch_first, mask_kind, cross",
    [
        (kv, b, bf, m, cross)
        for kv, b, bf, m, cross in itertools.product(
            [None, (5, 7)], [True, False], [True, False], MASKS, [False, True]
        )
        if not (kv is not None and not cross)  # other key/value sizes need cross-attention
    ],
)
def test_from_torch_equals_nn_multihead_attention(kv_dims, bias, batch_first, mask_kind, cross):
    torch.manual_seed(0)
    embed_dim, h, batch, n_q = 12, 3, 2, 4
    n_k = 6 if cross else n_q
    kdim, vdim = kv_dims if kv_dims else (None, None)
    reference = nn.MultiheadAttention(embed_dim, h, bias=bias, kdim=kdim, vdim=vdim,
                                      batch_first=batch_first, dtype=F64).eval()
    if bias:  # torch starts its biases at zero; make them matter
        with torch.no_grad():
            reference.in_proj_bias.normal_()
            reference.out_proj.bias.normal_()
    ours = mha.MultiHeadAttention.from_torch(reference)
    assert (ours.embed_dim, ours.num_heads, ours.head_dim) == (embed_dim, h, embed_dim // h)
    assert (ours.kdim, ours.vdim) == (kdim or embed_dim, vdim or embed_dim)
    assert ours.q_proj.weight.dtype == F64

    query = torch.randn(batch, n_q, embed_dim, dtype=F64)
    if cross:
        key = torch.randn(batch, n_k, kdim or embed_dim, dtype=F64)
        value = torch.randn(batch, n_k, vdim or embed_dim, dtype=F64)
    else:
        key = value = query

    # torch's masks: True = do NOT attend. Key 0 stays visible so no row is fully masked.
    padding = torch.rand(batch, n_k) < 0.4
    padding[:, 0] = False
    blocked = torch.rand(n_q, n_k) < 0.4
    blocked[:, 0] = False
    float_attn = torch.randn(n_q, n_k, dtype=F64)
    theirs, ours_mask = {}, None
    if mask_kind == "key_padding":
        theirs = {"key_padding_mask": padding}
        ours_mask = ~padding[:, None, None, :]  # (B, 1, 1, n_k), True = may attend
    elif mask_kind == "bool_attn":
        theirs = {"attn_mask": blocked}
        ours_mask = ~blocked
    elif mask_kind == "float_attn":
        theirs = {"attn_mask": float_attn}
        ours_mask = float_attn
    elif mask_kind == "bool_attn_3d":  # torch's per-head mask is (B * h, n_q, n_k)
        per_head = torch.rand(batch * h, n_q, n_k) < 0.4
        per_head[:, :, 0] = False
        theirs = {"attn_mask": per_head}
        ours_mask = ~per_head.view(batch, h, n_q, n_k)
    elif mask_kind == "padding_and_float":
        # torch wants both masks of one type here: a float padding mask, -inf = padded
        float_padding = torch.zeros(batch, n_k, dtype=F64).masked_fill(padding, float("-inf"))
        theirs = {"key_padding_mask": float_padding, "attn_mask": float_attn}
        ours_mask = float_attn + float_padding[:, None, None, :]

    expected, expected_weights = _torch_call(reference, query, key, value, batch_first,
                                             average_attn_weights=False, **theirs)
    out, weights = ours(query, key, value, mask=ours_mask)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(weights, expected_weights)

    # torch's default need_weights returns the weights averaged over heads
    _, averaged = _torch_call(reference, query, key, value, batch_first, **theirs)
    torch.testing.assert_close(weights.mean(dim=1), averaged)

    # the fused fast path gives the same output
    fast, none = ours(query, key, value, mask=ours_mask, need_weights=False)
    assert none is None
    torch.testing.assert_close(fast, expected)


def test_from_torch_gradients_match():
    torch.manual_seed(1)
    reference = nn.MultiheadAttention(8, 2, batch_first=True, dtype=F64)
    ours = mha.MultiHeadAttention.from_torch(reference)
    x = torch.randn(2, 5, 8, dtype=F64, requires_grad=True)
    (grad_theirs,) = torch.autograd.grad(reference(x, x, x)[0].square().sum(), x)
    for need_weights in (True, False):
        (grad_ours,) = torch.autograd.grad(
            ours(x, need_weights=need_weights)[0].square().sum(), x)
        torch.testing.assert_close(grad_ours, grad_theirs)


def test_from_torch_refuses_what_it_cannot_copy():
    with pytest.raises(ValueError, match="plain nn.MultiheadAttention, got Linear"):
        mha.MultiHeadAttention.from_torch(nn.Linear(4, 4))
    with pytest.raises(ValueError, match="add_bias_kv"):
        mha.MultiHeadAttention.from_torch(nn.MultiheadAttention(4, 2, add_bias_kv=True))
    with pytest.raises(ValueError, match="add_zero_attn"):
        mha.MultiHeadAttention.from_torch(nn.MultiheadAttention(4, 2, add_zero_attn=True))


# --- the two views: one big projection reshaped into heads = h separate projections ---

@settings(max_examples=30, deadline=None)
@given(h=st.integers(1, 4), head_dim=st.integers(1, 5), extra=st.integers(0, 3),
       n_q=st.integers(1, 5), n_k=st.integers(1, 5), bias=st.booleans(),
       seed=st.integers(0, 2**16))
@pytest.mark.claim("4.1", "4.3")
def test_big_projection_equals_separate_heads(h, head_dim, extra, n_q, n_k, bias, seed):
    torch.manual_seed(seed)
    embed_dim = h + extra  # head_dim is free (seed 000): h * head_dim need not equal embed_dim
    layer = mha.MultiHeadAttention(embed_dim, h, head_dim=head_dim, kdim=3, vdim=2,
                                   bias=bias).double()
    query = torch.randn(2, n_q, embed_dim, dtype=F64)
    key, value = torch.randn(2, n_k, 3, dtype=F64), torch.randn(2, n_k, 2, dtype=F64)
    out, weights = layer(query, key, value)
    expected, expected_weights = separate_heads_reference(layer, query, key, value)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(weights, expected_weights)
    assert weights.shape == (2, h, n_q, n_k)


@pytest.mark.claim("4.3")
@pytest.mark.parametrize("h", [2, 3, 4])
def test_heads_go_side_by_side_the_slides_vertical_stack_is_undefined(h):
    """The slides' [head_1; ...; head_h] W_O stacks (n, d_v) blocks into (h n, d_v), which an
    (h d_v, d) matrix cannot multiply for h > 1; side by side, (n, h d_v) @ W_O is the layer."""
    torch.manual_seed(h)
    layer = mha.MultiHeadAttention(6, h, head_dim=3).double()
    x = torch.randn(1, 5, 6, dtype=F64)
    _, weights = layer(x)
    values = layer.v_proj(x).view(1, 5, h, 3).transpose(1, 2)  # (1, h, n, d_v)
    heads = list((weights @ values)[0])  # h tensors (n, d_v)
    w_o = layer.out_proj.weight.T  # (h d_v, d)
    with pytest.raises(RuntimeError):
        torch.cat(heads, dim=0) @ w_o  # (h n, d_v) @ (h d_v, d)
    side_by_side = torch.cat(heads, dim=-1) @ w_o + layer.out_proj.bias
    torch.testing.assert_close(side_by_side, layer(x)[0][0])


@pytest.mark.claim("4.6")
def test_concatenation_then_w_o_is_a_sum_of_per_head_maps():
    """Not a "simple concatenation": Concat(heads) W_O = sum_i head_i W_O,i, a sum in which
    every output feature mixes every head; the concatenation alone has h d_v features."""
    torch.manual_seed(11)
    reference = nn.MultiheadAttention(8, 2, bias=False, batch_first=True, dtype=F64)
    layer = mha.MultiHeadAttention.from_torch(reference)
    x = torch.randn(2, 5, 8, dtype=F64)
    _, weights = separate_heads_reference(layer, x, x, x)
    values = layer.v_proj(x).view(2, 5, 2, 4).transpose(1, 2)
    heads = weights @ values  # (B, h, n, d_v)
    concat = heads.transpose(1, 2).reshape(2, 5, 8)
    w_o_blocks = reference.out_proj.weight.T.split(4, dim=0)  # W_O,i: (d_v, d)
    summed = sum(heads[:, i] @ w_o_blocks[i] for i in range(2))
    torch.testing.assert_close(reference(x, x, x)[0], summed)
    assert concat.shape[-1] == 2 * 4
    assert (w_o_blocks[0].abs().sum(0) > 0).all() and (w_o_blocks[1].abs().sum(0) > 0).all()


@pytest.mark.claim("4.10")
def test_head_size_d_over_h_is_a_convention_not_a_requirement():
    """Vaswani et al. and nn.MultiheadAttention take d_k = d_v = d / h; the maths does not need
    it: 3 heads of size 4 on d = 10 equal the slides' separate heads."""
    with pytest.raises(AssertionError, match="divisible"):
        nn.MultiheadAttention(10, 3)
    assert mha.MultiHeadAttention(12, 3).head_dim == 4
    torch.manual_seed(12)
    layer = mha.MultiHeadAttention(10, 3, head_dim=4).double()
    x = torch.randn(2, 5, 10, dtype=F64)
    out, weights = layer(x)
    expected, expected_weights = separate_heads_reference(layer, x, x, x)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(weights, expected_weights)


@pytest.mark.claim("4.11")
def test_the_heads_pass_through_one_affine_map_not_a_feed_forward_network():
    """Both readings of "a feed-forward layer": in nn.MultiheadAttention the concatenated heads
    (computed independently, head by head) go through one affine map W_O (true as one dense
    layer); Vaswani et al.'s feed-forward network is not affine (false as that sublayer)."""
    torch.manual_seed(13)
    reference = nn.MultiheadAttention(8, 2, batch_first=True, dtype=F64)
    with torch.no_grad():
        reference.in_proj_bias.normal_()
        reference.out_proj.bias.normal_()
    layer = mha.MultiHeadAttention.from_torch(reference)
    x = torch.randn(2, 5, 8, dtype=F64)
    _, weights = separate_heads_reference(layer, x, x, x)
    values = layer.v_proj(x).view(2, 5, 2, 4).transpose(1, 2)
    concat = (weights @ values).transpose(1, 2).reshape(2, 5, 8)
    affine = concat @ reference.out_proj.weight.T + reference.out_proj.bias
    torch.testing.assert_close(reference(x, x, x)[0], affine)
    ffn = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 8)).double()
    u, v = torch.randn(2, 8, dtype=F64)
    midpoint_gap = ffn((u + v) / 2) - (ffn(u) + ffn(v)) / 2  # 0 for every affine map
    assert midpoint_gap.abs().max() > 1e-3


@pytest.mark.claim("4.12")
def test_the_trainable_parameters_include_w_o_and_biases():
    """One bias-free head has only W_Q, W_K, W_V; the multi-head layer also trains W_O and,
    in PyTorch and mha by default, four biases: all of them get gradients."""
    assert [name for name, _ in mha.SelfAttention(8).named_parameters()] == [
        "w_q.weight", "w_k.weight", "w_v.weight"]
    for module in (nn.MultiheadAttention(8, 2, batch_first=True), mha.MultiHeadAttention(8, 2)):
        x = torch.randn(2, 5, 8)
        out = module(x, x, x)[0] if isinstance(module, nn.MultiheadAttention) else module(x)[0]
        out.square().sum().backward()
        names = {name for name, p in module.named_parameters()
                 if p.requires_grad and p.grad is not None and p.grad.abs().sum() > 0}
        assert {"out_proj.weight", "out_proj.bias"} <= names
        assert sum("bias" in name for name in names) == (2 if "in_proj_bias" in names else 4)
        assert sum(p.numel() for p in module.parameters()) == 4 * 8 * 8 + 4 * 8


@pytest.mark.claim("4.13")
def test_cross_attention_takes_keys_and_values_from_another_sequence():
    """Queries from one sequence, keys and values from another of other sizes and length:
    equal to nn.MultiheadAttention, weights (B, h, n_q, n_k), and a query's output depends on
    no other query."""
    torch.manual_seed(14)
    reference = nn.MultiheadAttention(8, 2, kdim=5, vdim=3, batch_first=True, dtype=F64)
    layer = mha.MultiHeadAttention.from_torch(reference)
    query = torch.randn(2, 4, 8, dtype=F64)
    key, value = torch.randn(2, 7, 5, dtype=F64), torch.randn(2, 7, 3, dtype=F64)
    out, weights = layer(query, key, value)
    expected, expected_weights = reference(query, key, value, average_attn_weights=False)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(weights, expected_weights)
    assert weights.shape == (2, 2, 4, 7)
    other = query.clone()
    other[:, 1:] = torch.randn(2, 3, 8, dtype=F64)
    torch.testing.assert_close(layer(other, key, value)[0][:, 0], out[:, 0])


# --- where multi-head attention sits: the block, dropout ---

@pytest.mark.parametrize("norm_first", [False, True])
def test_post_norm_and_pre_norm_blocks_equal_torch(norm_first):
    """LN(X + MHA(X)), LN(H + FFN(H)) (Vaswani et al.) and X + MHA(LN(X)), H + FFN(LN(H))
    (pre-norm) around mha.MultiHeadAttention equal nn.TransformerEncoderLayer."""
    torch.manual_seed(15)
    reference = nn.TransformerEncoderLayer(12, 3, dim_feedforward=20, dropout=0.0,
                                           batch_first=True, norm_first=norm_first,
                                           dtype=F64).eval()
    attn = mha.MultiHeadAttention.from_torch(reference.self_attn)

    def ffn(t):
        return reference.linear2(torch.relu(reference.linear1(t)))

    x = torch.randn(2, 6, 12, dtype=F64)
    if norm_first:
        hidden = x + attn(reference.norm1(x))[0]
        out = hidden + ffn(reference.norm2(hidden))
    else:
        hidden = reference.norm1(x + attn(x)[0])
        out = reference.norm2(hidden + ffn(hidden))
    torch.testing.assert_close(out, reference(x))


@pytest.mark.parametrize("p", [0.1, 0.5])
def test_attention_dropout_is_unbiased_and_matches_torch(p):
    """In training, mha's and nn.MultiheadAttention's dropped weights both average to the
    weights without dropout (within 5 standard deviations of the mean of S draws), both zero a
    fraction p of them, rows no longer sum to 1; in eval mode both give exactly the weights."""
    torch.manual_seed(16)
    theirs = nn.MultiheadAttention(8, 2, dropout=p, batch_first=True, dtype=F64)
    ours = mha.MultiHeadAttention.from_torch(theirs)
    assert ours.dropout == p
    x = torch.randn(1, 4, 8, dtype=F64)
    theirs.eval()
    ours.eval()
    clean = theirs(x, x, x, average_attn_weights=False)[1][0]
    out_eval, w_eval = ours(x)
    torch.testing.assert_close(w_eval[0], clean)
    torch.testing.assert_close(out_eval, theirs(x, x, x)[0])
    theirs.train()
    ours.train()
    draws = 4000
    copies = x.expand(draws, 4, 8)
    for w in (ours(copies)[1], theirs(copies, copies, copies, average_attn_weights=False)[1]):
        tolerance = 5 * clean * math.sqrt(p / ((1 - p) * draws))
        assert ((w.mean(0) - clean).abs() <= tolerance).all()
        assert abs((w == 0).double().mean() - p) < 5 * math.sqrt(p * (1 - p) / w.numel())
        nonzero = w != 0
        torch.testing.assert_close(w[nonzero], (clean.expand_as(w) / (1 - p))[nonzero])
        assert (w.sum(-1) - 1).abs().max() > 0.1


def test_minilm_was_configured_with_attention_dropout_of_one_tenth():
    """Chapter 4 says BERT's configuration, kept by all-MiniLM-L6-v2, drops attention weights
    with p = 0.1."""
    transformers = pytest.importorskip("transformers")
    config = transformers.AutoConfig.from_pretrained(mha.models.pretrained.minilm_source())
    assert config.attention_probs_dropout_prob == 0.1


@pytest.mark.claim("4.9")
def test_heads_of_a_trained_language_model_attend_at_different_ranges():
    """On a 13-token sentence, all-MiniLM-L6-v2's heads (weights from Hugging Face transformers)
    differ: their mean attention distances among the words ([CLS] and [SEP] left out, the rest
    renormalised) go from under 1.5 tokens to above uniform attention's, and the heads with the
    largest raw distances sum_j alpha_ij |i - j| put over 0.8 of their weight on [CLS] and [SEP]
    (boundary tokens, not a long range)."""
    transformers = pytest.importorskip("transformers")
    source = mha.models.pretrained.minilm_source()
    model = transformers.AutoModel.from_pretrained(source, attn_implementation="eager").eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(source)
    batch = tokenizer(["The cat sat on the mat because it was tired."], return_tensors="pt")
    with torch.no_grad():
        weights = torch.cat(model(**batch, output_attentions=True).attentions)  # (6, 12, n, n)
    n = weights.shape[-1]
    assert n == 13
    positions = torch.arange(n, dtype=torch.float32)
    gaps = (positions[None, :] - positions[:, None]).abs()
    distance = (weights * gaps).sum(-1).mean(-1)  # (6, 12)
    inner = weights[..., 1:-1, 1:-1]
    inner = inner / inner.sum(-1, keepdim=True)
    inner_distance = (inner * gaps[1:-1, 1:-1]).sum(-1).mean(-1)
    assert inner_distance.min() < 1.5 and inner_distance.max() > gaps[1:-1, 1:-1].mean()
    boundary = (weights[..., 0] + weights[..., -1]).mean(-1)
    farthest = distance.flatten().argsort(descending=True)[:3]
    assert (boundary.flatten()[farthest] > 0.8).all()


# --- the fused fast path equals the explicit one ---

@settings(max_examples=30, deadline=None)
@given(h=st.integers(1, 3), n=st.integers(1, 6), seed=st.integers(0, 2**16),
       kind=st.sampled_from(["bool", "float32", "causal", "padding"]))
def test_fast_path_equals_explicit_path(h, n, seed, kind):
    torch.manual_seed(seed)
    layer = mha.MultiHeadAttention(4 * h, h).double()
    x = torch.randn(2, n, 4 * h, dtype=F64)
    if kind == "bool":  # may leave whole rows without a key: both paths give zeros there
        mask = torch.rand(2, h, n, n) < 0.6
    elif kind == "float32":  # a float mask in another dtype than the input
        mask = torch.randn(n, n).masked_fill(torch.rand(n, n) < 0.3, float("-inf"))
    elif kind == "causal":
        mask = torch.ones(n, n, dtype=torch.bool).tril()
    else:
        mask = (torch.rand(2, 1, 1, n) < 0.7)
    explicit, _ = layer(x, mask=mask)
    fast, _ = layer(x, mask=mask, need_weights=False)
    assert not fast.isnan().any() and not explicit.isnan().any()
    torch.testing.assert_close(fast, explicit)


@pytest.mark.parametrize("kind", ["bool", "float"])
@pytest.mark.parametrize("is_causal", [False, True])
@pytest.mark.parametrize("num_kv_heads", [None, 1])
def test_a_one_dimensional_mask_over_the_keys_works_on_both_paths(kind, is_causal, num_kv_heads):
    torch.manual_seed(0)
    layer = mha.MultiHeadAttention(8, 2, num_kv_heads=num_kv_heads).double().eval()
    x = torch.randn(2, 4, 8, dtype=F64)
    if kind == "bool":  # (n_k,), True = may attend; key 1 forbidden to every query
        mask = torch.tensor([True, False, True, True])
    else:
        mask = torch.randn(4, dtype=F64)
    explicit, _ = layer(x, mask=mask, is_causal=is_causal)
    fused, _ = layer(x, mask=mask, is_causal=is_causal, need_weights=False)
    torch.testing.assert_close(fused, explicit)
    if kind == "bool" and num_kv_heads is None:  # against the head-by-head float64 reference
        allowed = mask & torch.ones(4, 4, dtype=torch.bool).tril() if is_causal else mask
        torch.testing.assert_close(fused, separate_heads_reference(layer, x, x, x, allowed)[0])


def test_a_query_without_keys_gets_the_bias_only():
    layer = mha.MultiHeadAttention(4, 2).double()
    x = torch.randn(1, 3, 4, dtype=F64)
    mask = torch.ones(3, 3, dtype=torch.bool)
    mask[1] = False
    for need_weights in (True, False):
        out, _ = layer(x, mask=mask, need_weights=need_weights)
        torch.testing.assert_close(out[0, 1], layer.out_proj.bias.detach())


@pytest.mark.parametrize("dtype, blocked, as_padding", [
    (torch.float16, -1e9, False),  # float32 mask, -inf only once converted to float16
    (torch.bfloat16, torch.finfo(torch.float32).min, True),  # a padded sequence, likewise
])
def test_a_float_mask_that_is_minus_inf_in_the_layer_dtype_masks_the_row_on_both_paths(
        dtype, blocked, as_padding):
    torch.manual_seed(9)
    layer = mha.MultiHeadAttention(8, 2).to(dtype).eval()
    x = torch.randn(2, 4, 8).to(dtype)
    if as_padding:  # sequence 1 wholly padded: every one of its queries has no key
        arguments = {"key_padding_mask": torch.zeros(2, 4)}
        arguments["key_padding_mask"][1] = blocked
        blocked_rows = (1, slice(None))
    else:  # query 0 of every sequence has no key
        arguments = {"mask": torch.zeros(4, 4)}
        arguments["mask"][0] = blocked
        blocked_rows = (slice(None), 0)
    explicit, weights = layer(x, **arguments)
    fused, _ = layer(x, **arguments, need_weights=False)
    bias = layer.out_proj.bias.detach()
    assert torch.equal(explicit[blocked_rows], bias.expand_as(explicit[blocked_rows]))
    assert torch.equal(fused[blocked_rows], bias.expand_as(fused[blocked_rows]))
    assert not weights.isnan().any()
    torch.testing.assert_close(explicit, fused, atol=2e-2, rtol=2e-2)


def test_rotary_layer_masks_a_row_that_is_minus_inf_in_its_dtype():
    torch.manual_seed(9)
    layer = mha.RotaryMultiHeadAttention(8, 2).half().eval()
    x = torch.randn(2, 4, 8).half()
    large_negative = torch.zeros(4, 4)  # float32: -1e9 is -inf only in float16
    large_negative[0] = -1e9
    allowed = torch.ones(4, 4, dtype=torch.bool)  # the same mask as bool: an independent route
    allowed[0] = False
    out, weights = layer(x, mask=large_negative)
    reference, _ = layer(x, mask=allowed)
    assert not weights.isnan().any()
    assert torch.equal(out[:, 0], layer.out_proj.bias.detach().expand(2, 8))
    torch.testing.assert_close(out, reference)


def test_a_cache_of_another_layer_or_dtype_is_named_and_autocast_blamed_only_when_on():
    x = torch.randn(2, 3, 8)
    layer, cache = mha.MultiHeadAttention(8, 2), mha.KVCache()
    layer(x, cache=cache, is_causal=True)
    held = (cache.keys.clone(), cache.values.clone())
    with pytest.raises(ValueError, match="cache holds keys .*another layer") as raised:
        mha.MultiHeadAttention(8, 4)(x[:, :1], cache=cache, is_causal=True)  # same embed_dim
    assert "d_v must agree" not in str(raised.value)
    with pytest.raises(ValueError, match="float32.*float64.*new cache") as raised:
        layer.double()(x.double()[:, :1], cache=cache, is_causal=True)
    assert "autocast" not in str(raised.value)
    with torch.autocast("cpu", dtype=torch.bfloat16):  # autocast on: it is the likely cause
        with pytest.raises(ValueError, match="torch.autocast casts"):
            layer(x.double()[:, :1], cache=cache, is_causal=True)
    assert all(torch.equal(a, b) for a, b in zip(held, (cache.keys, cache.values), strict=True))



def test_fused_path_on_nan_inputs_keeps_to_the_memory_budget_and_the_cache():
    """need_weights=False computes the weights in the open when the inputs hold NaN (the
    fused kernel would hide it): that path is checked against the budget as need_weights=True
    is, before the cache grows."""
    torch.manual_seed(0)
    layer = mha.MultiHeadAttention(8, 1)
    x = torch.randn(1, 600, 8)
    bad = x.clone()
    bad[0, 3, 0] = float("nan")
    with mha.memory_budget(200_000):  # the weights (1, 1, 600, 600) need 1.44 MB
        assert torch.isfinite(layer(x, need_weights=False)[0]).all()  # fused: no weights
        with pytest.raises(mha.MemoryBudgetError, match="need_weights=False"):
            layer(bad, need_weights=False)
        cache = mha.KVCache()
        layer(x[:, :300], cache=cache, need_weights=False)
        keys = cache.keys
        with pytest.raises(mha.MemoryBudgetError, match="need_weights=False"):
            layer(bad[:, :300], cache=cache, need_weights=False)  # (300, 600) weights
        assert len(cache) == 300 and cache.keys is keys
    out = layer(bad, need_weights=False)[0]  # within the budget: the rule of mha.attention
    torch.testing.assert_close(out, layer(bad)[0], equal_nan=True)


def test_fused_path_takes_finite_float16_whose_sum_overflows(monkeypatch):
    """The look for NaN and inf summed Q, K and V: finite float16 values summing past 65504
    gave inf, and the call built the full weights in the open for nothing."""
    layer = mha.MultiHeadAttention(8, 2).half()
    with torch.no_grad():
        for proj in (layer.q_proj, layer.k_proj, layer.v_proj, layer.out_proj):
            proj.weight.copy_(torch.eye(8))
            proj.bias.zero_()
    x = torch.full((1, 100, 8), 100.0, dtype=torch.float16)  # sum 80000: inf in float16
    taken = []
    explicit = mha.MultiHeadAttention._explicit_attention
    monkeypatch.setattr(mha.MultiHeadAttention, "_explicit_attention",
                        lambda *args: taken.append(1) or explicit(*args))
    out = layer(x, need_weights=False)[0]
    assert not taken
    # every key is equal: uniform weights, and the output is the value 100 itself
    torch.testing.assert_close(out, x)

# --- head_mask ---

def test_head_mask_gates_each_head_before_the_output_projection():
    torch.manual_seed(2)
    layer = mha.MultiHeadAttention(6, 3).double()
    x = torch.randn(2, 4, 6, dtype=F64)
    gates = torch.tensor([[1.0, 0.0, 0.5], [0.0, 2.0, 1.0]], dtype=F64)
    out, weights = layer(x, head_mask=gates)
    _, ref_weights = separate_heads_reference(layer, x, x, x)
    heads = ref_weights @ layer.v_proj(x).view(2, 4, 3, 2).transpose(1, 2)
    heads = heads * gates[:, :, None, None]
    expected = layer.out_proj(heads.transpose(1, 2).reshape(2, 4, 6))
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(weights, ref_weights)  # weights are before the gate
    fast, _ = layer(x, head_mask=gates, need_weights=False)
    torch.testing.assert_close(fast, expected)


# --- parameter count (seed 002): independent of h when d_k = d_v = d / h ---

def mha_parameter_formula(d, h, dk, dv, kdim, vdim, bias):
    weights = d * h * dk + kdim * h * dk + vdim * h * dv + h * dv * d
    return weights + (2 * h * dk + h * dv + d if bias else 0)


@pytest.mark.claim("4.2")
@pytest.mark.parametrize("bias", [True, False])
def test_parameter_count_is_independent_of_h_when_head_dim_is_d_over_h(bias):
    d = 24
    counts = set()
    for h in [h for h in range(1, d + 1) if d % h == 0]:
        layer = mha.MultiHeadAttention(d, h, bias=bias)
        n_params = sum(p.numel() for p in layer.parameters())
        assert n_params == mha_parameter_formula(d, h, d // h, d // h, d, d, bias)
        counts.add(n_params)
    assert counts == {4 * d * d + (4 * d if bias else 0)}


@pytest.mark.claim("4.2")
def test_parameter_count_grows_with_h_at_fixed_head_dim():
    counts = [sum(p.numel() for p in mha.MultiHeadAttention(8, h, head_dim=4).parameters())
              for h in (1, 2, 4)]
    assert counts == [mha_parameter_formula(8, h, 4, 4, 8, 8, True) for h in (1, 2, 4)]
    assert counts[0] < counts[1] < counts[2]


# --- bad input: ValueError naming the shapes ---

def test_construction_errors_name_the_values():
    with pytest.raises(ValueError, match=r"embed_dim=10 is not divisible by num_heads=3"):
        mha.MultiHeadAttention(10, 3)
    assert mha.MultiHeadAttention(10, 3, head_dim=4).q_proj.out_features == 12
    with pytest.raises(ValueError, match="num_heads must be a positive int, got 0"):
        mha.MultiHeadAttention(8, 0)
    with pytest.raises(ValueError, match="num_heads must be a positive int, got True"):
        mha.MultiHeadAttention(8, True)
    with pytest.raises(ValueError, match="head_dim must be a positive int, got 2.0"):
        mha.MultiHeadAttention(8, 2, head_dim=2.0)


def test_input_errors_name_the_shapes():
    layer = mha.MultiHeadAttention(8, 2, kdim=5, vdim=3)
    q, k, v = torch.randn(2, 4, 8), torch.randn(2, 6, 5), torch.randn(2, 6, 3)
    with pytest.raises(
        ValueError, match=r"query must have shape \(batch, tokens, 8\), got \(2, 4, 7\)"
    ):
        layer(torch.randn(2, 4, 7), k, v)
    with pytest.raises(
        ValueError, match=r"key must have shape \(batch, tokens, 5\), got \(2, 6, 8\)"
    ):
        layer(q, torch.randn(2, 6, 8), v)
    with pytest.raises(
        ValueError, match=r"value must have shape \(batch, tokens, 3\), got \(2, 6, 5\)"
    ):
        layer(q, k, torch.randn(2, 6, 5))
    with pytest.raises(
        ValueError, match=r"query must have shape \(batch, tokens, 8\), got \(4, 8\)"
    ):
        layer(torch.randn(4, 8), k, v)
    with pytest.raises(ValueError, match=r"same batch size: \(2, 4, 8\), \(3, 6, 5\)"):
        layer(q, torch.randn(3, 6, 5), torch.randn(3, 6, 3))
    with pytest.raises(
        ValueError, match=r"same number of tokens: key \(2, 6, 5\), value \(2, 5, 3\)"
    ):
        layer(q, k, torch.randn(2, 5, 3))
    with pytest.raises(ValueError, match="floating dtype"):
        layer(q.long(), k, v)


def test_mask_errors_name_the_shapes():
    layer = mha.MultiHeadAttention(8, 2)
    x = torch.randn(2, 4, 8)
    with pytest.raises(
        ValueError, match=r"mask of shape \(4, 5\) does not broadcast to .*\(2, 2, 4, 4\)"
    ):
        layer(x, mask=torch.ones(4, 5, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"3-D mask of shape \(2, 4, 4\) is ambiguous"):
        layer(x, mask=torch.ones(2, 4, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match="mask must be bool"):
        layer(x, mask=torch.ones(4, 4, dtype=torch.long))
    with pytest.raises(
        ValueError, match=r"head_mask must have shape \(2,\) or \(2, 2\) for 2 heads, got \(3,\)"
    ):
        layer(x, head_mask=torch.ones(3))
    with pytest.raises(ValueError, match="head_mask must be a torch.Tensor, got list"):
        layer(x, head_mask=[1.0, 1.0])


def slide_heads(d, h, dk, dv):
    """The slides' picture: h separate heads (with biases) and W_O, here with d_k != d_v."""
    return nn.ModuleList(mha.SelfAttention(d, key_dim=dk, value_dim=dv, bias=True)
                         for _ in range(h)), nn.Linear(h * dv, d)


@pytest.mark.claim("4.2", "4.5")
@pytest.mark.parametrize("h, dk, dv", [(1, 3, 5), (2, 3, 5), (3, 4, 2), (4, 2, 6)])
def test_general_parameter_and_flop_counts_with_d_k_not_d_v(h, dk, dv):
    """N = 2(d h d_k + h d_k) + d h d_v + h d_v + h d_v d + d parameters and
    F = 2 n d (2 h d_k + h d_v) + 2 n^2 h d_k + 2 n^2 h d_v + 2 n h d_v d matmul FLOPs."""
    from torch.utils.flop_counter import FlopCounterMode

    d, n = 7, 6
    heads, w_o = slide_heads(d, h, dk, dv)
    counted = sum(p.numel() for p in [*heads.parameters(), *w_o.parameters()])
    assert counted == 2 * (d * h * dk + h * dk) + d * h * dv + h * dv + h * dv * d + d
    assert counted == mha_parameter_formula(d, h, dk, dv, d, d, True)
    x = torch.randn(1, n, d)
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        w_o(torch.cat([head(x)[0] for head in heads], dim=-1))
    assert counter.get_total_flops() == (2 * n * d * (2 * h * dk + h * dv) + 2 * n * n * h * dk
                                         + 2 * n * n * h * dv + 2 * n * h * dv * d)


# --- FLOPs (seed 002, implied): the matrix products do not depend on h when d_k = d / h ---

@pytest.mark.claim("4.5")
def test_matmul_flops_are_independent_of_h():
    from torch.utils.flop_counter import FlopCounterMode

    d, n = 32, 10
    x = torch.randn(2, n, d)
    for h in (1, 2, 4, 8, 32):
        with FlopCounterMode(display=False) as counter, torch.no_grad():
            mha.MultiHeadAttention(d, h)(x)
        # per sequence: projections 6 n d^2, scores 2 n^2 d, A V 2 n^2 d, W_O 2 n d^2
        assert counter.get_total_flops() == 2 * (8 * n * d * d + 4 * n * n * d)


# --- chapter 3's limit and chapter 4's remedy: how many look-ups h heads can serve ---

@pytest.fixture
def one_thread():
    """Training tiny models: one thread is faster than two, and far faster on a busy machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def lookup_error(model, n, m, lookups, batch=2048, seed=12345):
    """Relative error E||f(x) - y||^2 / E||y||^2 (E||y||^2 = L m exactly) and its standard error,
    from the per-sequence errors, which are independent."""
    x, y, _ = mha.lookup_task(batch, n, m, lookups, generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        per_sequence = (model(x) - y).square().sum(-1).mean(-1) / (lookups * m)  # (B,)
    return per_sequence.mean().item(), (per_sequence.std() / math.sqrt(batch)).item()


def train_heads(n, m, lookups, heads, head_dim, seed, steps=200):
    torch.manual_seed(seed)
    d = (1 + lookups) * n + lookups * m
    model = mha.LookupModel(mha.MultiHeadAttention(d, heads, head_dim=head_dim), d, lookups * m)
    mha.train_lookup(model, n, m, n_lookups=lookups, steps=steps, batch=64, seed=seed)
    return model


@settings(max_examples=25, deadline=None)
@given(n=st.integers(3, 6), lookups=st.integers(1, 3), h=st.integers(1, 3), m=st.integers(1, 2),
       sharpness=st.floats(0.0, 4.0), seed=st.integers(0, 2**16))
@pytest.mark.claim("3.2", "4.4")
def test_the_best_read_out_of_content_blind_heads_meets_the_lemma(n, lookups, h, m, sharpness,
                                                                   seed):
    """lem-04-h-heads (lem-03-two-lookups is h = 1, L = 2): with the heads' weights fixed (blind to
    the contents), the least error of ANY affine read-out, fitted by least squares on sampled
    contents in float64, is m * sum_r dist^2(e_{p_r}, U), U = span of the weight vectors, and
    this is at least m (L - h) when the L sources differ."""
    g = torch.Generator().manual_seed(seed)
    alphas = torch.softmax(sharpness * torch.randn(h, n, generator=g, dtype=F64), dim=-1)  # (h, n)
    singular = torch.linalg.svdvals(alphas)
    # nearly parallel weight vectors make the optimum need huge coefficients: ill-conditioned
    assume(singular.min() > 1e-3 * singular.max())
    sources = torch.randperm(n, generator=g)[:lookups]  # L different tokens
    samples = 20000
    contents = torch.randn(samples, lookups, n, m, generator=g, dtype=F64)  # c^r_l
    read = torch.einsum("tl,srlm->strm", alphas, contents).reshape(samples, -1)  # what heads read
    features = torch.cat([read, torch.ones(samples, 1, dtype=F64)], dim=1)
    target = contents[:, torch.arange(lookups), sources].reshape(samples, -1)  # (S, L m)
    fit = torch.linalg.lstsq(features, target, driver="gelsd").solution
    least_error = (features @ fit - target).square().sum(-1).mean().item()

    projection = torch.linalg.pinv(alphas) @ alphas  # onto U, (n, n)
    distances = 1 - projection.diagonal()[sources]  # dist^2(e_p, U) = 1 - <e_p, Pi e_p>
    formula = m * distances.sum().item()
    assert formula >= m * (lookups - h) - 1e-9
    assert abs(least_error - formula) <= 0.05 * formula + 0.01 * m


@pytest.mark.claim("3.2", "4.4", "4.7", "4.8")
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_trained_single_heads_stay_at_the_bound(seed, one_thread):
    """Trained heads may use the contents (the lemma assumes they do not); none beats the bound
    (1 - 1/n)/2 by more than four standard errors of the estimate."""
    n, m = 6, 3
    model = train_heads(n, m, 2, heads=1, head_dim=16, seed=seed)
    error, se = lookup_error(model, n, m, 2)
    assert error > 0.5 * (1 - 1 / n) - 4 * se


@pytest.mark.claim("4.4", "4.7", "4.8", "4.9")
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_two_trained_heads_solve_two_lookups(seed, one_thread):
    """Two heads of half the width (same total width as the single head above) solve it, each
    putting most of its weight on one token: the same granularity for both heads."""
    n, m = 6, 3
    model = train_heads(n, m, 2, heads=2, head_dim=8, seed=seed)
    error, _ = lookup_error(model, n, m, 2)
    assert error < 0.02
    x, _, _ = mha.lookup_task(256, n, m, 2, generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        _, weights = model.attention(x)  # (B, 2, n, n)
    assert (weights.max(dim=-1).values.mean(dim=(0, 2)) > 0.9).all()


def hand_built_heads(n, m, lookups, lam):
    """L heads, head r: queries lam sqrt(d_k) want_r, keys the names, values the r-th content;
    W_O puts head r's content in block r of the output (the first L m features)."""
    d = (1 + lookups) * n + lookups * m
    layer = mha.MultiHeadAttention(d, lookups, head_dim=n, bias=False).double()
    q, k, v, o = (torch.zeros_like(p.weight) for p in
                  (layer.q_proj, layer.k_proj, layer.v_proj, layer.out_proj))
    eye = torch.eye(n, dtype=F64)
    for r in range(lookups):
        rows = slice(r * n, (r + 1) * n)  # head r's block of the projections (nn.Linear: W^T)
        q[rows, (1 + r) * n:(2 + r) * n] = lam * math.sqrt(n) * eye  # want_r
        k[rows, :n] = eye  # name
        start = (1 + lookups) * n + r * m
        v[r * n:r * n + m, start:start + m] = torch.eye(m, dtype=F64)  # content r
        o[r * m:(r + 1) * m, r * n:r * n + m] = torch.eye(m, dtype=F64)
    with torch.no_grad():
        for p, w in zip((layer.q_proj, layer.k_proj, layer.v_proj, layer.out_proj), (q, k, v, o),
                        strict=True):
            p.weight.copy_(w)
    return layer


@pytest.mark.claim("4.4")
@pytest.mark.parametrize("lam", [2.0, 5.0, 10.0])
def test_two_hand_built_heads_do_two_lookups_with_the_proven_error(lam):
    """The constructive half of lem-04-h-heads: h = L heads reach relative error
    n (n - 1) / (e^lam + n - 1)^2, which goes to 0 (checked on sampled sequences)."""
    n, m, lookups = 6, 3, 2
    layer = hand_built_heads(n, m, lookups, lam)
    x, y, _ = mha.lookup_task(4096, n, m, lookups, generator=torch.Generator().manual_seed(3))
    out, _ = layer(x.double())
    per_sequence = (out[..., :lookups * m] - y.double()).square().sum(-1).mean(-1) / (lookups * m)
    expected = n * (n - 1) / (math.exp(lam) + n - 1) ** 2
    assert abs(per_sequence.mean().item() - expected) < 4 * per_sequence.std().item() / 64 + 1e-12


@pytest.mark.claim("4.1")
@pytest.mark.parametrize("seed", [0, 1])
def test_the_split_input_layer_in_the_chapters_order_cannot_beat_one_minus_one_over_n(seed,
                                                                                       one_thread):
    """Seed 002 read literally, features in the task's order (chunks of d/h = 12 < 2n + m = 15
    features) on two look-ups: its output is f(chunk 0) + g(chunk 1), whose best is the average
    content: 1 - 1/n."""
    n, m = 6, 3
    torch.manual_seed(seed)
    d = 3 * n + 2 * m
    model = mha.LookupModel(mha.SplitInputAttention(d, 2), d, 2 * m)
    mha.train_lookup(model, n, m, n_lookups=2, steps=200, batch=64, seed=seed)
    error, se = lookup_error(model, n, m, 2)
    assert error > 1 - 1 / n - 4 * se


@pytest.mark.claim("4.1")
def test_the_average_content_reaches_one_minus_one_over_n():
    """The best answer in the chapter's order, the sequence's average content, has relative
    error 1 - 1/n: 0.875 for the chapter's n = 8 (so the bound is reached, not only a bound)."""
    n, m = 8, 4
    x, y, _ = mha.lookup_task(4096, n, m, 2, generator=torch.Generator().manual_seed(4))
    contents = x[..., 3 * n:].double()  # (B, n, 2 m): both contents, as the target's blocks
    average = contents.mean(dim=1, keepdim=True).expand_as(contents)
    per_sequence = (average - y.double()).square().sum(-1).mean(-1) / (2 * m)
    se = per_sequence.std().item() / 64
    assert 1 - 1 / n == 0.875
    assert per_sequence.mean().item() == pytest.approx(0.875, abs=4 * se)


class Reordered(nn.Module):
    """A layer on the token's features in another order: ``layer(x[..., order])``."""

    def __init__(self, layer, order):
        super().__init__()
        self.layer, self.order = layer, list(order)

    def forward(self, x):
        return self.layer(x[..., self.order])


def halves_order(n, m):
    """The task's features with chunk 0 = names 0..n/2-1, the same entries of both wants and the
    first contents, chunk 1 = the other halves and the second contents."""
    half, names, want_1, want_2 = n // 2, range(n), range(n, 2 * n), range(2 * n, 3 * n)
    content_1, content_2 = range(3 * n, 3 * n + m), range(3 * n + m, 3 * n + 2 * m)
    return ([*names[:half], *want_1[:half], *want_2[:half], *content_1]
            + [*names[half:], *want_1[half:], *want_2[half:], *content_2])


def hand_built_split_layer_in_halves_order(n, m, lam):
    """Head t (chunk t) serves look-up t + 1: weight e^lam on the wanted name if it is among the
    names it sees, else on the n/2 tokens whose names it does not see (an extra query-key
    dimension that is 1 exactly for "want not visible" and "name not visible"); value: content."""
    d, half = 3 * n + 2 * m, n // 2
    c = d // 2
    wq, wk, wv = (torch.zeros(d, d) for _ in range(3))  # (in, out): the seed's W
    bq, bk = torch.zeros(d), torch.zeros(d)
    scale = lam * math.sqrt(c)
    for t in range(2):
        start = t * c  # chunk t: names, want_1 part, want_2 part, content t + 1
        want = start + half * (1 + t)
        for a in range(half):
            wq[want + a, start + a] = scale
            wk[start + a, start + a] = 1.0
        extra = start + half
        wq[want:want + half, extra], bq[extra] = -scale, scale
        wk[start:start + half, extra], bk[extra] = -1.0, 1.0
        for j in range(m):
            wv[start + 3 * half + j, start + j] = 1.0
    layer = mha.SplitInputAttention(d, 2)
    readout = nn.Linear(d, 2 * m)
    with torch.no_grad():
        layer.q_proj.weight, layer.k_proj.weight, layer.v_proj.weight = wq.T, wk.T, wv.T
    for proj, w in ((layer.q_proj, wq), (layer.k_proj, wk), (layer.v_proj, wv)):
        # block diagonal, so the layer's constraint keeps every weight set above
        torch.testing.assert_close(proj.weight.detach(), w.T)
    with torch.no_grad():
        layer.q_proj.bias.copy_(bq)
        layer.k_proj.bias.copy_(bk)
        layer.v_proj.bias.zero_()
        layer.out_proj.weight.copy_(torch.eye(d))
        layer.out_proj.bias.zero_()
        readout.weight.zero_()
        readout.bias.zero_()
        for j in range(m):
            readout.weight[j, j] = readout.weight[m + j, c + j] = 1.0
    model = mha.LookupModel(Reordered(layer, halves_order(n, m)), d, 2 * m)
    model.readout = readout
    return model


@pytest.mark.claim("4.1")
def test_a_split_layer_in_the_halves_order_reaches_three_eighths(one_thread):
    """Another order of the same features: each head finds its look-up's source when the wanted
    name is among the n/2 it sees, else returns the average of n/2 contents, so the best relative
    error is (1/2)(1 - 2/n), 0.375 for n = 8, below one full head's (1/2)(1 - 1/n) = 0.4375."""
    n, m = 8, 4
    assert (0.5 * (1 - 2 / n), 0.5 * (1 - 1 / n)) == (0.375, 0.4375)
    hand = hand_built_split_layer_in_halves_order(n, m, lam=10.0)
    error, se = lookup_error(hand, n, m, 2)
    assert error == pytest.approx(0.375, abs=4 * se + 1e-3)  # e^-10 tails: about 1e-4


@pytest.mark.claim("4.1")
@pytest.mark.parametrize("seed", [0, 1])
def test_the_trained_split_layer_in_the_halves_order_beats_one_full_head(seed, one_thread):
    """Trained as the chapter trains it (400 steps), the split layer in the halves order lands
    between its best, 0.375, and one full head's bound, 0.4375."""
    n, m = 8, 4
    d = 3 * n + 2 * m
    torch.manual_seed(seed)
    model = mha.LookupModel(Reordered(mha.SplitInputAttention(d, 2), halves_order(n, m)), d, 2 * m)
    mha.train_lookup(model, n, m, n_lookups=2, steps=400, batch=64, seed=seed)
    error, se = lookup_error(model, n, m, 2)
    assert 0.375 - 4 * se < error < 0.4375


@pytest.mark.claim("4.7", "4.8")
@pytest.mark.parametrize("seed", [0, 1])
def test_too_many_heads_fail_and_one_head_suffices_for_one_lookup(seed, one_thread):
    """Total width 16 on two look-ups, trained with the same budget: 16 heads of width 1 fail
    (each ranks the keys the same way for every query); on one look-up one head is enough."""
    n, m = 6, 3
    error, _ = lookup_error(train_heads(n, m, 2, heads=16, head_dim=1, seed=seed), n, m, 2)
    assert error > 0.3
    error, _ = lookup_error(train_heads(n, m, 1, heads=1, head_dim=16, seed=seed), n, m, 1)
    assert error < 0.02


# The cases below were silently wrong before issue 27's fixes; each is checked against an
# independent reference (nn.MultiheadAttention, scaled_dot_product_attention or float64).

def seeded(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def randn(*shape, dtype=torch.float64, seed=0):
    return torch.randn(*shape, generator=seeded(seed), dtype=dtype)


# --- from_torch copies the mode; to_torch goes back ------------------------------------------

@pytest.mark.parametrize("train", [False, True])
def test_from_torch_copies_train_or_eval_mode(train):
    torch.manual_seed(0)
    theirs = nn.MultiheadAttention(8, 2, dropout=0.5, batch_first=True).train(train)
    ours = mha.MultiHeadAttention.from_torch(theirs)
    assert ours.training == train
    if not train:  # deterministic: equal to torch's outputs
        x = randn(2, 5, 8, dtype=torch.float32)
        expected, expected_w = theirs(x, x, x, average_attn_weights=False)
        got, got_w = ours(x)
        torch.testing.assert_close(got, expected)
        torch.testing.assert_close(got_w, expected_w)


@pytest.mark.parametrize("kdim,vdim,bias,dropout,train",
                         [(None, None, True, 0.0, False), (6, 10, True, 0.1, False),
                          (None, None, False, 0.2, True), (5, None, False, 0.0, True)])
def test_to_torch_equals_ours_and_round_trips_exactly(kdim, vdim, bias, dropout, train):
    torch.manual_seed(0)
    ours = mha.MultiHeadAttention(8, 2, kdim=kdim, vdim=vdim, bias=bias,
                                  dropout=dropout).double().train(train)
    theirs = ours.to_torch()
    assert type(theirs) is nn.MultiheadAttention and theirs.batch_first
    assert (theirs.dropout, theirs.training) == (dropout, train)
    assert theirs.out_proj.weight.dtype == torch.float64
    back = mha.MultiHeadAttention.from_torch(theirs)
    assert back.training == train
    assert back.state_dict().keys() == ours.state_dict().keys()
    for name, value in ours.state_dict().items():
        assert torch.equal(back.state_dict()[name], value), name
    ours.eval(), theirs.eval()
    q, k, v = randn(3, 4, 8, seed=1), randn(3, 6, kdim or 8, seed=2), randn(3, 6, vdim or 8,
                                                                          seed=3)
    padding = torch.tensor([[False] * 6, [False] * 4 + [True] * 2, [True] + [False] * 5])
    expected, expected_w = theirs(q, k, v, key_padding_mask=padding,
                                  average_attn_weights=False)
    got, got_w = ours(q, k, v, key_padding_mask=padding)
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(got_w, expected_w)


def test_to_torch_refuses_what_torch_cannot_hold():
    for layer, word in [(mha.MultiHeadAttention(8, 4, num_kv_heads=2), "num_kv_heads"),
                        (mha.MultiHeadAttention(8, 2, head_dim=3), "head_dim"),
                        (mha.RotaryMultiHeadAttention(8, 2), "RotaryMultiHeadAttention")]:
        with pytest.raises(ValueError, match=word):
            layer.to_torch()



def test_to_torch_refuses_projections_torch_cannot_hold():
    """GridSelfAttention's out_proj maps embed_dim to out_channels: copy_ would broadcast its
    (1, 4) weight into torch's (4, 4) one and return another module, with no error."""
    grid = mha.GridSelfAttention(4, 1, num_heads=2, head_dim=2).attn
    with pytest.raises(ValueError,
                       match=r"module\.out_proj must be an nn\.Linear\(4, 4\).*to_torch"):
        grid.to_torch()
    no_k_bias = mha.MultiHeadAttention(8, 2)
    no_k_bias.k_proj = nn.Linear(8, 8, bias=False)
    with pytest.raises(ValueError, match="bias"):
        no_k_bias.to_torch()
    subclassed = mha.MultiHeadAttention(8, 2)
    subclassed.v_proj = type("LoRALinear", (nn.Linear,), {})(8, 8)
    with pytest.raises(ValueError, match="module.v_proj"):
        subclassed.to_torch()


def test_to_torch_converts_a_parametrized_projection_with_its_effective_weight():
    torch.manual_seed(0)
    ours = mha.MultiHeadAttention(8, 2).double().eval()
    nn.utils.parametrizations.weight_norm(ours.q_proj)
    theirs = ours.to_torch()
    x = torch.randn(2, 5, 8, dtype=torch.float64)
    torch.testing.assert_close(theirs(x, x, x)[0], ours(x)[0])

# --- key_padding_mask with torch's meaning ---------------------------------------------------

@pytest.mark.parametrize("need_weights", [True, False])
@pytest.mark.parametrize("causal", [False, True])
def test_key_padding_mask_equals_nn_multihead_attention_when_batch_equals_n_q(
        need_weights, causal):
    """B == n_q: the case a (B, n_k) padding passed as ``mask`` was read as (n_q, n_k)."""
    torch.manual_seed(0)
    theirs = nn.MultiheadAttention(8, 2, batch_first=True).double().eval()
    ours = mha.MultiHeadAttention.from_torch(theirs)
    batch = n = 4
    x = randn(batch, n, 8)
    padding = torch.tensor([[False, False, False, True], [False, False, True, True],
                            [False, False, False, False], [False, True, True, True]])
    future = torch.ones(n, n, dtype=torch.bool).triu(1) if causal else None  # torch: True = no
    expected, _ = theirs(x, x, x, key_padding_mask=padding, attn_mask=future)
    got, _ = ours(x, key_padding_mask=padding, is_causal=causal, need_weights=need_weights)
    torch.testing.assert_close(got, expected)
    # and the same padding as a (B, n_k) ``mask`` is read as (n_q, n_k), as documented:
    # it differs (that was the trap), and equals torch's 2-D attn_mask reading
    as_rows, _ = ours(x, mask=~padding)
    rows_expected, _ = theirs(x, x, x, attn_mask=padding)
    torch.testing.assert_close(as_rows, rows_expected)
    assert not torch.allclose(as_rows, theirs(x, x, x, key_padding_mask=padding)[0])


def test_float_key_padding_mask_is_added_as_in_torch():
    torch.manual_seed(0)
    theirs = nn.MultiheadAttention(8, 2, batch_first=True).double().eval()
    ours = mha.MultiHeadAttention.from_torch(theirs)
    x, padding = randn(3, 5, 8), randn(3, 5, seed=7)
    mask = torch.tensor([[True] * 5] * 4 + [[True, False, True, True, True]])  # (n_q, n_k)
    expected, expected_w = theirs(x, x, x, key_padding_mask=padding,
                                  attn_mask=(~mask).double() * -1e300,
                                  average_attn_weights=False)
    got, got_w = ours(x, mask=mask, key_padding_mask=padding)
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(got_w, expected_w)


def test_key_padding_mask_and_padding_mask_shape_errors():
    layer = mha.MultiHeadAttention(8, 2)
    x = torch.zeros(2, 3, 8)
    with pytest.raises(ValueError, match=r"key_padding_mask must have shape \(B, n_k\)"):
        layer(x, key_padding_mask=torch.zeros(3, 2, dtype=torch.bool))
    with pytest.raises(ValueError, match="key_padding_mask must be bool"):
        layer(x, key_padding_mask=torch.zeros(2, 3, dtype=torch.int64))
    with pytest.raises(ValueError, match="key_padding_mask"):  # (B, n_k) as mask: the hint
        layer(x, mask=torch.ones(2, 3, dtype=torch.bool))


def test_fused_path_checks_the_budget_of_a_mask_it_builds_before_the_cache_grows():
    """need_weights=False merges key_padding_mask with is_causal (or a 2-D mask) into a
    (B, 1, n_q, n_k) mask: refused over the budget as the weights are, and within it the
    same outputs as the weights path."""
    torch.manual_seed(0)
    layer = mha.MultiHeadAttention(8, 2).eval()
    batch, n = 2, 300
    x = torch.randn(batch, n, 8)
    bool_padding = torch.zeros(batch, n, dtype=torch.bool)
    bool_padding[0, -5:] = True
    float_padding = torch.zeros(batch, n).masked_fill(bool_padding, float("-inf"))
    two_d = torch.ones(n, n, dtype=torch.bool).tril()
    calls = [dict(key_padding_mask=bool_padding, is_causal=True),  # (2, 1, 300, 300) bool
             dict(key_padding_mask=float_padding, is_causal=True),  # float32: 720 kB
             dict(key_padding_mask=bool_padding, mask=two_d)]
    with mha.memory_budget(150_000):  # over the 180 kB bool mask, under the inputs' needs
        for kwargs in calls:
            with pytest.raises(mha.MemoryBudgetError, match="mask"):
                layer(x, need_weights=False, **kwargs)
        cache = mha.KVCache()
        layer(x[:, :1], cache=cache, need_weights=False, is_causal=True)
        keys = cache.keys
        with pytest.raises(mha.MemoryBudgetError, match="causal mask"):
            layer(x[:, 1:], cache=cache, need_weights=False, is_causal=True,
                  key_padding_mask=bool_padding)
        assert len(cache) == 1 and cache.keys is keys
    for kwargs in calls:  # within the budget: the fused path computes the weights path's
        torch.testing.assert_close(layer(x, need_weights=False, **kwargs)[0],
                                   layer(x, **kwargs)[0])


def test_nan_in_a_float_mask_at_a_causally_forbidden_key_reaches_the_output_on_every_path():
    """is_causal is added to a float mask (0 and -inf), not filled in: a NaN at a future key
    makes that query's output NaN, as SDPA given the sum of the mask and the causal one does
    (float64), on mha.attention, the weights path and the fused one."""
    torch.manual_seed(0)
    q = torch.randn(1, 4, 4, dtype=torch.float64)
    float_mask = torch.zeros(4, 4, dtype=torch.float64)
    float_mask[1, 2] = float("nan")  # query 1, key 2: in its future
    causal = torch.zeros(4, 4, dtype=torch.float64).masked_fill(
        ~torch.ones(4, 4, dtype=torch.bool).tril(), float("-inf"))
    reference = F.scaled_dot_product_attention(q, q, q, attn_mask=float_mask + causal)
    expected = reference.isnan().any(-1)
    assert expected.tolist() == [[False, True, False, False]]
    out = mha.attention(q, q, q, mask=float_mask, is_causal=True)[0]
    assert torch.equal(out.isnan().any(-1), expected)
    torch.testing.assert_close(out[:, [0, 2, 3]], reference[:, [0, 2, 3]])
    layer = mha.MultiHeadAttention(8, 2).double().eval()
    x = torch.randn(1, 4, 8, dtype=torch.float64)
    for need_weights in (True, False):
        rows = layer(x, mask=float_mask, is_causal=True, need_weights=need_weights)[0]
        assert torch.equal(rows.isnan().any(-1), expected)
    previous = mha.set_debug(False)  # no look for NaN: PyTorch's fused kernel itself
    try:
        rows = layer(x, mask=float_mask, is_causal=True, need_weights=False)[0]
    finally:
        mha.set_debug(previous)
    assert torch.equal(rows.isnan().any(-1), expected)


def test_forward_ad_and_double_backward_take_the_documented_routes():
    """The fused CPU kernel has neither (the docstring says so): need_weights=True and the
    fused call under sdpa_kernel(MATH) give reverse mode's Jacobian (float64) and a double
    backward."""
    from torch.func import jacfwd, jacrev
    from torch.nn.attention import SDPBackend, sdpa_kernel
    torch.manual_seed(0)
    layer = mha.MultiHeadAttention(4, 2).double().eval()
    x = torch.randn(1, 3, 4, dtype=torch.float64)
    assert "sdpa_kernel" in mha.MultiHeadAttention.__doc__
    assert "double backward" in mha.MultiHeadAttention.__doc__
    reference = jacrev(lambda x: layer(x, need_weights=False)[0])(x)  # reverse mode works
    with pytest.raises((NotImplementedError, RuntimeError)):  # what the docstring warns of
        jacfwd(lambda x: layer(x, need_weights=False)[0])(x)
    torch.testing.assert_close(jacfwd(lambda x: layer(x, need_weights=True)[0])(x), reference)
    with sdpa_kernel(SDPBackend.MATH):
        torch.testing.assert_close(jacfwd(lambda x: layer(x, need_weights=False)[0])(x),
                                   reference)

    def penalty(need_weights):
        y = x.clone().requires_grad_()
        grad, = torch.autograd.grad(layer(y, need_weights=need_weights)[0].sum(), y,
                                    create_graph=True)
        return torch.autograd.grad(grad.square().sum(), y)[0]
    with sdpa_kernel(SDPBackend.MATH):
        torch.testing.assert_close(penalty(False), penalty(True))


def test_device_hints_are_code_that_runs():
    """The hint said mask.to(the module.device), which is not Python."""
    layer, x = mha.MultiHeadAttention(8, 2), torch.randn(2, 4, 8)
    for name, bad in [("mask", torch.ones(4, 4, dtype=torch.bool, device="meta")),
                      ("key_padding_mask", torch.zeros(2, 4, dtype=torch.bool, device="meta"))]:
        with pytest.raises(ValueError, match=rf"{name}\.to\('cpu'\)") as raised:
            layer(x, **{name: bad})
        assert "the module.device" not in str(raised.value)


@pytest.mark.filterwarnings("ignore:There is a performance drop:UserWarning")  # torch's vmap
@pytest.mark.parametrize("mapped", ["float mask", "float key_padding_mask", "key and value"])
@pytest.mark.parametrize("grad", [True, False])
def test_vmap_over_only_a_mask_or_the_memory_takes_the_fused_path(mapped, grad):
    """Tester 46: with need_weights=False the NaN look branched on the mapped tensor when only
    the mask (or the keys and values of a fixed query) was mapped: torch's "data-dependent
    control flow" error, though the docstring says vmap maps the layer, masks included."""
    gen = torch.Generator().manual_seed(0)
    layer = mha.MultiHeadAttention(8, 2)
    x = torch.randn(3, 4, 8, generator=gen)
    batches = {"float mask": torch.randn(5, 4, 4, generator=gen),
               "float key_padding_mask": torch.randn(5, 3, 4, generator=gen),
               "key and value": torch.randn(5, 3, 6, 8, generator=gen)}[mapped]

    def call(t, need_weights):
        if mapped == "float mask":
            return layer(x, mask=t, need_weights=need_weights)[0]
        if mapped == "float key_padding_mask":
            return layer(x, key_padding_mask=t, need_weights=need_weights)[0]
        return layer(x, t, need_weights=need_weights)[0]

    with torch.set_grad_enabled(grad):
        fused = torch.func.vmap(lambda t: call(t, False))(batches)
        one_by_one = torch.stack([call(t, True) for t in batches])
    torch.testing.assert_close(fused, one_by_one, atol=1e-5, rtol=1e-5)

