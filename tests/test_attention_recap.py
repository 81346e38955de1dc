"""The claims of chapter 1 (attention recap), each against an independent reference."""

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

import mha

pytestmark = pytest.mark.chapter(1)  # make chapter runs this file (issue 38)


def draw(g, *shape):
    return torch.randn(*shape, generator=g, dtype=torch.float64)


def test_hand_example_weights_and_outputs():
    # the chapter's example: every score is 0, 1 or 2, so the weights are ratios of powers of e
    q = torch.tensor([[2.0, 0, 0, 0], [0, 0, 1, 1], [1, 1, 0, 0]], dtype=torch.float64)
    k = torch.tensor([[2.0, 0, 0, 0], [0, 2, 0, 0], [0, 0, 2, 2]], dtype=torch.float64)
    v = torch.tensor([[10.0, 0], [0, 10], [10, 10]], dtype=torch.float64)
    out, weights = mha.attention(q, k, v)
    e = math.e
    rows = [[e**2, 1, 1], [1, 1, e**2], [e, e, 1]]
    expected = torch.tensor([[x / sum(r) for x in r] for r in rows], dtype=torch.float64)
    torch.testing.assert_close(weights, expected)
    torch.testing.assert_close(out, expected @ v)
    assert round(out[2, 0].item(), 3) == round(10 * (e + 1) / (2 * e + 1), 3)


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 2**31 - 1), st.integers(1, 6), st.integers(1, 6), st.integers(1, 6))
def test_output_lies_between_the_smallest_and_largest_value(seed, n_q, n_k, d_v):
    # each output row is a convex combination of the value rows
    g = torch.Generator().manual_seed(seed)
    q, k, v = draw(g, n_q, 3), draw(g, n_k, 3), draw(g, n_k, d_v)
    out, _ = mha.attention(q, k, v)
    assert (out >= v.min(0).values - 1e-12).all() and (out <= v.max(0).values + 1e-12).all()


@pytest.mark.claim("1.3")
def test_self_attention_output_has_d_v_features_not_d():
    # seed 001: "self-attention computes Y in R^{n x d}" holds only when d_v = d
    g = torch.Generator().manual_seed(0)
    n, d, d_k, d_v = 4, 6, 3, 2
    x = draw(g, n, d)
    w_q, w_k, w_v = draw(g, d, d_k), draw(g, d, d_k), draw(g, d, d_v)
    y, weights = mha.attention(x @ w_q, x @ w_k, x @ w_v)
    assert y.shape == (n, d_v) and weights.shape == (n, n)
    reference = F.scaled_dot_product_attention(x @ w_q, x @ w_k, x @ w_v)
    torch.testing.assert_close(y, reference)
    # with d_v = d (here Q = K = V = X, seed 000's self-attention) the output is n x d
    assert mha.self_attention(x)[0].shape == (n, d)


@pytest.mark.claim("1.7")
def test_queries_keys_values_are_n_by_d_only_without_projections_or_at_full_width():
    # seed 003: "the queries, keys, and values are all n x d matrices"
    torch.manual_seed(0)
    n, d = 5, 6
    x = draw(torch.Generator().manual_seed(2), n, d)
    # without projections Q = K = V = X: all n x d, and the weights and output follow
    out, weights = mha.self_attention(x)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(x, x, x))
    assert out.shape == (n, d) and weights.shape == (n, n)
    # a head's projections: n x d_k, n x d_k, n x d_v
    head = mha.SelfAttention(d, key_dim=3, value_dim=2).double()
    q, k, v = head.w_q(x), head.w_k(x), head.w_v(x)
    assert (q.shape, k.shape, v.shape) == ((n, 3), (n, 3), (n, 2))
    torch.testing.assert_close(head(x)[0], F.scaled_dot_product_attention(q, k, v))
    # full-width projections (d_k = d_v = d): n x d again
    full = mha.SelfAttention(d).double()
    assert {tuple(p(x).shape) for p in (full.w_q, full.w_k, full.w_v)} == {(n, d)}


@pytest.mark.claim("1.2")
def test_self_attention_with_projections_is_attention_of_three_views_of_x():
    # seed 000 writes self-attention as Q = K = V; with weights, Q, K, V are three different
    # projections of the same X, and Q = K = V = X is the special case W = identity
    torch.manual_seed(0)
    layer = mha.SelfAttention(5, key_dim=3, value_dim=4).double()
    x = draw(torch.Generator().manual_seed(1), 2, 6, 5)
    out, _ = layer(x)
    q, k, v = x @ layer.w_q.weight.T, x @ layer.w_k.weight.T, x @ layer.w_v.weight.T
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v))
    identity = mha.SelfAttention(5).double()
    for proj in (identity.w_q, identity.w_k, identity.w_v):
        proj.weight.data = torch.eye(5, dtype=torch.float64)
    torch.testing.assert_close(identity(x)[0], mha.self_attention(x)[0])


def test_dot_product_variance_grows_like_d_k_and_the_scale_removes_it():
    # Vaswani et al., footnote 4: components with mean 0 and variance 1 give Var(q.k) = d_k
    g = torch.Generator().manual_seed(4)
    for d_k in (1, 4, 16, 64, 256):
        q, k = draw(g, 8000, d_k), draw(g, 8000, d_k)
        dots = (q * k).sum(-1)
        assert abs(dots.var().item() / d_k - 1) < 0.1
        assert abs((dots / math.sqrt(d_k)).var().item() - 1) < 0.1


def test_per_query_the_scaled_scores_spread_by_the_querys_norm_over_sqrt_d_k():
    """Unit variance for every d_k holds over random queries; one fixed query's scores over
    random keys have standard deviation |q| / sqrt(d_k) (s_j = q.k_j / sqrt(d_k), k_j ~ N(0, I)),
    which differs from query to query, most at small d_k (at d_k = 1 it is |q|)."""
    g = torch.Generator().manual_seed(41)
    for d_k in (1, 4, 64):
        queries, keys = draw(g, 4, d_k), draw(g, 40_000, d_k)
        spread = (queries @ keys.T / math.sqrt(d_k)).std(dim=-1)  # (4,): one per query
        torch.testing.assert_close(spread, queries.norm(dim=-1) / math.sqrt(d_k), rtol=0.02,
                                   atol=0.0)


@pytest.mark.claim("1.1")
def test_dividing_by_sqrt_of_the_width_shrinks_per_head_score_variance_to_one_over_h():
    # seed 000 divides by sqrt(C); with h heads of size d_k = C / h that gives variance 1 / h
    g = torch.Generator().manual_seed(5)
    width, heads = 256, 8
    d_k = width // heads
    q, k = draw(g, 20000, d_k), draw(g, 20000, d_k)
    dots = (q * k).sum(-1)
    assert abs((dots / math.sqrt(width)).var().item() * heads - 1) < 0.1
    assert abs((dots / math.sqrt(d_k)).var().item() - 1) < 0.1
    # mha.attention's default is the per-head 1/sqrt(d_k)
    v = draw(g, 7, 3)
    _, default = mha.attention(q[:5], k[:7], v)
    _, per_head = mha.attention(q[:5], k[:7], v, scale=1 / math.sqrt(d_k))
    torch.testing.assert_close(default, per_head)


def test_softmax_jacobian_is_diag_minus_outer_product():
    g = torch.Generator().manual_seed(6)
    s = draw(g, 7)
    a = torch.softmax(s, -1)
    jac = torch.autograd.functional.jacobian(lambda t: torch.softmax(t, -1), s)
    torch.testing.assert_close(jac, torch.diag(a) - torch.outer(a, a))


def test_unscaled_scores_saturate_the_softmax_and_shrink_its_gradient():
    g = torch.Generator().manual_seed(7)
    max_raw, max_scaled, grad_raw, grad_scaled = [], [], [], []
    for d_k in (1, 16, 256):
        q, k = draw(g, 500, 1, d_k), draw(g, 500, 16, d_k)
        dots = (q @ k.transpose(-2, -1))[:, 0]
        for scores, maxes, grads in ((dots, max_raw, grad_raw),
                                     (dots / math.sqrt(d_k), max_scaled, grad_scaled)):
            a = torch.softmax(scores, -1)
            jac = torch.diag_embed(a) - a[:, :, None] * a[:, None, :]
            maxes.append(a.max(-1).values.mean().item())
            grads.append(torch.linalg.matrix_norm(jac).mean().item())
    assert max_raw[0] < max_raw[1] < max_raw[2] and max_raw[2] > 0.9
    assert max(max_scaled) - min(max_scaled) < 0.1
    assert grad_raw[2] < grad_scaled[2] / 2


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 2**31 - 1), st.integers(2, 6))
def test_temperature_limits_are_a_hard_look_up_and_a_plain_average(seed, n_k):
    g = torch.Generator().manual_seed(seed)
    q, k, v = draw(g, 4, 3), draw(g, n_k, 3), draw(g, n_k, 2)
    scores = q @ k.T
    top2 = scores.topk(2, dim=-1).values
    if (top2[:, 0] - top2[:, 1]).min() < 1e-3:
        return  # a near tie: the T -> 0 limit splits the weight
    cold_out, cold = mha.attention(q, k, v, scale=1e5)     # temperature 1e-5
    hot_out, hot = mha.attention(q, k, v, scale=1e-10)     # temperature 1e10
    torch.testing.assert_close(cold, F.one_hot(scores.argmax(-1), n_k).double())
    torch.testing.assert_close(cold_out, v[scores.argmax(-1)])
    torch.testing.assert_close(hot, torch.full_like(hot, 1 / n_k))
    torch.testing.assert_close(hot_out, v.mean(0).expand_as(hot_out))


def test_a_tie_at_zero_temperature_splits_the_weight():
    q = torch.tensor([[1.0, 1.0]], dtype=torch.float64)
    k = torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.0, 0.0]], dtype=torch.float64)
    _, weights = mha.attention(q, k, k, scale=1e4)
    torch.testing.assert_close(weights, torch.tensor([[0.5, 0.5, 0.0]], dtype=torch.float64))


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 2**31 - 1), st.integers(1, 6), st.integers(0, 4))
def test_padding_does_not_change_the_real_tokens(seed, length, n_pad):
    g = torch.Generator().manual_seed(seed)
    n = length + n_pad
    q, k, v = draw(g, n, 3), draw(g, n, 3), draw(g, n, 2)
    key_is_real = (torch.arange(n) < length)[None, :]        # (1, n_k), broadcast over queries
    out, weights = mha.attention(q, k, v, mask=key_is_real)
    alone, _ = mha.attention(q[:length], k[:length], v[:length])
    torch.testing.assert_close(out[:length], alone)
    assert (weights[:, length:] == 0).all()


@pytest.mark.claim("1.5")
@settings(max_examples=100, deadline=None)
@given(st.integers(0, 2**31 - 1), st.integers(1, 7), st.data())
def test_causal_outputs_ignore_the_future(seed, n, data):
    g = torch.Generator().manual_seed(seed)
    q, k, v = draw(g, 2, n, 3), draw(g, 2, n, 3), draw(g, 2, n, 4)
    causal = torch.tril(torch.ones(n, n, dtype=torch.bool))
    out, weights = mha.attention(q, k, v, mask=causal)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, is_causal=True))
    t = data.draw(st.integers(0, n - 1))
    k2, v2 = k.clone(), v.clone()
    k2[:, t + 1:] = draw(g, 2, n - t - 1, 3)
    v2[:, t + 1:] = draw(g, 2, n - t - 1, 4)
    out2, _ = mha.attention(q, k2, v2, mask=causal)
    torch.testing.assert_close(out2[:, : t + 1], out[:, : t + 1])
    assert (weights.triu(1) == 0).all()


@pytest.mark.claim("1.5")
@settings(max_examples=100, deadline=None)
@given(st.integers(0, 2**31 - 1), st.integers(1, 6), st.integers(1, 6))
def test_unmasked_weights_are_positive_on_every_key_including_its_own(seed, n, d):
    # seed 001: self-attention "attends to all other elements"; it attends to itself as well
    x = draw(torch.Generator().manual_seed(seed), n, d)
    _, weights = mha.self_attention(x)
    assert (weights > 0).all() and (weights.diagonal() > 0).all()


def test_naive_softmax_of_a_fully_masked_row_is_nan_but_attention_gives_zeros():
    scores = torch.full((1, 3), float("-inf"))
    assert torch.isnan(torch.softmax(scores, -1)).all()
    q, k, v = torch.randn(2, 4), torch.randn(3, 4), torch.randn(3, 5)
    mask = torch.tensor([[False, False, False], [True, True, False]])
    out, weights = mha.attention(q, k, v, mask=mask)
    assert (out[0] == 0).all() and (weights[0] == 0).all()
    torch.testing.assert_close(weights[1].sum(), torch.tensor(1.0))


def test_dot_product_variance_scales_with_sigma_to_the_fourth():
    # exercise 1.1: components of variance sigma^2 give Var(q.k) = d_k sigma^4
    g = torch.Generator().manual_seed(8)
    sigma, d_k = 2.0, 16
    q, k = sigma * draw(g, 20000, d_k), sigma * draw(g, 20000, d_k)
    dots = (q * k).sum(-1)
    assert abs(dots.var().item() / (d_k * sigma**4) - 1) < 0.1
    assert abs((dots / (sigma**2 * math.sqrt(d_k))).var().item() - 1) < 0.1


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 2**31 - 1), st.integers(2, 8))
def test_entropy_of_the_weights_never_decreases_with_the_temperature(seed, n_k):
    # exercise 1.6: dH/d(1/T) = -(1/T) Var_alpha(s) <= 0
    scores = 3 * draw(torch.Generator().manual_seed(seed), 4, n_k)
    temperatures = torch.logspace(-2, 3, 60, dtype=torch.float64)
    log_p = torch.log_softmax(scores[None] / temperatures[:, None, None], dim=-1)
    entropy = -(log_p.exp() * log_p).sum(-1)            # (temperature, row)
    assert (entropy[1:] >= entropy[:-1] - 1e-12).all()
    torch.testing.assert_close(entropy[-1], torch.full((4,), math.log(n_k),
                                                       dtype=torch.float64), atol=1e-3, rtol=0)


def test_soft_attention_passes_gradient_to_the_scores_and_a_hard_look_up_does_not():
    # chapter 1, soft and hard attention: d(output)/d(scores) vanishes once T is well below the
    # gap between the two largest scores (random values, so the top two keys' values differ in
    # what is differentiated), and the hard look-up v[argmax s] has no gradient path to the
    # scores at all
    g = torch.Generator().manual_seed(9)
    values = draw(g, 5, 3)
    s = draw(g, 5).requires_grad_(True)
    top = s.detach().topk(2).values
    gap = (top[0] - top[1]).item()
    norms = []
    for temperature in (gap / 5, gap / 50, gap / 500):
        (grad,) = torch.autograd.grad((torch.softmax(s / temperature, -1) @ values).sum(), s)
        norms.append(grad.norm().item())
    assert norms[0] > norms[1] > norms[2] and norms[2] < 1e-100
    (grad,) = torch.autograd.grad((torch.softmax(s, -1) @ values).sum(), s)
    assert grad.norm() > 0.1  # at T = 1 the scores do learn
    assert not values[s.argmax()].requires_grad


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 2**31 - 1))
def test_frobenius_norm_of_the_softmax_jacobian_is_the_rms_gradient_reaching_the_scores(seed):
    # E|J^T g|^2 = tr(J J^T) = |J|_F^2 for g with independent standard normal entries
    g = torch.Generator().manual_seed(seed)
    a = torch.softmax(3 * draw(g, 6), -1)
    jac = torch.diag(a) - torch.outer(a, a)
    upstream = draw(g, 10000, 6)
    sampled = (upstream @ jac).pow(2).sum(-1).mean()
    assert abs(sampled / torch.linalg.matrix_norm(jac) ** 2 - 1) < 0.1


def test_the_three_lines_reproduce_a_real_heads_weights_and_head_2_looks_back():
    # chapter 1, "The same lines on a real sentence": softmax(Q K^T / sqrt(d_k)) on MiniLM's own
    # queries and keys gives the model's weights, for every head of layer 0; head 2 puts more
    # than 0.99 on the previous token (the lab's positional head), and [CLS] on itself
    from mha.models import pretrained

    sentence = "The cat sat on the mat."
    tokens, q, k, v = pretrained.sentence_qkv(sentence, layer=0)
    _, weights = pretrained.sentence_attention(sentence)
    assert q.shape == (12, len(tokens), 32)
    by_hand = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1)
    torch.testing.assert_close(by_hand, weights[0])
    n = len(tokens)
    assert (weights[0, 2][torch.arange(1, n), torch.arange(n - 1)] > 0.99).all()
    assert weights[0, 2, 0, 0] > 0.99
