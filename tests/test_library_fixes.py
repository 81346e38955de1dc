"""Cases that were silently wrong (issue 27), each against an independent reference:
nn.MultiheadAttention, scaled_dot_product_attention, or float64 written out here."""

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import mha


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


# --- chunked attention on unbatched causal inputs -------------------------------------------

@pytest.mark.parametrize("n_q,n_k", [(9, 9), (3, 10), (10, 10)])
def test_chunked_attention_unbatched_causal_longer_than_a_chunk(n_q, n_k):
    q, k, v = randn(n_q, 4, seed=1), randn(n_k, 4, seed=2), randn(n_k, 3, seed=3)
    got = mha.chunked_attention(q, k, v, chunk_size=4, causal=True)
    allowed = torch.ones(n_q, n_k, dtype=torch.bool).tril(n_k - n_q)  # bottom-right aligned
    expected = F.scaled_dot_product_attention(q[None], k[None], v[None], attn_mask=allowed)[0]
    torch.testing.assert_close(got, expected)


# --- ALiBi's bias as the docstring says to pass it -------------------------------------------

def test_alibi_bias_as_documented_for_multi_head_attention():
    torch.manual_seed(0)
    h, n = 4, 6
    layer = mha.MultiHeadAttention(8, h).double()
    x = randn(2, n, 8)
    bias = mha.alibi_bias(h, n, dtype=torch.float64)
    with pytest.raises(ValueError, match="3-D mask"):  # the (h, n, n) bias itself: refused
        layer(x, mask=bias)
    got, weights = layer(x, mask=bias[None])
    # float64 by hand: per-head scores plus -m_h (i - j), -inf above the diagonal
    q = layer.q_proj(x).view(2, n, h, 2).transpose(1, 2)
    k = layer.k_proj(x).view(2, n, h, 2).transpose(1, 2)
    slopes = torch.tensor([2.0 ** (-8 * (i + 1) / h) for i in range(h)], dtype=torch.float64)
    i = torch.arange(n, dtype=torch.float64)
    hand = -slopes[:, None, None] * (i[:, None] - i[None, :])
    hand = hand.masked_fill(i[None, :] > i[:, None], -math.inf)
    expected = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(2) + hand, dim=-1)
    torch.testing.assert_close(weights, expected)
    # the fused path agrees
    torch.testing.assert_close(layer(x, mask=bias[None], need_weights=False)[0], got)
