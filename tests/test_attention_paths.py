"""Every attention path follows one rule for masks, NaN and inf (the docstring of mha.attention).

The paths: ``mha.attention`` (weights in the open), ``MultiHeadAttention`` with
``need_weights=False`` (PyTorch's fused kernel), ``mha.chunked_attention``, and the rotary and
ALiBi variants. On random inputs with random masks, fully masked rows, NaN and inf:

- a fully masked query gets zero weights and a zero output on every path;
- every other output is finite on one path exactly where it is finite on the others, and the
  finite values agree (to rounding);
- on finite inputs, outputs equal ``F.scaled_dot_product_attention`` (an independent reference)
  everywhere but the fully masked rows.
"""

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

import mha

# large but finite: their products (up to 4e30) stay inside float32, whose overflow is the one
# thing the rule leaves to each path (see mha.attention)
SPECIAL = [float("nan"), float("inf"), -float("inf"), 1e15, -1e15]


def same_rule(a: torch.Tensor, b: torch.Tensor) -> None:
    assert a.shape == b.shape
    finite = torch.isfinite(a)
    assert torch.equal(finite, torch.isfinite(b)), "the paths disagree on which outputs are finite"
    torch.testing.assert_close(a[finite], b[finite], atol=1e-5, rtol=1e-4)


@st.composite
def problems(draw, causal_only: bool = False, rotary: bool = False):
    """(q, k, v, mask, kind, blocked): (B, h, n, d) tensors, a mask, its kind, and the fully
    masked queries (None without a mask)."""
    seed = draw(st.integers(0, 2**16))
    g = torch.Generator().manual_seed(seed)
    batch, heads = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    n_q = draw(st.integers(1, 6))
    n_k = n_q if causal_only or rotary else draw(st.integers(1, 6))
    d = 2 * draw(st.integers(1, 2)) if rotary else draw(st.integers(1, 4))
    q, k, v = (torch.randn(batch, heads, n, d, generator=g) for n in (n_q, n_k, n_k))
    for tensor in (q, k, v):  # a few NaN, inf or huge entries, anywhere
        for _ in range(draw(st.integers(0, 2))):
            index = tuple(draw(st.integers(0, s - 1)) for s in tensor.shape)
            tensor[index] = draw(st.sampled_from(SPECIAL))
    kinds = ["bool", "float", "alibi"] if rotary else ["none", "bool", "float", "alibi"]
    kind = "causal" if causal_only else draw(st.sampled_from(kinds))
    mask, allowed = None, torch.ones(n_q, n_k, dtype=torch.bool)
    if kind == "causal":
        allowed = allowed.tril()
    if kind in ("bool", "float", "alibi"):
        allowed = torch.rand(batch, 1, n_q, n_k, generator=g) < draw(st.floats(0.2, 1.0))
        blocked_rows = torch.rand(batch, 1, n_q, 1, generator=g) < 0.3
        allowed = allowed & ~blocked_rows  # some queries see no key at all
        mask = allowed
    if kind == "float":  # 0 / -inf, and now and then a NaN in the mask itself
        mask = torch.zeros(allowed.shape).masked_fill(~allowed, -float("inf"))
        if draw(st.booleans()):
            mask[tuple(draw(st.integers(0, s - 1)) for s in mask.shape)] = float("nan")
    if kind == "alibi":  # ALiBi's biases, with the random -inf on top
        bias = mha.alibi_bias(heads, max(n_q, n_k), causal=False)[:, :n_q, :n_k]
        mask = bias.masked_fill(~allowed, -float("inf"))
    blocked = None
    if mask is not None:  # fully masked: all False, or all -inf (a NaN is not a mask)
        blocked = ~mask.any(-1, keepdim=True) if mask.dtype == torch.bool else \
            (mask == -float("inf")).all(-1, keepdim=True)
    return q, k, v, mask, kind, blocked


def fused(q, k, v, mask, causal=False, layer=None):
    """The need_weights=False path of MultiHeadAttention on per-head inputs (projections are
    the identity): the fused kernel, or the weights in the open where it would hide a NaN."""
    batch, heads, n_q, d = q.shape
    layer = layer or mha.MultiHeadAttention(heads * d, heads, bias=False)
    if layer._hides_non_finite(q, k, v, mask):
        return layer._explicit_attention(q, k, v, mask, causal, 0.0)[0]
    return layer._fused_attention(q, k, v, mask, causal, 0.0)


@settings(max_examples=150, deadline=None)
@given(problems())
def test_attention_and_the_fused_path_follow_one_rule(problem):
    q, k, v, mask, kind, blocked = problem
    out, weights = mha.attention(q, k, v, mask=mask)
    same_rule(out, fused(q, k, v, mask))
    if blocked is not None:
        assert (out.masked_select(blocked.expand_as(out)) == 0).all()
        assert (weights.masked_select(blocked.expand_as(weights)) == 0).all()


@settings(max_examples=150, deadline=None)
@given(problems(causal_only=True), st.integers(1, 4), st.booleans())
def test_chunked_attention_follows_the_rule_of_attention(problem, chunk_size, causal):
    q, k, v, _, _, _ = problem
    mask = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).tril() if causal else None
    expected, _ = mha.attention(q, k, v, mask=mask)
    same_rule(mha.chunked_attention(q, k, v, chunk_size=chunk_size, causal=causal), expected)
    # the causal kernel of MultiHeadAttention's fused path too
    layer = mha.MultiHeadAttention(q.shape[1] * q.shape[-1], q.shape[1], bias=False)
    same_rule(fused(q, k, v, None, causal, layer), expected)


@settings(max_examples=80, deadline=None)
@given(problems())
def test_finite_inputs_match_scaled_dot_product_attention(problem):
    q, k, v, mask, kind, blocked = problem
    q, k, v = (torch.nan_to_num(t, nan=0.0, posinf=3.0, neginf=-3.0).clamp(-3, 3)
               for t in (q, k, v))
    if mask is not None and mask.is_floating_point():
        mask = torch.nan_to_num(mask, nan=0.0, posinf=0.0, neginf=-float("inf"))
    out, _ = mha.attention(q, k, v, mask=mask)
    reference = F.scaled_dot_product_attention(q.double(), k.double(), v.double(),
                                               attn_mask=None if mask is None else (
                                                   mask if mask.dtype == torch.bool
                                                   else mask.double()))
    if blocked is not None:
        reference = reference.masked_fill(blocked, 0.0)  # the course's rule for those rows
    torch.testing.assert_close(out.double(), reference, atol=1e-5, rtol=1e-4)


@settings(max_examples=80, deadline=None)
@given(problems(rotary=True))
def test_rotary_attention_follows_the_rule(problem):
    """RotaryMultiHeadAttention: a fully masked query's heads are zero, nothing else hidden."""
    q, k, v, mask, kind, blocked = problem
    batch, heads, n, d = q.shape
    torch.manual_seed(0)
    layer = mha.RotaryMultiHeadAttention(heads * d, heads, bias=False)
    x = q.transpose(1, 2).reshape(batch, n, heads * d)  # (B, n, h d)
    out, _ = layer(x, mask=mask)
    rotate = [mha.apply_rotary(layer._split_heads(p(x))) for p in (layer.q_proj, layer.k_proj)]
    heads_out, _ = mha.attention(*rotate, layer._split_heads(layer.v_proj(x)), mask=mask)
    merged = heads_out.transpose(1, 2).reshape(batch, n, heads * d)  # (B, n, h d)
    same_rule(out, layer.out_proj(merged))
    if blocked is not None:  # zero heads, and no output bias: zero rows
        rows = blocked.all(dim=1).squeeze(-1)  # (B, n)
        assert (out[rows] == 0).all()


# The cases below were silently wrong before issue 27's fixes; each is checked against an
# independent reference (nn.MultiheadAttention, scaled_dot_product_attention or float64).

def seeded(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def randn(*shape, dtype=torch.float64, seed=0):
    return torch.randn(*shape, generator=seeded(seed), dtype=dtype)


# --- chunked attention on unbatched causal inputs -------------------------------------------

@pytest.mark.parametrize("n_q,n_k", [(9, 9), (3, 10), (10, 10)])
def test_chunked_attention_unbatched_causal_longer_than_a_chunk(n_q, n_k):
    q, k, v = randn(n_q, 4, seed=1), randn(n_k, 4, seed=2), randn(n_k, 3, seed=3)
    got = mha.chunked_attention(q, k, v, chunk_size=4, causal=True)
    allowed = torch.ones(n_q, n_k, dtype=torch.bool).tril(n_k - n_q)  # bottom-right aligned
    expected = F.scaled_dot_product_attention(q[None], k[None], v[None], attn_mask=allowed)[0]
    torch.testing.assert_close(got, expected)


def test_chunked_attention_takes_is_causal_as_the_other_functions_do():
    """It took only causal=; is_causal= (every other function's name) was a TypeError."""
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(2, 7, 4, dtype=torch.float64, generator=g) for _ in range(3))
    expected = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    got = mha.chunked_attention(q, k, v, chunk_size=3, is_causal=True)
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(mha.chunked_attention(q, k, v, chunk_size=3, causal=True), got)
    torch.testing.assert_close(mha.chunked_attention(q, k, v, chunk_size=3, causal=True,
                                                     is_causal=True), got)
    torch.testing.assert_close(mha.chunked_attention(q, k, v, chunk_size=3, is_causal=False),
                               F.scaled_dot_product_attention(q, k, v))
    with pytest.raises(ValueError, match="causal=True and is_causal=False disagree"):
        mha.chunked_attention(q, k, v, causal=True, is_causal=False)
    with pytest.raises(ValueError, match="is_causal"):
        mha.chunked_attention(q, k, v, is_causal=1.5)


@settings(max_examples=200, deadline=None)
@given(st.sampled_from([torch.float16, torch.bfloat16, torch.float32, torch.float64]),
       st.lists(st.tuples(st.integers(0, 3), st.sampled_from(SPECIAL + [6e4, -6e4, 3e38])),
                max_size=4),
       st.integers(0, 2**16), st.booleans())
def test_all_finite_says_what_isfinite_all_says(dtype, specials, seed, empty):
    """The fused path's look at Q, K, V (``all_finite``: a sum per tensor first, element by
    element only where the sum is not finite) gives exactly the element-by-element answer,
    also where finite values overflow the sum (float16's 6e4, float32's 3e38)."""
    from mha._validation import all_finite

    g = torch.Generator().manual_seed(seed)
    tensors = [torch.randn(2, 3, 0 if empty and i == 1 else 5, 4, generator=g).to(dtype)
               for i in range(4)]
    for which, value in specials:
        t = tensors[which]
        if t.numel():
            t.view(-1)[int(torch.randint(t.numel(), (1,), generator=g))] = value
    expected = all(bool(torch.isfinite(t).all()) for t in tensors)
    assert all_finite(tensors) is expected
    # transposed views, as the layer's heads are
    assert all_finite([t.transpose(1, 2) for t in tensors]) is expected


def test_all_finite_on_finite_values_whose_sum_overflows():
    from mha._validation import all_finite

    big = torch.full((4, 4), 6e4, dtype=torch.float16)
    assert torch.isinf(big.sum()) and all_finite([big])
    assert not all_finite([big, torch.tensor([float("nan")], dtype=torch.float16)])
