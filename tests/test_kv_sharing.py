"""Grouped-query attention: repeating key/value heads, and pooling a multi-head checkpoint."""

import pytest
import torch
import torch.nn.functional as F

import mha

pytestmark = pytest.mark.chapter(9)  # make chapter runs this file (issue 38)


@pytest.mark.claim("9.4")
@pytest.mark.parametrize("kv_heads", [1, 2, 4, 8])
def test_repeating_kv_heads_is_sdpa_with_enable_gqa(kv_heads):
    g = torch.Generator().manual_seed(kv_heads)
    q = torch.randn(2, 8, 5, 6, generator=g, dtype=torch.float64)
    k, v = (torch.randn(2, kv_heads, 7, 6, generator=g, dtype=torch.float64) for _ in range(2))
    groups = 8 // kv_heads
    ours = mha.attention(q, mha.repeat_kv(k, groups), mha.repeat_kv(v, groups))[0]
    torch.testing.assert_close(ours, F.scaled_dot_product_attention(q, k, v, enable_gqa=True),
                               rtol=0, atol=1e-12)
    for head in range(8):  # query head i reads key/value head i // groups
        torch.testing.assert_close(mha.repeat_kv(k, groups)[:, head], k[:, head // groups])


@pytest.mark.claim("9.4")
def test_grouped_query_layer_is_the_repeated_multi_head_layer():
    """A layer with h_kv key/value heads computes what the h-head layer computes when each
    group's key and value weights are copies of one head's (sharing is a constraint on MHA)."""
    torch.manual_seed(0)
    gqa = mha.MultiHeadAttention(32, 8, num_kv_heads=2).double()
    full = mha.MultiHeadAttention(32, 8).double()
    with torch.no_grad():
        full.q_proj.load_state_dict(gqa.q_proj.state_dict())
        full.out_proj.load_state_dict(gqa.out_proj.state_dict())
        for big, small in [(full.k_proj, gqa.k_proj), (full.v_proj, gqa.v_proj)]:
            big.weight.copy_(small.weight.view(2, 1, 4, 32).expand(2, 4, 4, 32).reshape(32, 32))
            big.bias.copy_(small.bias.view(2, 1, 4).expand(2, 4, 4).reshape(32))
    x = torch.randn(3, 9, 32, dtype=torch.float64)
    torch.testing.assert_close(gqa(x, is_causal=True)[0], full(x, is_causal=True)[0],
                               rtol=0, atol=1e-12)
    # and pooling the copies back recovers the grouped layer exactly
    pooled = mha.pool_kv_heads(full, 2)
    torch.testing.assert_close(pooled(x)[0], gqa(x)[0], rtol=0, atol=1e-12)


def test_pooled_weights_are_group_means():
    torch.manual_seed(1)
    layer = mha.MultiHeadAttention(16, 4, head_dim=3)
    pooled = mha.pool_kv_heads(layer, 2)
    assert pooled.num_kv_heads == 2 and pooled.k_proj.weight.shape == (6, 16)
    w = layer.k_proj.weight
    torch.testing.assert_close(pooled.k_proj.weight[:3], (w[0:3] + w[3:6]) / 2)
    torch.testing.assert_close(pooled.v_proj.bias[3:], (layer.v_proj.bias[6:9]
                                                        + layer.v_proj.bias[9:12]) / 2)
    torch.testing.assert_close(pooled.q_proj.weight, layer.q_proj.weight)
    same = mha.pool_kv_heads(layer, 4)  # one head per group: nothing changes
    x = torch.randn(2, 5, 16)
    torch.testing.assert_close(same(x)[0], layer(x)[0])


def test_parameters_shrink_with_kv_heads():
    d, h, dk = 64, 8, 8
    for kv in [8, 4, 2, 1]:
        layer = mha.MultiHeadAttention(d, h, num_kv_heads=kv, bias=False)
        expected = 2 * d * h * dk + 2 * d * kv * dk  # W_Q and W_O, then W_K and W_V
        assert sum(p.numel() for p in layer.parameters()) == expected


def test_bad_input_raises_value_error():
    layer = mha.MultiHeadAttention(16, 4, num_kv_heads=2)
    with pytest.raises(ValueError, match="num_kv_heads"):
        mha.pool_kv_heads(layer, 3)
    with pytest.raises(ValueError, match="module must be an mha.MultiHeadAttention"):
        mha.pool_kv_heads(torch.nn.Linear(2, 2), 1)
    with pytest.raises(ValueError, match="groups"):
        mha.repeat_kv(torch.randn(1, 2, 3, 4), 0)
    with pytest.raises(ValueError, match="kv_heads, n, head_dim"):
        mha.repeat_kv(torch.randn(2, 3, 4), 2)
    with pytest.raises(ValueError, match="tokens"):
        mha.analysis.cost.kv_cache_bytes(2, 2, 8, 0)


def test_pooling_is_exact_not_only_for_groups_of_equal_heads():
    """Exercise 9.5: pooling changes nothing if the heads of each group have equal key and
    value weights (test_pooled_weights_are_group_means); the converse fails: a group whose
    query weights and biases are zero scores every key 0, so its heads' key weights may differ
    and pooling still changes nothing."""
    torch.manual_seed(0)
    x = torch.randn(2, 5, 16, dtype=torch.float64)
    blind = mha.MultiHeadAttention(16, 4).double()
    with torch.no_grad():
        blind.q_proj.weight.zero_()
        blind.q_proj.bias.zero_()
    keys = blind.k_proj.weight.view(2, 2, 4, 16)
    assert not torch.allclose(keys[:, 0], keys[:, 1])  # the heads of a group differ ...
    with torch.no_grad():  # ... in their keys only: give each group's heads equal values
        blind.v_proj.weight.view(2, 2, 4, 16)[:, 1] = blind.v_proj.weight.view(2, 2, 4, 16)[:, 0]
        blind.v_proj.bias.view(2, 2, 4)[:, 1] = blind.v_proj.bias.view(2, 2, 4)[:, 0]
    pooled = mha.pool_kv_heads(blind, 2)
    torch.testing.assert_close(pooled(x)[0], blind(x)[0], rtol=0, atol=1e-12)
    with torch.no_grad():  # with queries, the same pooling changes the output
        blind.q_proj.weight.normal_()
    pooled = mha.pool_kv_heads(blind, 2)
    assert (pooled(x)[0] - blind(x)[0]).abs().max() > 1e-3


# The cases below were silently wrong before issue 27's fixes; each is checked against an
# independent reference (nn.MultiheadAttention, scaled_dot_product_attention or float64).

def seeded(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def randn(*shape, dtype=torch.float64, seed=0):
    return torch.randn(*shape, generator=seeded(seed), dtype=dtype)


def rope64(x: torch.Tensor, base: float = 10000.0) -> torch.Tensor:
    """RoPE as complex multiplication, float64: pair (x_2j, x_2j+1) times e^{i p base^(-2j/d)}."""
    n, d = x.shape[-2], x.shape[-1]
    omega = base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    angle = torch.arange(n, dtype=torch.float64)[:, None] * omega  # (n, d/2)
    pairs = torch.view_as_complex(x.reshape(*x.shape[:-1], d // 2, 2).contiguous())
    return torch.view_as_real(pairs * torch.polar(torch.ones_like(angle), angle)).flatten(-2)


def rotary_reference(module, x):
    """Rotary attention in float64 with SDPA's grouped-query layout."""
    w = {name: getattr(module, name) for name in ["q_proj", "k_proj", "v_proj", "out_proj"]}
    batch, n, _ = x.shape
    h, h_kv, d = module.num_heads, module.num_kv_heads, module.head_dim

    def heads(proj, count):
        return F.linear(x, proj.weight.double(), proj.bias.double()).view(
            batch, n, count, d).transpose(1, 2)

    q, k, v = rope64(heads(w["q_proj"], h)), rope64(heads(w["k_proj"], h_kv)), \
        heads(w["v_proj"], h_kv)
    out = F.scaled_dot_product_attention(q, k, v, enable_gqa=h != h_kv)
    merged = out.transpose(1, 2).reshape(batch, n, h * d)
    return F.linear(merged, w["out_proj"].weight.double(), w["out_proj"].bias.double())


# --- pool_kv_heads keeps RoPE and dropout ---------------------------------------------------

def test_pool_kv_heads_of_rotary_stays_rotary_and_equals_float64_rope():
    torch.manual_seed(0)
    layer = mha.RotaryMultiHeadAttention(16, 4, dropout=0.25).double().eval()
    x = randn(2, 7, 16)
    same = mha.pool_kv_heads(layer, 4)  # one head per group: nothing pooled
    assert type(same) is mha.RotaryMultiHeadAttention
    assert (same.dropout, same.training, same.base) == (0.25, False, layer.base)
    torch.testing.assert_close(same(x)[0], rotary_reference(layer, x))
    # heads of a group made equal: pooling to 2 groups changes nothing either
    with torch.no_grad():
        for proj in (layer.k_proj, layer.v_proj):
            proj.weight.view(2, 2, 4, 16)[:, 1] = proj.weight.view(2, 2, 4, 16)[:, 0]
            proj.bias.view(2, 2, 4)[:, 1] = proj.bias.view(2, 2, 4)[:, 0]
    pooled = mha.pool_kv_heads(layer, 2)
    assert pooled.num_kv_heads == 2
    torch.testing.assert_close(pooled(x)[0], rotary_reference(pooled, x))
    torch.testing.assert_close(pooled(x)[0], rotary_reference(layer, x))


def test_pool_kv_heads_keeps_dropout_in_training():
    torch.manual_seed(0)
    layer = mha.MultiHeadAttention(8, 2, dropout=0.5)
    pooled = mha.pool_kv_heads(layer, 2)
    assert pooled.dropout == 0.5 and pooled.training
    x = randn(1, 6, 8, dtype=torch.float32)
    torch.manual_seed(1)
    ours = pooled(x)[1]
    assert (ours == 0).any()  # some weights dropped, as the source drops them
    torch.manual_seed(1)
    torch.testing.assert_close(ours, layer(x)[1])


def test_pool_kv_heads_refuses_other_subclasses():
    with pytest.raises(ValueError, match="SplitInputAttention"):
        mha.pool_kv_heads(mha.SplitInputAttention(8, 2), 1)


def test_pool_kv_heads_refuses_replaced_or_parametrized_projections():
    """It views and loads the projections' weights: torch's state_dict errors, not this."""
    with pytest.raises(ValueError, match=r"module\.out_proj must be an nn\.Linear\(4, 4\)"):
        mha.pool_kv_heads(mha.GridSelfAttention(4, 1, num_heads=2, head_dim=2).attn, 1)
    layer = mha.MultiHeadAttention(12, 4)
    torch.nn.utils.parametrizations.weight_norm(layer.q_proj)
    with pytest.raises(ValueError, match=r"module\.q_proj .*parametrized"):
        mha.pool_kv_heads(layer, 2)
