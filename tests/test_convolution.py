"""Chapter 5: multi-head self-attention as a convolution (mha.conv_to_attention and friends)."""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

import mha

pytestmark = pytest.mark.chapter(5)  # make chapter runs this file (issue 38)


def random_conv_case(seed):
    """A random conv and image; the chapter's closing note measures the same 36 cases."""
    g = torch.Generator().manual_seed(seed)
    c_in, c_out = torch.randint(1, 6, (2,), generator=g).tolist()
    size = [1, 3, 5][seed % 3]
    height, width = torch.randint(1, 13, (2,), generator=g).tolist()
    conv = nn.Conv2d(c_in, c_out, size, padding=size // 2, bias=seed % 2 == 0)
    with torch.no_grad():
        for p in conv.parameters():
            p.copy_(torch.randn(p.shape, generator=g))
    x = torch.randn(2, c_in, height, width, generator=g)
    return conv, x


def relative_error(got, expected):
    return ((got - expected).abs().max() / expected.abs().max()).item()


@pytest.mark.claim("5.2")
@pytest.mark.parametrize("seed", range(36))
def test_conv_to_attention_matches_conv2d(seed):
    conv, x = random_conv_case(seed)
    layer = mha.conv_to_attention(conv)
    assert layer.num_heads == conv.kernel_size[0] ** 2
    with torch.no_grad():
        got, expected = layer(x), conv(x)
    torch.testing.assert_close(got, expected)  # float32 tolerances
    assert relative_error(got, expected) < 1e-5


@pytest.mark.parametrize("seed", range(6))
def test_conv_to_attention_matches_conv2d_in_float64(seed):
    conv, x = random_conv_case(seed)
    conv, x = conv.double(), x.double()
    with torch.no_grad():
        got, expected = mha.conv_to_attention(conv)(x), conv(x)
    torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-12)


def test_padding_same_string_is_accepted():
    torch.manual_seed(0)
    conv = nn.Conv2d(2, 3, 3, padding="same")
    x = torch.randn(1, 2, 5, 7)
    with torch.no_grad():
        torch.testing.assert_close(mha.conv_to_attention(conv)(x), conv(x))


@pytest.mark.parametrize(
    ("conv", "message"),
    [
        (nn.Conv2d(1, 1, 3, padding=1, stride=2), "stride.*read at every s-th pixel"),
        (nn.Conv2d(1, 1, 3, padding=(2, 1), dilation=(2, 1)), "equal dilations"),
        (nn.Conv2d(1, 1, 3, padding=1, dilation=2), "padding=2 for a 3x3 kernel with dilation 2"),
        (nn.Conv2d(1, 1, 2, padding=1), "odd square"),
        (nn.Conv2d(1, 1, (3, 1), padding=(1, 0)), "odd square"),
        (nn.Conv2d(1, 1, 3, padding=0), "'same' zero padding"),
        (nn.Conv2d(1, 1, 3, padding=1, padding_mode="reflect"), "padding_mode"),
        (nn.Conv1d(1, 1, 3, padding=1), "plain nn.Conv2d.*got Conv1d"),
    ],
)
def test_what_is_not_covered_raises(conv, message):
    with pytest.raises(ValueError, match=message):
        mha.conv_to_attention(conv)


def test_bad_inputs_raise_with_the_shape():
    layer = mha.conv_to_attention(nn.Conv2d(3, 2, 3, padding=1))
    with pytest.raises(ValueError, match=r"shape \(batch, 3, height, width\).*\(1, 2, 4, 4\)"):
        layer(torch.randn(1, 2, 4, 4))
    with pytest.raises(ValueError, match=r"\(3, 4, 4\)"):
        layer(torch.randn(3, 4, 4))
    with pytest.raises(ValueError, match="alpha must be positive"):
        mha.conv_to_attention(nn.Conv2d(1, 1, 1), alpha=0.0)
    with pytest.raises(ValueError, match=r"centres must have shape \(heads, 2\)"):
        mha.quadratic_encoding(3, 3, torch.zeros(4, 3), torch.ones(4))
    with pytest.raises(ValueError, match=r"alpha must have shape \(4,\)"):
        mha.quadratic_encoding(3, 3, torch.zeros(4, 2), torch.ones(2))
    with pytest.raises(ValueError, match="padding must be an int >= 0"):
        mha.GridSelfAttention(1, 1, 1, padding=-1)


def test_relative_scores_refuse_mixed_dtypes_and_over_budget_scores_by_name():
    shapes = [(1, 3, 2), (1, 3, 2), (3, 3, 4), (2, 2, 5), (2, 2, 5), (2, 4, 5), (2, 5), (2, 5)]
    args = [torch.zeros(shape) for shape in shapes]
    torch.testing.assert_close(mha.relative_scores(*args), torch.zeros(1, 2, 3, 3))
    args[2] = args[2].double()  # once a RuntimeError from einsum
    with pytest.raises(ValueError, match="encoding"):
        mha.relative_scores(*args)
    args[2] = torch.zeros(1, 1, 4).expand(3, 3, 4)
    with mha.memory_budget(3 * 1 * 2 * 3 * 3 * 4 - 1), \
            pytest.raises(mha.MemoryBudgetError, match="encoding of shape \\(3, 3, 4\\)"):
        mha.relative_scores(*args)


def test_pixel_offsets_are_key_minus_query():
    from mha.analysis.convolution import pixel_offsets

    delta = pixel_offsets(2, 3, padding=1)  # keys on a 4 x 5 grid starting at (-1, -1)
    assert delta.shape == (6, 20, 2)
    for q in range(6):
        for k in range(20):
            query, key = divmod(q, 3), (k // 5 - 1, k % 5 - 1)
            assert delta[q, k].tolist() == [key[0] - query[0], key[1] - query[1]]


@settings(max_examples=40, deadline=None)
@given(
    height=st.integers(1, 5),
    width=st.integers(1, 5),
    padding=st.integers(0, 2),
    centres=st.lists(st.tuples(st.floats(-3, 3), st.floats(-3, 3)), min_size=1, max_size=4),
    alpha=st.floats(0.01, 10),
)
def test_quadratic_encoding_is_a_gaussian_around_the_centre(height, width, padding, centres,
                                                             alpha):
    """score = -alpha ||delta - Delta||^2 + alpha ||Delta||^2, recomputed with numpy loops."""
    c = torch.tensor(centres, dtype=torch.float64)
    a = torch.full((len(centres),), alpha, dtype=torch.float64)
    scores = mha.quadratic_encoding(height, width, c, a, padding).numpy()
    keys = [(r, s) for r in range(-padding, height + padding)
            for s in range(-padding, width + padding)]
    for h, (c1, c2) in enumerate(centres):
        for q, (i, j) in enumerate((i, j) for i in range(height) for j in range(width)):
            for k, (r, s) in enumerate(keys):
                d1, d2 = r - i, s - j
                expected = -alpha * ((d1 - c1) ** 2 + (d2 - c2) ** 2) + alpha * (c1**2 + c2**2)
                assert np.isclose(scores[h, q, k], expected, rtol=1e-9, atol=1e-9)


def error_bound(alpha):
    """The chapter's bound on 1 - (weight on the centre pixel): 4 e^-alpha / (1 - e^-alpha)^2."""
    s = math.exp(-alpha)
    return 4 * s / (1 - s) ** 2


@pytest.mark.claim("5.2")
@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000), alpha=st.floats(0.3, 40))
def test_error_against_alpha_is_below_the_bound(seed, alpha):
    conv, x = random_conv_case(seed)
    conv, x = conv.double(), x.double()
    layer = mha.conv_to_attention(conv, alpha=alpha)
    with torch.no_grad():
        error = (layer(x) - conv(x)).abs().max().item()
        # range_h: the spread of each channel of x_k W_h over the zero-padded key grid
        p = conv.kernel_size[0] // 2
        keys = F.pad(x, (p, p, p, p)).flatten(2)  # (B, C_in, n_k)
        taps = conv.weight.permute(2, 3, 0, 1).flatten(0, 1)  # (h, C_out, C_in)
        values = torch.einsum("hoc,bck->bhok", taps, keys)
        spread = (values.amax(-1) - values.amin(-1)).amax(dim=-1)  # (B, h)
        bound = error_bound(alpha) * spread.sum(-1).max().item()
    assert error <= bound * (1 + 1e-9) + 1e-12
    # the weight on the centre pixel itself obeys 1 - p <= eps(alpha)
    weights = layer.attention_weights(x.shape[2], x.shape[3])
    n_k = weights.shape[-1]
    assert (1 - weights.amax(-1)).max().item() <= min(error_bound(alpha), 1 - 1 / n_k) + 1e-12


def test_weights_become_one_hot_on_the_shift_as_alpha_grows():
    layer = mha.conv_to_attention(nn.Conv2d(1, 1, 3, padding=1).double(), alpha=60.0)
    weights = layer.attention_weights(4, 5)  # (9, 20, 6 * 7)
    offsets = mha.analysis.convolution.pixel_offsets(4, 5, padding=1).double()
    target = (offsets[None] == layer.centres[:, None, None, :]).all(-1).double()
    torch.testing.assert_close(weights, target, rtol=0, atol=1e-20)


def test_attention_weights_are_the_ones_multi_head_attention_uses():
    torch.manual_seed(3)
    layer = mha.GridSelfAttention(2, 3, 4, padding=1)
    x = torch.randn(2, 2, 3, 4)
    queries = x.flatten(2).transpose(1, 2)
    keys = F.pad(x, (1, 1, 1, 1)).flatten(2).transpose(1, 2)
    scores = mha.quadratic_encoding(3, 4, layer.centres, layer.alpha, 1)
    out, weights = layer.attn(queries, keys, keys, mask=scores[None])
    torch.testing.assert_close(weights, layer.attention_weights(3, 4).expand_as(weights))
    torch.testing.assert_close(out.transpose(1, 2).reshape(2, 3, 3, 4), layer(x))


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), heads=st.integers(1, 3), channels=st.integers(1, 3),
       d_k=st.integers(1, 4), d_p=st.integers(1, 3), n_q=st.integers(1, 4), n_k=st.integers(1, 5))
def test_relative_scores_are_the_four_terms_of_cordonnier_eq_8(seed, heads, channels, d_k, d_p,
                                                               n_q, n_k):
    """A[h, i, j] = x_i Wq Wk^T x_j^T + x_i Wq Wp^T r_ij^T + u Wk^T x_j^T + v Wp^T r_ij^T,
    term by term with numpy loops."""
    rng = np.random.default_rng(seed)
    x_q, x_k = rng.normal(size=(2, n_q, channels)), rng.normal(size=(2, n_k, channels))
    r = rng.normal(size=(n_q, n_k, d_p))
    w_q, w_k = rng.normal(size=(heads, channels, d_k)), rng.normal(size=(heads, channels, d_k))
    w_p, u, v = rng.normal(size=(heads, d_p, d_k)), rng.normal(size=(heads, d_k)), \
        rng.normal(size=(heads, d_k))
    got = mha.relative_scores(*(torch.from_numpy(t) for t in (x_q, x_k, r, w_q, w_k, w_p, u, v)))
    assert got.shape == (2, heads, n_q, n_k)
    for b in range(2):
        for h in range(heads):
            for i in range(n_q):
                for j in range(n_k):
                    q, k, p = x_q[b, i] @ w_q[h], x_k[b, j] @ w_k[h], r[i, j] @ w_p[h]
                    expected = q @ k + q @ p + u[h] @ k + v[h] @ p
                    assert np.isclose(got[b, h, i, j].item(), expected, rtol=1e-10, atol=1e-10)


def test_the_quadratic_encoding_is_the_position_term_of_the_relative_score():
    """Cordonnier et al.'s eq. (9): W_qry = W_key = 0, u = 0, W^_key = I, v = -alpha (1, -2 Delta)
    leave v . r_delta, which is quadratic_encoding; the layer computes its scores that way."""
    from mha.analysis.convolution import quadratic_offsets

    torch.manual_seed(13)
    layer = mha.GridSelfAttention(3, 2, 4, padding=1).double()
    x = torch.randn(2, 3, 4, 5, dtype=torch.float64)
    expected = mha.quadratic_encoding(4, 5, layer.centres, layer.alpha, 1)
    torch.testing.assert_close(layer.scores(x)[0], expected)
    zero = torch.zeros(4, 3, 3, dtype=torch.float64)
    v = -layer.alpha[:, None] * torch.cat([torch.ones(4, 1), -2 * layer.centres], dim=-1)
    queries = x.flatten(2).transpose(1, 2)
    keys = F.pad(x, (1, 1, 1, 1)).flatten(2).transpose(1, 2)
    full = mha.relative_scores(queries, keys, quadratic_offsets(4, 5, 1).double(), zero, zero,
                               torch.eye(3, dtype=torch.float64).expand(4, 3, 3),
                               torch.zeros(4, 3, dtype=torch.float64), v)
    torch.testing.assert_close(full, expected.expand_as(full))


def test_content_terms_make_the_weights_follow_the_image():
    torch.manual_seed(14)
    layer = mha.GridSelfAttention(2, 2, 3, padding=1, content=True)
    with torch.no_grad():
        for name in ("w_qry", "w_key", "u"):
            getattr(layer, name).normal_()
    x = torch.randn(2, 2, 4, 4)
    scores = layer.scores(x)
    assert scores.shape == (2, 3, 16, 36)
    assert (scores[0] - scores[1]).abs().max() > 1e-3  # two images, two sets of weights
    layer(x).sum().backward()
    assert all(getattr(layer, n).grad.abs().sum() > 0 for n in ("w_qry", "w_key", "u"))
    with pytest.raises(ValueError, match="depend on the image"):
        layer.attention_weights(4, 4)
    with pytest.raises(ValueError, match=r"keys must have shape \(2, 36, 2\)"):
        mha.relative_scores(torch.zeros(2, 16, 2), torch.zeros(2, 36, 3), torch.zeros(16, 36, 3),
                            *[torch.zeros(3, 2, 3)] * 2, torch.zeros(3, 3, 3),
                            *[torch.zeros(3, 3)] * 2)


@pytest.mark.claim("5.2")
@pytest.mark.parametrize(("kernel", "dilation", "groups"), [(3, 2, 1), (3, 2, 2), (5, 3, 3),
                                                            (1, 4, 3), (3, 1, 6)])
def test_dilated_and_grouped_convolutions_are_heads_on_the_dilated_shifts(kernel, dilation,
                                                                          groups):
    """Cordonnier et al.'s remark: a head can sit on any shift, so heads on r * Delta give a
    dilated convolution; a grouped one has block-diagonal taps."""
    torch.manual_seed(kernel * 10 + dilation)
    conv = nn.Conv2d(6, 6, kernel, padding=dilation * (kernel // 2), dilation=dilation,
                     groups=groups).double()
    x = torch.randn(2, 6, 7, 11, dtype=torch.float64)
    layer = mha.conv_to_attention(conv)
    assert layer.num_heads == kernel**2 and layer.centres.abs().max() == dilation * (kernel // 2)
    with torch.no_grad():
        torch.testing.assert_close(layer(x), conv(x), rtol=1e-12, atol=1e-12)


@pytest.mark.claim("5.2")
@pytest.mark.parametrize("stride", [2, 3])
def test_a_strided_convolution_is_the_stride_1_layer_read_at_every_s_th_pixel(stride):
    torch.manual_seed(stride)
    strided = nn.Conv2d(3, 4, 3, padding=1, stride=stride).double()
    twin = nn.Conv2d(3, 4, 3, padding=1).double()
    twin.load_state_dict(strided.state_dict())
    x = torch.randn(2, 3, 10, 8, dtype=torch.float64)
    with torch.no_grad():
        got = mha.conv_to_attention(twin)(x)[..., ::stride, ::stride]
        torch.testing.assert_close(got, strided(x), rtol=1e-12, atol=1e-12)


@pytest.mark.claim("5.1")
def test_one_head_attending_to_itself_is_a_1x1_conv():
    """Seed 000: self-attention with weights (and a position) is a 1x1 convolution."""
    torch.manual_seed(4)
    conv = nn.Conv2d(3, 5, 1).double()
    layer = mha.conv_to_attention(conv)
    assert layer.num_heads == 1 and layer.centres.tolist() == [[0.0, 0.0]]
    x = torch.randn(2, 3, 6, 7, dtype=torch.float64)
    # the 1x1 conv is the same linear map at every pixel: y = x W^T + b
    per_pixel = torch.einsum("oc,bchw->bohw", conv.weight[:, :, 0, 0], x)
    per_pixel = per_pixel + conv.bias[None, :, None, None]
    with torch.no_grad():
        torch.testing.assert_close(layer(x), per_pixel)


PIXELS = np.arange(1.0, 5.0)  # the image (x, 2x, 3x, 4x)


def content_only_gap(a, a0, n=4):
    """gamma of the chapter's lemma, in numpy: query q weighs key k by e^{k (q a + a0)}; the part
    of (1, ..., n) off the line through the mean key indices, RMS over the n pixels."""
    k = np.arange(1.0, n + 1)
    t = np.multiply.outer(np.multiply.outer(a, k) + np.asarray(a0)[..., None], k)  # (..., q, k)
    t = t - t.max(-1, keepdims=True)
    weights = np.exp(t) / np.exp(t).sum(-1, keepdims=True)
    mean = weights @ k
    return np.sqrt(np.clip((k @ k - (mean @ k) ** 2 / (mean * mean).sum(-1)) / n, 0, None))


def closest_conv_miss(head, x):
    """Smallest RMS miss, per unit ||xW||, of the head's change on (x, 2x, 3x, 4x) against the
    change q xW of any 1x1 convolution (closed form of a least-squares fit in w / ||w||^2)."""
    k = torch.from_numpy(PIXELS)
    with torch.no_grad():
        image = k[None, :, None] * x
        change = (head(image)[0] - head(torch.zeros_like(image))[0])[0]  # (4, d_v)
    along = change.T @ k
    return math.sqrt(max(0.0, (k @ k - along @ along / change.pow(2).sum()).item() / 4))


GAP = 0.1758  # a lower bound on the lemma's g, checked in the next test


@pytest.mark.claim("5.1")
def test_the_content_only_gap_is_0_176():
    """g = inf over (a, a0) of the lemma's gamma: a fine grid and a local minimiser find
    0.17587; a head built at the minimiser reaches it, so it is not an underestimate."""
    from scipy.optimize import minimize

    a, a0 = np.meshgrid(np.linspace(-40, 40, 801), np.linspace(-100, 100, 801), indexing="ij")
    values = content_only_gap(a, a0)
    best = np.unravel_index(values.argmin(), values.shape)
    found = minimize(lambda p: float(content_only_gap(p[0], p[1])), [a[best], a0[best]],
                     method="Nelder-Mead", options={"xatol": 1e-11, "fatol": 1e-13})
    assert GAP < found.fun < 0.1759 and values.min() > GAP
    assert round(found.fun, 4) == 0.1759  # the g the chapter and row 5.1 quote
    # far out, gamma tends to its values on the limits of the weights: none is small
    rng = np.random.default_rng(0)
    far = rng.uniform(-1e4, 1e4, size=(2, 100_000))
    assert content_only_gap(far[0], far[1]).min() > GAP
    head = mha.SelfAttention(1, key_dim=1, value_dim=1, bias=True).double()
    with torch.no_grad():
        for layer, weight, bias in [(head.w_q, found.x[0], found.x[1]), (head.w_k, 1.0, 0.0),
                                    (head.w_v, 1.0, 0.0)]:
            layer.weight.fill_(weight)
            layer.bias.fill_(bias)
    assert closest_conv_miss(head, torch.ones(1, dtype=torch.float64)) == pytest.approx(
        found.fun, abs=1e-9)


@pytest.mark.claim("5.1")
@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10_000), c_in=st.integers(1, 4), c_out=st.integers(1, 4),
       d_k=st.integers(1, 4), scale=st.floats(0.1, 30.0))
def test_content_only_heads_stay_away_from_every_1x1_conv(seed, c_in, c_out, d_k, scale):
    """The lemma: on (x, 2x, 3x, 4x) against the blank image, any content-only head's change
    misses every 1x1 convolution's change q xW by at least g ||xW|| (RMS over the pixels),
    for random weights and biases at every scale (sharp or flat attention)."""
    torch.manual_seed(seed)
    head = mha.SelfAttention(c_in, key_dim=d_k, value_dim=c_out, bias=True).double()
    with torch.no_grad():
        for layer in (head.w_q, head.w_k):
            layer.weight.mul_(scale)
            layer.bias.mul_(scale)
    x = torch.randn(c_in, dtype=torch.float64)
    assert closest_conv_miss(head, x) >= GAP


@pytest.mark.claim("5.1")  # "on one image of two or three pixels ... no such gap"
def test_two_or_three_pixels_let_content_only_heads_come_arbitrarily_close():
    """Why the lemma takes four pixels: on (x, 2x) or (x, 2x, 3x), t_q = a (q - (n + 1) / 2)
    makes the head's change proportional to the convolution's as a grows."""
    for n in (2, 3):
        misses = [float(content_only_gap(a, -a * (n + 1) / 2, n)) for a in (1, 10, 30)]
        assert misses[0] > misses[1] > misses[2] and misses[2] < 1e-6


@pytest.mark.claim("5.1")
def test_two_content_only_heads_escape_the_one_head_gap():
    """The lemma covers one head: on (x, 2x, 3x, 4x) a head with t_q = q a (small a) and a head
    with uniform weights combine (z_1, z_2 by least squares) into a change as close to the
    1x1 convolution's q w as one likes, far below the one-head gap g."""
    k = torch.from_numpy(PIXELS)
    misses = []
    for a in (0.1, 0.01, 0.001):
        means = torch.stack([torch.softmax(a * k[:, None] * k, -1) @ k,
                             torch.full((4,), 2.5, dtype=torch.float64)], 1)  # (4, 2)
        z = torch.linalg.lstsq(means, k[:, None]).solution
        misses.append((means @ z - k[:, None]).pow(2).mean().sqrt().item())
    assert misses[0] > misses[1] > misses[2] and misses[2] < 1e-5 < GAP
    assert f"{misses[2]:.1e}" == "2.1e-06"  # the chapter's printed miss at a = 0.001


@pytest.mark.claim("5.2")
def test_a_hard_mask_per_head_makes_the_construction_exact():
    """With finite quadratic scores the construction is a limit; masking every key but
    q + Delta_h in head h gives one-hot weights and the convolution itself."""
    torch.manual_seed(13)
    conv = nn.Conv2d(2, 3, 3, padding=1).double()
    x = torch.randn(2, 2, 5, 6, dtype=torch.float64)
    shifts = torch.tensor([[u - 1.0, v - 1.0] for u in range(3) for v in range(3)])
    scores = mha.quadratic_encoding(5, 6, shifts, torch.ones(9), 1)
    hard = torch.softmax(
        scores.masked_fill(scores != scores.amax(-1, keepdim=True), -math.inf), -1)
    assert bool(((hard == 0) | (hard == 1)).all())
    keys = F.pad(x, (1, 1, 1, 1)).flatten(2).transpose(1, 2)  # (B, n_k, C_in)
    taps = conv.weight.permute(2, 3, 1, 0).reshape(9, 2, 3)
    y = conv.bias + sum(hard[h].double() @ keys @ taps[h] for h in range(9))
    with torch.no_grad():
        torch.testing.assert_close(y.transpose(1, 2).reshape(2, 3, 5, 6), conv(x))


@pytest.mark.claim("5.2")
def test_a_layer_without_biases_sends_the_blank_image_to_zero_a_biased_conv_does_not():
    """The slides' W_O has no bias: such a layer maps the blank image to 0, so it cannot come
    close to a convolution whose bias is not 0, which maps it to b."""
    torch.manual_seed(14)
    layer = mha.MultiHeadAttention(2, 2, bias=False)
    conv = nn.Conv2d(2, 2, 3, padding=1)
    with torch.no_grad():
        out, _ = layer(torch.zeros(3, 16, 2))
        blank = conv(torch.zeros(3, 2, 4, 4))
    assert bool((out == 0).all())
    torch.testing.assert_close(blank, conv.bias[None, :, None, None].expand(3, 2, 4, 4))
    assert conv.bias.abs().max() > 0


@pytest.mark.claim("5.2")
def test_positions_added_to_the_input_move_a_bias_free_layers_blank_image_off_zero():
    """The blank-image argument needs positions only in the scores: the bias-free grid layer
    (relative scores) sends the blank image to 0, but the same bias-free multi-head layer on
    the blank image plus a positional encoding P does not, so it is not bound to 0 there."""
    torch.manual_seed(15)
    grid = mha.GridSelfAttention(2, 2, 9, padding=1, bias=False)
    layer = mha.MultiHeadAttention(4, 2, bias=False)
    positions = mha.sinusoidal_encoding(16, 4)  # (16, 4): pixel k's row P_k
    with torch.no_grad():
        assert bool((grid(torch.zeros(1, 2, 4, 4)) == 0).all())
        out, _ = layer(torch.zeros(1, 16, 4) + positions)
    assert out.abs().max() > 0.01


@pytest.mark.claim("5.2")
def test_content_only_attention_commutes_with_pixel_shuffles_a_conv_does_not():
    torch.manual_seed(5)
    layer = mha.MultiHeadAttention(2, 2)
    conv = nn.Conv2d(2, 2, 3, padding=1)
    x = torch.randn(1, 2, 4, 4)
    perm = torch.randperm(16)
    tokens = x.flatten(2).transpose(1, 2)
    with torch.no_grad():
        out, _ = layer(tokens)
        shuffled, _ = layer(tokens[:, perm])
        torch.testing.assert_close(shuffled, out[:, perm])
        y = conv(x).flatten(2)
        y_of_shuffled = conv(x.flatten(2)[:, :, perm].reshape(1, 2, 4, 4)).flatten(2)
    assert (y_of_shuffled - y[:, :, perm]).abs().max() > 0.1


@pytest.mark.claim("5.2")
def test_without_zero_keys_only_the_border_differs():
    torch.manual_seed(6)
    conv = nn.Conv2d(2, 2, 3, padding=1).double()
    layer = mha.conv_to_attention(conv)
    layer.padding = 0  # keys: the image's own pixels only
    x = torch.randn(1, 2, 6, 6, dtype=torch.float64)
    with torch.no_grad():
        diff = (layer(x) - conv(x)).abs().amax(dim=1)[0]
    torch.testing.assert_close(diff[1:-1, 1:-1], torch.zeros(4, 4, dtype=torch.float64))
    border = torch.ones(6, 6, dtype=torch.bool)
    border[1:-1, 1:-1] = False
    assert (diff[border] > 1e-3).all()


@pytest.mark.claim("5.3")
def test_attention_reaches_every_pixel_a_3x3_conv_only_nine():
    torch.manual_seed(7)
    layer = mha.GridSelfAttention(1, 1, 9, padding=1)  # random centres, alpha = 1
    conv = nn.Conv2d(1, 1, 3, padding=1)
    x = torch.randn(1, 1, 8, 8, requires_grad=True)
    (grad_attention,) = torch.autograd.grad(layer(x)[0, 0, 3, 3], x)
    (grad_conv,) = torch.autograd.grad(conv(x)[0, 0, 3, 3], x)
    assert (grad_attention != 0).sum() == 64
    assert (grad_conv != 0).sum() == 9


@pytest.mark.claim("5.3")
def test_a_position_only_layer_stays_away_from_every_3x3_conv():
    """Strictly more than the 3x3 convolutions with positions alone: a 9-head position-only
    layer (random centres, alpha = 1) is an affine map that the best 3x3 convolution (9 taps and
    a bias, least squares over random images) misses by a relative RMS above 0.1. The 3x3
    convolutions form a closed set, so the layer is not a limit of them."""
    torch.manual_seed(1)
    layer = mha.GridSelfAttention(1, 1, 9, padding=1).double()
    x = torch.rand(500, 1, 8, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        out = layer(x).flatten(1)  # (500, 64)
    framed = F.pad(x, (1, 1, 1, 1))
    shifted = torch.stack([framed[:, 0, u:u + 8, v:v + 8].flatten(1)
                           for u in range(3) for v in range(3)], -1)  # (500, 64, 9)
    design = torch.cat([shifted, torch.ones_like(shifted[..., :1])], -1).flatten(0, 1)
    fit = torch.linalg.lstsq(design, out.reshape(-1, 1), driver="gelsd").solution
    miss = (design @ fit).reshape(-1, 64) - out
    relative = (miss.pow(2).mean().sqrt() / (out - out.mean()).pow(2).mean().sqrt()).item()
    assert relative > 0.1


def marker_reader(beta):
    """The chapter's reader: the layer class of a 3x3 conv from 2 channels to 1, content terms
    on, all zero but head 0, whose score is u . (x_k W_key) = beta * marker_k."""
    layer = mha.GridSelfAttention(2, 1, 9, padding=1, content=True).double()
    with torch.no_grad():
        for p in layer.parameters():
            p.zero_()
        layer.w_key[0, 1, 0] = beta
        layer.u[0, 0] = 1.0
        layer.attn.v_proj.weight[0, 0] = 1.0
        layer.attn.out_proj.weight[0, 0] = 1.0
    return layer


def marker_scenes(n, seed):
    """n images (n, 2, 8, 8): random pixels in [0, 1] and a one-hot marker; the pixel under it."""
    g = torch.Generator().manual_seed(seed)
    image = torch.rand(n, 64, generator=g, dtype=torch.float64)
    at = torch.randint(0, 64, (n,), generator=g)
    marker = F.one_hot(at, 64).double()
    scenes = torch.stack([image, marker], dim=1).reshape(n, 2, 8, 8)
    return scenes, image[torch.arange(n), at]


@pytest.mark.claim("5.3")
@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 10_000), beta=st.floats(1.0, 40.0))
def test_attention_reads_the_pixel_under_the_marker(seed, beta):
    """Every pixel gets the value under the marker, up to 99 e^-beta (values in [0, 1]; the
    other keys are 63 pixels and 36 zero pixels of the ring)."""
    scenes, target = marker_scenes(16, seed)
    with torch.no_grad():
        out = marker_reader(beta)(scenes).flatten(1)  # (16, 64)
    error = (out - target[:, None]).abs().max().item()
    assert error <= 99 * math.exp(-beta) + 1e-12


@pytest.mark.claim("5.3")
def test_no_affine_map_reads_the_marker():
    """Every convolution is an affine map of the image; the best one (least squares, numpy's
    SVD solver) misses the target by far more than one attention head does."""
    scenes, target = marker_scenes(2000, 11)
    features = np.concatenate([scenes.flatten(1).numpy(), np.ones((2000, 1))], axis=1)
    solution, *_ = np.linalg.lstsq(features, target.numpy(), rcond=None)
    best_affine = np.sqrt(np.mean((features @ solution - target.numpy()) ** 2))
    # the head on 200 of them: its error is bounded scene by scene (99 e^-30, the test above),
    # and the layer costs some 10 ms a scene where the least squares fit costs nothing
    with torch.no_grad():
        out = marker_reader(30.0)(scenes[:200]).flatten(1)
    by_attention = (out - target[:200, None]).pow(2).mean().sqrt().item()
    spread = target.std().item()
    assert best_affine > 0.5 * spread
    assert by_attention < 1e-9 * spread


@pytest.mark.claim("5.3")
@pytest.mark.parametrize("seed", range(4))
def test_one_layer_class_holds_the_convolutions_and_the_marker_reader(seed):
    """Strictly more expressive in the closure sense: the class GridSelfAttention(2, 1, 9,
    padding=1, content=True) comes arbitrarily close to every 3x3 conv from 2 channels to 1
    (error <= eps(alpha) * spread -> 0) and also holds the marker reader."""
    torch.manual_seed(seed)
    conv = nn.Conv2d(2, 1, 3, padding=1).double()
    scenes, _ = marker_scenes(8, seed)
    errors = []
    for alpha in (5.0, 10.0, 20.0, 40.0):
        member = mha.GridSelfAttention(2, 1, 9, padding=1, content=True).double()
        member.load_state_dict(mha.conv_to_attention(conv, alpha=alpha).state_dict())
        with torch.no_grad():
            errors.append((member(scenes) - conv(scenes)).abs().max().item())
    assert errors == sorted(errors, reverse=True) and errors[-1] < 1e-12 < errors[0]
    reader = marker_reader(30.0)
    assert type(reader) is type(member) and reader.content and member.content
    assert [p.shape for p in reader.parameters()] == [p.shape for p in member.parameters()]


@pytest.mark.claim("5.3")
def test_the_layer_that_holds_a_3x3_conv_costs_twice_its_parameters():
    """The cost of the strict inclusion, with 64 channels: the conv has 9 * 64 * 64 + 64
    parameters; the attention layer (9 heads of d_v = 64, content terms) more than twice that."""
    conv = nn.Conv2d(64, 64, 3, padding=1)
    layer = mha.GridSelfAttention(64, 64, 9, padding=1, content=True)
    conv_params = sum(p.numel() for p in conv.parameters())
    layer_params = sum(p.numel() for p in layer.parameters() if p.requires_grad)
    assert conv_params == 9 * 64 * 64 + 64
    # values 64 x 576 + 576, output 576 x 64 + 64, W_qry and W_key 9 x 64 x 3, u 9 x 3,
    # centres 9 x 2, alpha 9
    assert layer_params == 2 * 64 * 576 + 576 + 64 + 2 * 9 * 64 * 3 + 27 + 18 + 9
    assert 2 < layer_params / conv_params < 2.2


def test_rank_one_heads_reach_only_rank_one_taps():
    """With d_v = 1 each head's tap W_V W_O has rank 1: a full-rank tap is out of reach."""
    torch.manual_seed(12)
    thin = mha.GridSelfAttention(4, 4, 9, head_dim=1, padding=1, bias=False).double()
    v = thin.attn.v_proj.weight.reshape(9, 1, 4)
    o = thin.attn.out_proj.weight.reshape(4, 9, 1)
    taps = torch.einsum("ohd,hdc->hoc", o, v)
    assert torch.linalg.matrix_rank(taps).tolist() == [1] * 9
    conv = nn.Conv2d(4, 4, 3, padding=1, bias=False).double()
    assert torch.linalg.matrix_rank(conv.weight.permute(2, 3, 0, 1)).min() == 4


def test_a_grid_layer_learns_a_3x3_conv():
    """A few steps of Adam reduce the relative error, with gradients in centres and alpha."""
    torch.manual_seed(9)
    target = nn.Conv2d(1, 1, 3, padding=1)
    layer = mha.GridSelfAttention(1, 1, 9, padding=1, alpha=3.0)
    opt = torch.optim.Adam(layer.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(10)
    losses = []
    for _ in range(60):
        x = torch.randn(8, 1, 6, 6, generator=g)
        with torch.no_grad():
            y = target(x)
        loss = (layer(x) - y).pow(2).mean() / y.pow(2).mean()
        opt.zero_grad()
        loss.backward()
        assert layer.centres.grad.abs().sum() > 0 and layer.alpha.grad.abs().sum() > 0
        assert layer.attn.q_proj.weight.grad is None  # positions only: W_Q stays 0
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.1 * losses[0]


# --- the exercises' checks accept the reference solutions and reject wrong ones -----------

def test_the_construction_diagram_shows_the_layers_own_shapes():
    """Every arrow of the chapter's data-flow picture, drawn with numbers, against the tensors
    GridSelfAttention really makes for a 3x3 conv from 3 to 4 channels on 5 x 6 images."""
    import re

    from mha.analysis.convolution import construction_diagram

    conv = nn.Conv2d(3, 4, 3, padding=1)
    layer = mha.conv_to_attention(conv)  # d_v = min(3, 4) = 3, 9 heads, one ring of zeros
    x = torch.randn(2, 3, 5, 6)
    seen = {}
    for name in ("v_proj", "out_proj"):
        getattr(layer.attn, name).register_forward_hook(
            lambda m, args, out, name=name: seen.update({name: (tuple(args[0].shape),
                                                                tuple(out.shape))}))
    with torch.no_grad():
        out = layer(x)
        queries, keys = layer._tokens(x)
    weights = layer.attention_weights(5, 6)
    offsets = mha.analysis.convolution.quadratic_offsets(5, 6, 1)
    batch, n_k, inner = seen["v_proj"][1]  # (B, n_k, h d_v), split into heads below
    values = (batch, 9, n_k, inner // 9)  # (B, h, n_k, d_v)
    expected = {
        ("image $x$", "pixels as tokens"): tuple(x.shape),
        ("pixels as tokens", "relative scores (eq. 8),\nsoftmax over keys"): tuple(queries.shape),
        (r"offsets $r_{k-q}$", "relative scores (eq. 8),\nsoftmax over keys"):
            tuple(offsets.shape),
        ("pad with zero pixels,\nthen as tokens", "$W_V$ of each head"): tuple(keys.shape),
        ("relative scores (eq. 8),\nsoftmax over keys", "$A V$, each head"):
            tuple(weights.shape),
        ("$W_V$ of each head", "$A V$, each head"): values,
        ("$A V$, each head", "concatenate heads"): (batch, 9, 30, inner // 9),
        ("concatenate heads", "$W_O$"): seen["out_proj"][0],
        ("$W_O$", "tokens back to an image"): seen["out_proj"][1],
        ("tokens back to an image", "output"): tuple(out.shape),
    }
    diagram = construction_diagram(batch="2", c_in="3", c_out="4", height="5", width="6",
                                   heads="9", queries="30", keys="56", value="3")
    drawn = {(a.start.label, a.end.label): tuple(
        int(v) for v in re.search(r"\(([\d, ]+)\)", a.label).group(1).split(","))
        for a in diagram.arrows}
    for ends, shape in expected.items():
        assert drawn[ends] == shape, ends
    assert keys.shape[1] == 56 and "(B, n_q, h*d_v)" in construction_diagram().alt_text()


def test_a_1x1_convolution_with_padding_valid_is_covered_as_padding_0():
    """'valid' (no padding) is the 'same' padding of a 1x1 kernel; it was refused."""
    torch.manual_seed(0)
    conv = nn.Conv2d(3, 4, 1, padding="valid").double()
    x = torch.randn(2, 3, 5, 5, dtype=torch.float64)
    torch.testing.assert_close(mha.conv_to_attention(conv)(x), conv(x))
    with pytest.raises(ValueError, match=r"padding=1 for a 3x3 kernel.*got padding='valid'"):
        mha.conv_to_attention(nn.Conv2d(3, 4, 3, padding="valid"))
