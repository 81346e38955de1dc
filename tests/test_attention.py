"""mha.attention against PyTorch's fused kernel and against the properties chapter 1 states."""

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

import mha

pytestmark = pytest.mark.chapter(1)  # make chapter runs this file (issue 38)


def random_case(generator, lead, n_q, n_k, d_k, d_v, dtype=torch.float64):
    def draw(*shape):
        return torch.randn(*shape, generator=generator, dtype=dtype)

    return draw(*lead, n_q, d_k), draw(*lead, n_k, d_k), draw(*lead, n_k, d_v)


@pytest.mark.claim("1.4")
@pytest.mark.parametrize("seed", range(40))
def test_matches_scaled_dot_product_attention(seed):
    g = torch.Generator().manual_seed(seed)
    sizes = torch.randint(1, 6, (6,), generator=g).tolist()
    lead = sizes[: seed % 3]  # zero, one or two leading batch dimensions
    n_q, n_k, d_k, d_v = sizes[2:6]
    q, k, v = random_case(g, lead, n_q, n_k, d_k, d_v)
    # a bool mask broadcast over the batch, with at least one allowed key per query
    mask = torch.rand(n_q, n_k, generator=g) < 0.6
    mask[torch.arange(n_q), torch.randint(0, n_k, (n_q,), generator=g)] = True
    for m in (None, mask):
        scale = None if seed % 2 else 0.3
        out, weights = mha.attention(q, k, v, mask=m, scale=scale)
        expected = F.scaled_dot_product_attention(q, k, v, attn_mask=m, scale=scale)
        torch.testing.assert_close(out, expected)
        assert weights.shape == (*lead, n_q, n_k)


def test_float_mask_is_added_to_the_scores():
    g = torch.Generator().manual_seed(0)
    q, k, v = random_case(g, [2], 3, 4, 5, 6)
    bias = torch.randn(3, 4, generator=g, dtype=torch.float64)
    out, _ = mha.attention(q, k, v, mask=bias)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=bias))


@pytest.mark.claim("1.1")
def test_default_scale_is_inverse_sqrt_dk():
    g = torch.Generator().manual_seed(1)
    q, k, v = random_case(g, [], 3, 4, 9, 2)
    _, weights = mha.attention(q, k, v)
    by_hand = torch.softmax(q @ k.T / math.sqrt(9), dim=-1)  # float64 reference
    torch.testing.assert_close(weights, by_hand)


def test_fully_masked_query_gets_zero_weights_and_output_not_nan():
    g = torch.Generator().manual_seed(2)
    q, k, v = random_case(g, [], 3, 4, 5, 6)
    mask = torch.ones(3, 4, dtype=torch.bool)
    mask[1] = False
    q.requires_grad_(True)
    out, weights = mha.attention(q, k, v, mask=mask)
    assert torch.equal(weights[1], torch.zeros(4, dtype=weights.dtype))
    assert torch.equal(out[1], torch.zeros(6, dtype=out.dtype))
    # same output as PyTorch's fused kernel, and the gradients stay finite
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=mask))
    out.sum().backward()
    assert torch.isfinite(q.grad).all()


def test_fully_masked_by_float_minus_inf():
    q, k, v = random_case(torch.Generator().manual_seed(3), [], 2, 3, 4, 4)
    mask = torch.zeros(2, 3, dtype=torch.float64)
    mask[0] = float("-inf")
    out, weights = mha.attention(q, k, v, mask=mask)
    assert torch.equal(out[0], torch.zeros(4, dtype=out.dtype))
    assert torch.isfinite(out).all() and torch.isfinite(weights).all()


@pytest.mark.parametrize("dtype, mask_dtype, blocked", [
    (torch.float32, torch.float64, -1e39),  # finite in float64, -inf in float32
    (torch.float16, torch.float32, -1e9),  # the "large negative" of many float16 models
    (torch.bfloat16, torch.float32, torch.finfo(torch.float32).min),  # rounds to -inf
])
def test_mask_row_that_is_minus_inf_only_in_the_query_dtype_is_fully_masked(
        dtype, mask_dtype, blocked):
    q, k, v = (t.to(dtype) for t in random_case(torch.Generator().manual_seed(4), [], 3, 4, 8, 8))
    mask = torch.zeros(3, 4, dtype=mask_dtype)
    mask[0] = blocked
    assert (mask.to(dtype)[0] == float("-inf")).all()  # the case: -inf after conversion only
    out, weights = mha.attention(q, k, v, mask=mask)
    assert torch.equal(weights[0], torch.zeros(4, dtype=dtype))
    assert torch.equal(out[0], torch.zeros(8, dtype=dtype))
    # the other rows (mask 0): as PyTorch's kernel computes them in float64
    expected = F.scaled_dot_product_attention(q.double(), k.double(), v.double())
    torch.testing.assert_close(out[1:].double(), expected[1:], atol=1e-2, rtol=1e-2)


@pytest.mark.parametrize(
    "shapes, message",
    [
        (((2, 3, 4), (2, 5, 6), (2, 5, 6)), "same feature size d_k"),
        (((2, 3, 4), (2, 5, 4), (2, 6, 4)), "same number of tokens"),
        (((4,), (5, 4), (5, 4)), "at least 2 dimensions"),
    ],
)
@pytest.mark.claim("1.4")
def test_bad_shapes_raise_value_error_naming_them(shapes, message):
    q, k, v = (torch.randn(*s) for s in shapes)
    with pytest.raises(ValueError, match=message):
        mha.attention(q, k, v)


def test_mask_that_does_not_broadcast():
    q, k, v = torch.randn(2, 3, 4), torch.randn(2, 5, 4), torch.randn(2, 5, 4)
    with pytest.raises(ValueError, match=r"\(3, 4\) does not broadcast to .*\(2, 3, 5\)"):
        mha.attention(q, k, v, mask=torch.ones(3, 4, dtype=torch.bool))


def test_integer_inputs_and_masks_are_refused():
    x = torch.ones(3, 4)
    with pytest.raises(ValueError, match="floating dtype"):
        mha.attention(x.long(), x, x)
    with pytest.raises(ValueError, match="bool .* or floating"):
        mha.attention(x, x, x, mask=torch.ones(3, 3, dtype=torch.long))


# ----- properties stated in chapter 1, for all inputs -----

dims = st.integers(1, 6)


@st.composite
def attention_inputs(draw):
    seed = draw(st.integers(0, 2**31 - 1))
    n_q, n_k, d_k, d_v = draw(dims), draw(dims), draw(dims), draw(dims)
    scale = draw(st.floats(0.01, 10.0))
    g = torch.Generator().manual_seed(seed)
    q, k, v = random_case(g, [2], n_q, n_k, d_k, d_v)
    mask = torch.rand(2, n_q, n_k, generator=g) < draw(st.floats(0.0, 1.0))
    return q, k, v, mask, scale


@settings(max_examples=150, deadline=None)
@given(attention_inputs())
def test_weights_are_a_distribution_over_allowed_keys(case):
    q, k, v, mask, scale = case
    _, weights = mha.attention(q, k, v, mask=mask, scale=scale)
    assert (weights >= 0).all()
    assert (weights[~mask] == 0).all(), "a masked key got weight"
    row_sums = weights.sum(-1)
    has_key = mask.any(-1)
    torch.testing.assert_close(row_sums[has_key], torch.ones_like(row_sums[has_key]))
    assert (row_sums[~has_key] == 0).all()


@settings(max_examples=100, deadline=None)
@given(attention_inputs(), st.randoms(use_true_random=False))
def test_permuting_keys_and_values_together_changes_nothing(case, rnd):
    q, k, v, mask, scale = case
    perm = list(range(k.shape[-2]))
    rnd.shuffle(perm)
    out, weights = mha.attention(q, k, v, mask=mask, scale=scale)
    out_p, weights_p = mha.attention(q, k[:, perm], v[:, perm], mask=mask[..., perm],
                                     scale=scale)
    torch.testing.assert_close(out_p, out)
    torch.testing.assert_close(weights_p, weights[..., perm])


@settings(max_examples=100, deadline=None)
@given(attention_inputs(), st.floats(-50.0, 50.0))
def test_adding_a_constant_to_all_scores_changes_nothing(case, constant):
    q, k, v, mask, scale = case
    out, weights = mha.attention(q, k, v, mask=mask, scale=scale)
    shifted = torch.full(mask.shape, constant, dtype=q.dtype).masked_fill(~mask, float("-inf"))
    out_c, weights_c = mha.attention(q, k, v, mask=shifted, scale=scale)
    torch.testing.assert_close(out_c, out)
    torch.testing.assert_close(weights_c, weights)


def test_self_attention_is_attention_of_x_with_itself():
    x = torch.randn(2, 5, 8, dtype=torch.float64)
    out, weights = mha.self_attention(x)
    by_hand = torch.softmax(x @ x.transpose(-2, -1) / math.sqrt(8), dim=-1)
    torch.testing.assert_close(weights, by_hand)
    torch.testing.assert_close(out, by_hand @ x)
