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
        (nn.Conv2d(1, 1, 3, padding=1, stride=2), "stride"),
        (nn.Conv2d(1, 1, 3, padding=2, dilation=2), "dilation"),
        (nn.Conv2d(2, 2, 3, padding=1, groups=2), "groups"),
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


def test_pixel_offsets_are_key_minus_query():
    from mha.convolution import pixel_offsets

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
    offsets = mha.convolution.pixel_offsets(4, 5, padding=1).double()
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


@pytest.mark.claim("5.1")
@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), c_in=st.integers(1, 4), c_out=st.integers(1, 4))
def test_content_only_attention_cannot_equal_a_1x1_conv(seed, c_in, c_out):
    """On the two-pixel image (x, 2x) a head without positions gives y_i - y(0) = c_i x W_V,
    with 1 < c_i < 2: never y_2 - y(0) = 2 (y_1 - y(0)), which a 1x1 convolution gives."""
    torch.manual_seed(seed)
    head = mha.SelfAttention(c_in, value_dim=c_out, bias=True).double()
    x = torch.randn(1, 1, c_in, dtype=torch.float64)
    with torch.no_grad():
        y, weights = head(torch.cat([x, 2 * x], dim=1))
        y0, _ = head(torch.zeros(1, 2, c_in, dtype=torch.float64))
        c = weights[0] @ torch.tensor([1.0, 2.0], dtype=torch.float64)  # (2,)
        xv = x[0] @ head.w_v.weight.T  # (1, c_out)
        torch.testing.assert_close(y[0] - y0[0], c[:, None] * xv)
    assert 1 < c[0] < 2 and 1 < c[1] < 2
    assert c[1] / c[0] < 2


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
    layer = mha.MultiHeadAttention(1, 1)
    conv = nn.Conv2d(1, 1, 3, padding=1)
    x = torch.randn(1, 1, 8, 8, requires_grad=True)
    out, _ = layer(x.flatten(2).transpose(1, 2))
    (grad_attention,) = torch.autograd.grad(out[0, 27, 0], x)
    (grad_conv,) = torch.autograd.grad(conv(x)[0, 0, 3, 3], x)
    assert (grad_attention != 0).sum() == 64
    assert (grad_conv != 0).sum() == 9


def marker_reader(beta):
    """The chapter's content-dependent head: constant query, key = beta * marker, value = image."""
    layer = mha.MultiHeadAttention(2, 1, head_dim=1).double()
    with torch.no_grad():
        for proj in (layer.q_proj, layer.k_proj, layer.v_proj, layer.out_proj):
            proj.weight.zero_()
            proj.bias.zero_()
        layer.q_proj.bias.fill_(1.0)
        layer.k_proj.weight[0, 1] = beta
        layer.v_proj.weight[0, 0] = 1.0
        layer.out_proj.weight[0, 0] = 1.0
    return layer


def marker_scenes(n, seed):
    g = torch.Generator().manual_seed(seed)
    image = torch.rand(n, 64, generator=g, dtype=torch.float64)
    at = torch.randint(0, 64, (n,), generator=g)
    marker = F.one_hot(at, 64).double()
    tokens = torch.stack([image, marker], dim=-1)  # (n, 64 pixels, 2 channels)
    return tokens, image[torch.arange(n), at]


@pytest.mark.claim("5.3")
@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 10_000), beta=st.floats(1.0, 40.0))
def test_attention_reads_the_pixel_under_the_marker(seed, beta):
    """Every pixel gets the value under the marker, up to 63 e^-beta (values in [0, 1])."""
    tokens, target = marker_scenes(16, seed)
    with torch.no_grad():
        out, _ = marker_reader(beta)(tokens)
    error = (out[..., 0] - target[:, None]).abs().max().item()
    assert error <= 63 * math.exp(-beta) + 1e-12


@pytest.mark.claim("5.3")
def test_no_affine_map_reads_the_marker():
    """Every convolution is an affine map of the image; the best one (least squares, numpy's
    SVD solver) misses the target by far more than one attention head does."""
    tokens, target = marker_scenes(2000, 11)
    features = np.concatenate([tokens.flatten(1).numpy(), np.ones((2000, 1))], axis=1)
    solution, *_ = np.linalg.lstsq(features, target.numpy(), rcond=None)
    best_affine = np.sqrt(np.mean((features @ solution - target.numpy()) ** 2))
    with torch.no_grad():
        out, _ = marker_reader(30.0)(tokens)
    by_attention = (out[..., 0] - target[:, None]).pow(2).mean().sqrt().item()
    spread = target.std().item()
    assert best_affine > 0.5 * spread
    assert by_attention < 1e-9 * spread


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

def test_check_quadratic_scores():
    from mha.checks import ch05

    def right(delta, centre, alpha):
        return -alpha * (delta.pow(2).sum(-1) - 2 * (delta * centre).sum(-1))

    def forgot_the_two(delta, centre, alpha):
        return -alpha * (delta.pow(2).sum(-1) - (delta * centre).sum(-1))

    assert ch05.quadratic_scores(right).status == "correct"
    assert ch05.quadratic_scores(forgot_the_two).status == "wrong"


def test_check_kernel_from_attention():
    from mha.checks import ch05

    def right(layer):
        k = math.isqrt(layer.num_heads)
        d = layer.head_dim
        v = layer.attn.v_proj.weight.reshape(layer.num_heads, d, layer.in_channels)
        o = layer.attn.out_proj.weight.reshape(layer.out_channels, layer.num_heads, d)
        taps = torch.einsum("ohd,hdc->hoc", o, v)
        return taps.reshape(k, k, layer.out_channels, layer.in_channels).permute(2, 3, 0, 1)

    def transposed(layer):
        return right(layer).transpose(2, 3)

    assert ch05.kernel_from_attention(right).status == "correct"
    assert ch05.kernel_from_attention(transposed).status == "wrong"
