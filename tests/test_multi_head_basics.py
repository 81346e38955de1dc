"""Quick checks of MultiHeadAttention and prune_heads that later chapters rely on."""

import pytest
import torch
from torch import nn

import mha

pytestmark = pytest.mark.chapter(4)  # make chapter runs this file (issue 38)


def test_self_attention_equals_torch_multihead():
    torch.manual_seed(0)
    reference = nn.MultiheadAttention(12, 3, batch_first=True, dtype=torch.float64).eval()
    ours = mha.MultiHeadAttention.from_torch(reference)
    x = torch.randn(2, 5, 12, dtype=torch.float64)
    out, weights = ours(x)
    expected, expected_weights = reference(x, x, x, average_attn_weights=False)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(weights, expected_weights)
    fast, none = ours(x, need_weights=False)
    assert none is None
    torch.testing.assert_close(fast, expected)


def test_prune_heads_equals_gating():
    torch.manual_seed(1)
    layer = mha.MultiHeadAttention(16, 4)
    x = torch.randn(3, 6, 16)
    pruned = mha.prune_heads(layer, [0, 2])
    gated, _ = layer(x, head_mask=torch.tensor([0.0, 1.0, 0.0, 1.0]))
    out, weights = pruned(x)
    torch.testing.assert_close(out, gated)
    assert pruned.num_heads == 2 and weights.shape == (3, 2, 6, 6)
    n_params = sum(p.numel() for p in layer.parameters())
    assert sum(p.numel() for p in pruned.parameters()) < n_params


def test_bad_construction_and_inputs():
    with pytest.raises(ValueError, match="not divisible"):
        mha.MultiHeadAttention(10, 3)
    layer = mha.MultiHeadAttention(8, 2)
    with pytest.raises(ValueError, match=r"shape \(batch, tokens, 8\)"):
        layer(torch.randn(2, 3, 7))
    with pytest.raises(ValueError, match=r"head_mask must have shape \(2,\)"):
        layer(torch.randn(2, 3, 8), head_mask=torch.ones(3))
    with pytest.raises(ValueError, match="cannot prune all"):
        mha.prune_heads(layer, [0, 1])


def test_load_state_dict_of_torchs_module_points_to_from_torch():
    ours = mha.MultiHeadAttention(8, 2)
    theirs = nn.MultiheadAttention(8, 2, batch_first=True)
    with pytest.raises(ValueError, match=r"in_proj_weight.*MultiHeadAttention\.from_torch"):
        ours.load_state_dict(theirs.state_dict())
    block = nn.ModuleDict({"attn": ours})  # nested: the prefix is named
    with pytest.raises(ValueError, match=r"attn\.in_proj_weight"):
        block.load_state_dict({f"attn.{k}": v for k, v in theirs.state_dict().items()})
    converted = mha.MultiHeadAttention.from_torch(theirs)
    ours.load_state_dict(converted.state_dict())  # the course's own layout still loads
    x = torch.randn(1, 3, 8)
    torch.testing.assert_close(ours(x)[0], theirs(x, x, x)[0])


@pytest.mark.parametrize("sizes,call,blamed", [
    (dict(kdim=4, vdim=6), lambda m: m(torch.randn(1, 3, 8), torch.randn(1, 3, 4)),
     "value is omitted, so it defaults to key .4 features., but this module has vdim=6"),
    (dict(kdim=4, vdim=4), lambda m: m(torch.randn(1, 3, 8)),
     "key is omitted, so it defaults to query .8 features., but this module has kdim=4"),
    (dict(vdim=6), lambda m: m(torch.randn(1, 3, 8)),
     "value is omitted, so it defaults to query .8 features., but this module has vdim=6"),
])
def test_an_omitted_key_or_value_is_blamed_not_the_tensor_passed(sizes, call, blamed):
    with pytest.raises(ValueError, match=blamed):
        call(mha.MultiHeadAttention(8, 2, **sizes))


COPIES = {  # a copy of a MultiHeadAttention whose parameters have the same names
    "prune_heads": lambda m: mha.prune_heads(m, [0]),
    "pool_kv_heads": lambda m: mha.pool_kv_heads(m, 2),
    "from_torch(to_torch)": lambda m: mha.MultiHeadAttention.from_torch(m.to_torch()),
}
# torch's names for ours when kdim and vdim differ from embed_dim (Q, K, V weights unpacked)
TORCH_NAMES = {"q_proj.weight": "q_proj_weight", "k_proj.weight": "k_proj_weight",
               "v_proj.weight": "v_proj_weight", "out_proj.weight": "out_proj.weight",
               "out_proj.bias": "out_proj.bias"}


@pytest.mark.parametrize("copy", COPIES)
@pytest.mark.parametrize("frozen", list(TORCH_NAMES))
def test_copies_keep_each_parameters_requires_grad(copy, frozen):
    module = mha.MultiHeadAttention(8, 4, kdim=6, vdim=5)
    module.get_parameter(frozen).requires_grad_(False)
    copied = dict(COPIES[copy](module).named_parameters())
    assert {name: p.requires_grad for name, p in copied.items()} == {
        name: name != frozen for name in copied}
    theirs = dict(module.to_torch().named_parameters())
    assert {name: p.requires_grad for name, p in theirs.items()} == {
        name: name != TORCH_NAMES[frozen] for name in theirs}


def test_torchs_packed_projection_is_frozen_when_queries_keys_and_values_are():
    module = mha.MultiHeadAttention(8, 4)
    module.q_proj.weight.requires_grad_(False)  # one of three in a packed parameter: it trains
    with pytest.warns(UserWarning, match="freeze all three or none"):
        assert module.to_torch().in_proj_weight.requires_grad
    for proj in (module.k_proj, module.v_proj):
        proj.weight.requires_grad_(False)
    theirs = module.to_torch()
    assert not theirs.in_proj_weight.requires_grad and theirs.in_proj_bias.requires_grad
    ours = dict(mha.MultiHeadAttention.from_torch(theirs).named_parameters())
    assert {name for name, p in ours.items() if not p.requires_grad} == {
        "q_proj.weight", "k_proj.weight", "v_proj.weight"}


def test_prune_heads_of_a_bool_tensor_hints_at_its_indices():
    """The hint said heads.long(), which makes [0, 1, 0, 0] of a mask (a repeated head)."""
    layer = mha.MultiHeadAttention(8, 4)
    remove = torch.tensor([False, True, False, True])
    with pytest.raises(ValueError, match=r"bool tensor.*heads\.nonzero\(\)\.flatten\(\)"):
        mha.prune_heads(layer, remove)
    # the hint, followed, removes heads 1 and 3: as removing them by hand
    pruned = mha.prune_heads(layer, remove.nonzero().flatten())
    assert pruned.num_heads == 2
    x = torch.randn(2, 5, 8)
    torch.testing.assert_close(pruned(x)[0], layer(x, head_mask=~remove)[0])
