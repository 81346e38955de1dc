"""mha.additive_scores and mha.AdditiveScore against the formula of Bahdanau et al. (2015)."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import mha

pytestmark = pytest.mark.chapter(1)  # make chapter runs this file (issue 38)


def draw(g, *shape):
    return torch.randn(*shape, generator=g, dtype=torch.float64)


@pytest.mark.claim("1.6")
def test_additive_scores_match_the_formula_entry_by_entry():
    g = torch.Generator().manual_seed(0)
    q, k = draw(g, 2, 3, 4), draw(g, 2, 5, 6)          # d_q = 4, d_k = 6: sizes may differ
    w_q, w_k, w_v, b = draw(g, 4, 7), draw(g, 6, 7), draw(g, 7), draw(g, 7)
    scores = mha.additive_scores(q, k, w_q, w_k, w_v, b)
    assert scores.shape == (2, 3, 5)
    for n in range(2):
        for i in range(3):
            for j in range(5):
                # column-vector form of the paper: v^T tanh(W q_i + U k_j + b)
                by_hand = w_v @ torch.tanh(w_q.T @ q[n, i] + w_k.T @ k[n, j] + b)
                torch.testing.assert_close(scores[n, i, j], by_hand)


def test_additive_score_module_uses_its_linear_layers():
    torch.manual_seed(1)
    score = mha.AdditiveScore(3, 5, 8).double()
    g = torch.Generator().manual_seed(1)
    q, k = draw(g, 4, 3), draw(g, 6, 5)
    hidden = torch.tanh(score.w_q(q)[:, None, :] + score.w_k(k)[None, :, :])
    torch.testing.assert_close(score(q, k), score.w_v(hidden)[..., 0])
    # without the bias the score is odd: s(-q, -k) = -s(q, k)
    odd = mha.AdditiveScore(3, 5, 8, bias=False).double()
    torch.testing.assert_close(odd(-q, -k), -odd(q, k))


@pytest.mark.claim("1.6")
def test_additive_accepts_different_query_and_key_sizes_but_dot_product_does_not():
    g = torch.Generator().manual_seed(2)
    q, k, v = draw(g, 3, 2), draw(g, 4, 5), draw(g, 4, 6)
    scores = mha.AdditiveScore(2, 5, 4).double()(q, k)
    weights = torch.softmax(scores, dim=-1)
    assert (weights @ v).shape == (3, 6)
    with pytest.raises(ValueError, match="same feature size d_k"):
        mha.attention(q, k, v)


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**31 - 1), st.integers(1, 5), st.integers(1, 5), st.integers(1, 5))
def test_without_tanh_the_weights_do_not_depend_on_the_query(seed, n_q, n_k, hidden):
    # Exercise 1.4: s_ij = w_v.(q_i W_q + k_j W_k + b) = (a term of i) + (a term of j), and the
    # softmax over j drops the term of i, so every query gets the same weights.
    g = torch.Generator().manual_seed(seed)
    q, k = draw(g, n_q, 3), draw(g, n_k, 4)
    w_q, w_k, w_v, b = draw(g, 3, hidden), draw(g, 4, hidden), draw(g, hidden), draw(g, hidden)
    linear_scores = ((q @ w_q)[:, None, :] + (k @ w_k)[None, :, :] + b) @ w_v
    weights = torch.softmax(linear_scores, dim=-1)
    torch.testing.assert_close(weights, weights[:1].expand_as(weights))
    # the tanh is what makes the query matter (generic weights; n_q, n_k > 1)
    if n_q > 1 and n_k > 1:
        with_tanh = torch.softmax(mha.additive_scores(q, k, w_q, w_k, w_v, b), dim=-1)
        assert not torch.allclose(with_tanh, with_tanh[:1].expand_as(with_tanh))


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 2**31 - 1), st.integers(2, 9),
       st.floats(0.01, 100.0) | st.floats(-100.0, -0.01))
def test_one_dimensional_dot_product_attention_peaks_at_an_extreme_key(seed, n_k, scale):
    # For scalars the score scale*q*k is linear in k, so its maximum over the keys is at the
    # smallest or the largest key, never at one in between (the chapter's nearest-key lemma).
    g = torch.Generator().manual_seed(seed)
    q = torch.rand(6, 1, generator=g, dtype=torch.float64) * 2 - 1
    k = torch.rand(n_k, 1, generator=g, dtype=torch.float64) * 2 - 1
    _, weights = mha.attention(q, k, k, scale=scale)
    chosen = weights.argmax(-1)
    extreme = (chosen == k[:, 0].argmax()) | (chosen == k[:, 0].argmin())
    assert extreme.all()


@pytest.mark.parametrize("shapes, message", [
    (((3, 4), (5, 6), (4, 7), (5, 7), (7,)), r"w_k must have shape \(d_k, hidden\) = \(6"),
    (((3, 4), (5, 6), (3, 7), (6, 7), (7,)), r"w_q must have shape \(d_q, hidden\) = \(4"),
    (((3, 4), (5, 6), (4, 7), (6, 8), (7,)), "the same hidden size"),
    (((3, 4), (5, 6), (4, 7), (6, 7), (6,)), "the same hidden size"),
    (((2, 3, 4), (3, 5, 6), (4, 7), (6, 7), (7,)), "do not broadcast"),
    (((4,), (5, 6), (4, 7), (6, 7), (7,)), "at least 2 dimensions"),
])
def test_bad_shapes_raise_value_error_naming_them(shapes, message):
    tensors = [torch.randn(*s) for s in shapes]
    with pytest.raises(ValueError, match=message):
        mha.additive_scores(*tensors)


def test_bad_bias_and_sizes():
    q, k = torch.randn(3, 4), torch.randn(5, 6)
    w_q, w_k, w_v = torch.randn(4, 7), torch.randn(6, 7), torch.randn(7)
    with pytest.raises(ValueError, match=r"bias must have shape \(7,\), got \(6,\)"):
        mha.additive_scores(q, k, w_q, w_k, w_v, torch.randn(6))
    with pytest.raises(ValueError, match="hidden_dim must be a positive int, got 0"):
        mha.AdditiveScore(4, 6, 0)


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 2**31 - 1), st.integers(2, 9), st.integers(1, 4))
def test_linear_projections_of_scalar_tokens_still_peak_at_an_extreme_key(seed, n_k, width):
    # chapter 1: with tokens (q, 1) and (k, 1) and any linear W_Q, W_K the score is
    # a(q) k + b(q), linear in k, so the largest weight is at the smallest or the largest key
    g = torch.Generator().manual_seed(seed)
    q = torch.rand(6, 1, generator=g, dtype=torch.float64) * 2 - 1
    k = torch.rand(n_k, 1, generator=g, dtype=torch.float64) * 2 - 1
    w_q, w_k = draw(g, 2, width), draw(g, 2, width)
    ones_q, ones_k = torch.ones_like(q), torch.ones_like(k)
    q_feat, k_feat = torch.cat([q, ones_q], -1) @ w_q, torch.cat([k, ones_k], -1) @ w_k
    _, weights = mha.attention(q_feat, k_feat, k)
    chosen = weights.argmax(-1)
    assert ((chosen == k[:, 0].argmax()) | (chosen == k[:, 0].argmin())).all()


def test_nonlinear_key_features_find_the_nearest_key():
    # exercise 1.5: (q, 1) . (k, -k^2/2) = -(q - k)^2 / 2 + q^2 / 2, largest at the nearest key
    g = torch.Generator().manual_seed(4)
    q = torch.rand(200, 1, generator=g, dtype=torch.float64) * 4 - 2
    k = torch.rand(9, 1, generator=g, dtype=torch.float64) * 4 - 2
    phi, psi = torch.cat([q, torch.ones_like(q)], -1), torch.cat([k, -k**2 / 2], -1)
    _, weights = mha.attention(phi, psi, k)
    assert torch.equal(weights.argmax(-1), (q - k.T).abs().argmin(-1))


@pytest.mark.parametrize("bias", [0.5, [0.0] * 6, torch.zeros(6, dtype=torch.long)])
def test_additive_scores_name_a_bias_that_is_not_a_float_tensor(bias):
    """A float or a list raised AttributeError ('float' object has no attribute 'dtype')."""
    q, k = torch.randn(2, 3, 4), torch.randn(2, 5, 4)
    w_q, w_k, w_v = torch.randn(4, 6), torch.randn(4, 6), torch.randn(6)
    with pytest.raises(ValueError, match="^bias must"):
        mha.additive_scores(q, k, w_q, w_k, w_v, bias=bias)
