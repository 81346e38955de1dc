"""Chapter 6: rotary embeddings (apply_rotary, RotaryMultiHeadAttention) and ALiBi."""

import math
import re

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

import mha

pytestmark = pytest.mark.chapter(6)  # make chapter runs this file (issue 38)


def rope_by_complex_numbers(x, positions, base=10000.0):
    """Reference: pairs (x_2j, x_2j+1) as complex numbers times e^{i p omega_j} (float64)."""
    d = x.shape[-1]
    z = torch.view_as_complex(x.double().reshape(*x.shape[:-1], d // 2, 2).contiguous())
    omega = base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    turn = torch.polar(torch.ones_like(omega), positions.double()[..., None] * omega)
    return torch.view_as_real(z * turn).reshape(x.shape)


@settings(max_examples=30, deadline=None)
@given(n=st.integers(1, 10), half=st.integers(1, 8), seed=st.integers(0, 2**16),
       base=st.sampled_from([100.0, 10000.0]))
def test_rope_equals_complex_multiplication(n, half, seed, base):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(2, 3, n, 2 * half, generator=g, dtype=torch.float64)
    positions = torch.randint(0, 1000, (n,), generator=g)
    got = mha.apply_rotary(x, positions, base)
    torch.testing.assert_close(got, rope_by_complex_numbers(x, positions, base))
    torch.testing.assert_close(got.norm(dim=-1), x.norm(dim=-1))  # rotations keep length
    # default positions are 0 .. n-1
    torch.testing.assert_close(mha.apply_rotary(x), rope_by_complex_numbers(x, torch.arange(n)))


@settings(max_examples=40, deadline=None)
@given(m=st.integers(0, 500), n=st.integers(0, 500), shift=st.integers(-400, 400),
       seed=st.integers(0, 2**16))
def test_rope_score_depends_on_positions_only_through_their_offset(m, n, shift, seed):
    """RoPE(q, m) . RoPE(k, n) = RoPE(q, m + s) . RoPE(k, n + s) for every shift s."""
    g = torch.Generator().manual_seed(seed)
    q, k = torch.randn(2, 1, 16, generator=g, dtype=torch.float64)

    def score(a, b):
        return mha.apply_rotary(q, torch.tensor([a])) @ mha.apply_rotary(k, torch.tensor([b])).T

    torch.testing.assert_close(score(m, n), score(m + shift, n + shift))
    # and it is the same as rotating only the key, by the offset n - m
    torch.testing.assert_close(score(m, n), score(0, n - m))


def test_apply_rotary_bad_input():
    with pytest.raises(ValueError, match=r"even.*\(3, 5\)"):
        mha.apply_rotary(torch.randn(3, 5))
    with pytest.raises(ValueError, match=r"positions of shape \(4,\)"):
        mha.apply_rotary(torch.randn(3, 4), torch.arange(4))
    with pytest.raises(ValueError, match="floating dtype"):
        mha.apply_rotary(torch.ones(3, 4, dtype=torch.long))


def test_rotary_attention_at_position_zero_is_plain_multi_head_attention():
    torch.manual_seed(0)
    rotary = mha.RotaryMultiHeadAttention(16, 4).double()
    plain = mha.MultiHeadAttention(16, 4).double()
    plain.load_state_dict(rotary.state_dict())
    x = torch.randn(2, 5, 16, dtype=torch.float64)
    out, weights = rotary(x, positions=torch.zeros(5))
    expected, expected_weights = plain(x)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(weights, expected_weights)


def test_rotary_attention_is_invariant_to_shifting_all_positions():
    torch.manual_seed(1)
    layer = mha.RotaryMultiHeadAttention(16, 2).double()
    x = torch.randn(2, 7, 16, dtype=torch.float64)
    causal = torch.ones(7, 7, dtype=torch.bool).tril()
    out, weights = layer(x, mask=causal)
    out_s, weights_s = layer(x, positions=torch.arange(7) + 1000, mask=causal)
    torch.testing.assert_close(out_s, out)
    torch.testing.assert_close(weights_s, weights)
    # but it does see order: swapping two tokens' positions changes the output
    out_swapped, _ = layer(x, positions=torch.tensor([1, 0, 2, 3, 4, 5, 6]), mask=causal)
    assert (out_swapped - out).abs().max() > 1e-3


def test_rotary_attention_bad_head_dim():
    with pytest.raises(ValueError, match="even head_dim, got 3"):
        mha.RotaryMultiHeadAttention(6, 2)


def test_alibi_slopes_are_the_papers():
    # Press et al.: for 8 heads the slopes are 1/2, 1/4, ..., 1/256
    torch.testing.assert_close(mha.alibi_slopes(8),
                               torch.tensor([0.5 ** i for i in range(1, 9)], dtype=torch.float64))
    # for 16 heads, 1/sqrt(2), 1/2, ..., 1/256 (ratio 2^-0.5)
    torch.testing.assert_close(mha.alibi_slopes(16),
                               torch.tensor([2 ** (-i / 2) for i in range(1, 17)],
                                            dtype=torch.float64))
    # 12 heads (not a power of two): the 8-head slopes, then every other 16-head slope
    twelve = mha.alibi_slopes(12)
    torch.testing.assert_close(twelve[:8], mha.alibi_slopes(8))
    torch.testing.assert_close(twelve[8:], mha.alibi_slopes(16)[0::2][:4])
    with pytest.raises(ValueError, match="num_heads must be a positive int, got 0"):
        mha.alibi_slopes(0)


@settings(max_examples=20, deadline=None)
@given(h=st.integers(1, 12), n=st.integers(1, 20), m=st.integers(1, 20))
def test_alibi_bias_depends_only_on_the_offset_at_every_length(h, n, m):
    bias = mha.alibi_bias(h, n, causal=False, dtype=torch.float64)
    i = torch.arange(n)
    offset = (i[:, None] - i[None, :]).abs().double()
    torch.testing.assert_close(bias, -mha.alibi_slopes(h)[:, None, None] * offset)
    # a shorter sequence sees the top-left corner of a longer one: nothing depends on n
    small, big = min(n, m), max(n, m)
    torch.testing.assert_close(mha.alibi_bias(h, big)[:, :small, :small], mha.alibi_bias(h, small))
    causal = mha.alibi_bias(h, n)
    assert torch.all(causal[:, ~torch.ones(n, n, dtype=torch.bool).tril()] == float("-inf"))


def test_alibi_as_a_float_mask_matches_torch_multihead_attention():
    torch.manual_seed(2)
    reference = nn.MultiheadAttention(16, 4, batch_first=True, dtype=torch.float64).eval()
    ours = mha.MultiHeadAttention.from_torch(reference)
    x = torch.randn(3, 6, 16, dtype=torch.float64)
    bias = mha.alibi_bias(4, 6, dtype=torch.float64)  # (h, n, n)
    out, weights = ours(x, mask=bias[None])  # (1, h, n, n): a 3-D mask is ambiguous
    # torch wants a (batch * heads, n, n) float mask, added to the scores
    expected, expected_weights = reference(x, x, x, attn_mask=bias.repeat(3, 1, 1),
                                           average_attn_weights=False)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(weights, expected_weights)


@pytest.mark.claim("6.9")
@pytest.mark.parametrize("seed", range(3))
def test_adding_p_gives_absolute_positions_relative_methods_act_on_the_scores(seed):
    """'inject absolute or relative positional information by adding positional encoding to
    the input representations' is ambiguous. X + P changes when the whole sequence moves along
    (absolute). Relative information in the sense of offsets a linear map reads from the added
    P: there (P[i + start] = M_start P[i]). A relative encoding, the same output wherever the
    sequence starts: not from adding; RoPE and ALiBi add nothing to X (the values are the
    content alone, the positions reach only the weights) and give it."""
    torch.manual_seed(seed)
    n, start = 6, 25
    x = torch.randn(2, n, 16, dtype=torch.float64)
    causal = torch.ones(n, n, dtype=torch.bool).tril()
    absolute = mha.MultiHeadAttention(16, 4).double()
    p = mha.sinusoidal_encoding(start + n, 16, dtype=torch.float64)
    moved = absolute(x + p[start:], mask=causal)[0] - absolute(x + p[:n], mask=causal)[0]
    assert moved.abs().max() > 1e-2
    # the added P carries offsets linearly: the moved rows are one rotation of the first ones
    rotation = mha.relative_rotation(start, 16, dtype=torch.float64)
    torch.testing.assert_close(p[start:], p[:n] @ rotation.T)

    rope = mha.RotaryMultiHeadAttention(16, 4).double()
    out, weights = rope(x, positions=torch.arange(start, start + n), mask=causal)
    torch.testing.assert_close(out, rope(x, mask=causal)[0])
    values = rope.v_proj(x).reshape(2, n, 4, 4).transpose(1, 2)  # (B, h, n, d_v): no positions
    heads = (weights @ values).transpose(1, 2).reshape(2, n, 16)  # (B, n, h d_v)
    torch.testing.assert_close(rope.out_proj(heads), out)

    plain = mha.MultiHeadAttention(16, 4).double()
    bias = mha.alibi_bias(4, start + n)  # (h, N, N): -m (i - j), depends on i - j only
    torch.testing.assert_close(bias[:, start:, start:], bias[:, :n, :n])
    out_alibi, weights_alibi = plain(x, mask=bias[None, :, :n, :n])
    scores = plain.q_proj(x).reshape(2, n, 4, 4).transpose(1, 2) @ \
        plain.k_proj(x).reshape(2, n, 4, 4).transpose(1, 2).mT / 2.0  # (B, h, n, n), sqrt(4)
    torch.testing.assert_close(weights_alibi, torch.softmax(scores + bias[:, :n, :n], dim=-1))


# The cases below were silently wrong before issue 27's fixes; each is checked against an
# independent reference (nn.MultiheadAttention, scaled_dot_product_attention or float64).

def seeded(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def randn(*shape, dtype=torch.float64, seed=0):
    return torch.randn(*shape, generator=seeded(seed), dtype=dtype)


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


def test_rotary_is_causal_equals_a_lower_triangular_mask():
    """RotaryMultiHeadAttention.forward took no is_causal (a TypeError), unlike its parent."""
    torch.manual_seed(0)
    layer = mha.RotaryMultiHeadAttention(16, 4, num_kv_heads=2).double()
    x = torch.randn(2, 5, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    allowed = torch.ones(5, 5, dtype=torch.bool).tril()
    out, weights = layer(x, is_causal=True)
    ref_out, ref_weights = layer(x, mask=allowed)
    torch.testing.assert_close(out, ref_out, rtol=0, atol=1e-12)
    torch.testing.assert_close(weights, ref_weights, rtol=0, atol=1e-12)
    with pytest.raises(ValueError, match="is_causal"):
        layer(x, is_causal="yes")
    with pytest.raises(TypeError, match="cache"):  # what the docstring says it does not take
        layer(x, cache=mha.KVCache())


@pytest.mark.parametrize("position", [2**32 + 1, -(2**32) - 7])
def test_a_position_past_the_limit_is_printed_exactly_with_its_sign(position):
    """Tester 46: 2**32 + 1 and the limit 2**32 both printed as 4.29497e+09, and a negative
    position was reported by its absolute value."""
    positions = torch.tensor([0, position], dtype=torch.int64)
    with pytest.raises(ValueError, match=re.escape(f"within +-{2**32}, got {position};")):
        mha.apply_rotary(torch.randn(1, 2, 4), positions)

