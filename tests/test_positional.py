"""Chapter 6: position blindness, sinusoidal_encoding and relative_rotation."""

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import mha

even_dims = st.integers(1, 16).map(lambda h: 2 * h)
bases = st.sampled_from([10.0, 100.0, 10000.0])


def paper_encoding(n, d, base):
    """P[i, 2j] = sin(i / base^(2j/d)), P[i, 2j+1] = cos(...): the formula, in numpy float64."""
    p = np.zeros((n, d))
    for i in range(n):
        for j in range(d // 2):
            p[i, 2 * j] = math.sin(i / base ** (2 * j / d))
            p[i, 2 * j + 1] = math.cos(i / base ** (2 * j / d))
    return torch.from_numpy(p)


@pytest.mark.claim("6.5")
@settings(max_examples=30, deadline=None)
@given(n=st.integers(0, 40), d=even_dims, base=bases)
def test_sinusoidal_encoding_is_the_papers_formula(n, d, base):
    got = mha.sinusoidal_encoding(n, d, base, dtype=torch.float64)
    assert got.shape == (n, d)
    torch.testing.assert_close(got, paper_encoding(n, d, base))


def test_sinusoidal_encoding_dtype_and_bad_input():
    assert mha.sinusoidal_encoding(3, 4).dtype == torch.get_default_dtype()
    with pytest.raises(ValueError, match="dim must be a positive even int.*got 5"):
        mha.sinusoidal_encoding(3, 5)
    with pytest.raises(ValueError, match="num_positions.*-1"):
        mha.sinusoidal_encoding(-1, 4)
    with pytest.raises(ValueError, match="base must be a number greater than 1, got 1"):
        mha.sinusoidal_encoding(3, 4, base=1)
    with pytest.raises(ValueError, match="offset must be a finite number, got inf"):
        mha.relative_rotation(float("inf"), 4)
    with pytest.raises(ValueError, match="dim must be a positive even int.*got 3"):
        mha.relative_rotation(1, 3)


def test_wavelengths_run_from_two_pi_to_just_below_base_times_two_pi():
    d, base = 64, 10000.0
    wavelengths = 2 * math.pi / mha.encoding_frequencies(d, base)
    assert wavelengths[0].item() == pytest.approx(2 * math.pi)
    assert wavelengths[-1].item() == pytest.approx(2 * math.pi * base ** (1 - 2 / d))
    assert wavelengths[-1].item() < 2 * math.pi * base
    assert torch.all(wavelengths[1:] > wavelengths[:-1]), "frequencies must decrease along d"


@pytest.mark.claim("6.6")
def test_frequencies_decrease_along_the_dimension_like_binary_digits():
    # bit b of the position flips with period 2^(b+1): higher bits are slower
    positions = torch.arange(64)
    for b in range(5):
        bit = (positions >> b) & 1
        period = 2 ** (b + 1)
        assert torch.equal(bit[period:], bit[:-period])
        assert not torch.equal(bit[period // 2:], bit[:-period // 2])
    omega = mha.encoding_frequencies(16)
    assert torch.all(omega[1:] < omega[:-1])


@pytest.mark.claim("6.7")
def test_positions_have_distinct_encodings():
    p = mha.sinusoidal_encoding(512, 16, dtype=torch.float64)
    distances = torch.cdist(p, p) + torch.eye(512) * 1e9
    assert distances.min().item() > 1e-3
    # even a single (sin, cos) pair keeps integer positions apart (omega_0 = 1 radian per step)
    pair = p[:, :2]
    assert (torch.cdist(pair, pair) + torch.eye(512) * 1e9).min().item() > 0


@pytest.mark.claim("6.2")
@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 30), k=st.integers(-20, 40), d=even_dims, base=bases)
def test_relative_rotation_shifts_encoding(n, k, d, base):
    """P[i + k] = M_k P[i] for all i: sinusoidal_encoding(n+k)[k:] == P(n) @ M_k^T."""
    m = mha.relative_rotation(k, d, base, dtype=torch.float64)
    start = max(0, -k)  # negative offsets: compare the positions that exist
    shifted = mha.sinusoidal_encoding(n + max(k, 0) + start, d, base, dtype=torch.float64)
    ahead = shifted[start + k:start + k + n]
    here = shifted[start:start + n]
    torch.testing.assert_close(ahead, here @ m.T)


@settings(max_examples=20, deadline=None)
@given(k=st.integers(-50, 50), d=even_dims)
def test_relative_rotation_is_orthogonal_and_composes(k, d):
    m = mha.relative_rotation(k, d, dtype=torch.float64)
    torch.testing.assert_close(m @ m.T, torch.eye(d, dtype=torch.float64))
    torch.testing.assert_close(m @ mha.relative_rotation(3, d, dtype=torch.float64),
                               mha.relative_rotation(k + 3, d, dtype=torch.float64))


def test_relative_rotation_literal_identity_from_the_design():
    n, k, d = 20, 7, 32
    torch.testing.assert_close(mha.sinusoidal_encoding(n + k, d)[k:],
                               mha.sinusoidal_encoding(n, d) @ mha.relative_rotation(k, d).T)


@settings(max_examples=40, deadline=None)
@given(p=st.integers(0, 200), q=st.integers(0, 200), k=st.integers(0, 100), d=even_dims)
def test_encoding_dot_product_depends_on_offset_only(p, q, k, d):
    """PE(p) . PE(p + k) = sum_j cos(k omega_j): the same for every p, and even in k."""
    pe = mha.sinusoidal_encoding(400, d, dtype=torch.float64)
    expected = torch.cos(k * mha.encoding_frequencies(d)).sum()
    torch.testing.assert_close(pe[p] @ pe[p + k], expected)
    torch.testing.assert_close(pe[q] @ pe[q + k], expected)
    if p >= k:  # looking back k steps gives the same number: the sign of k is lost
        torch.testing.assert_close(pe[p] @ pe[p - k], expected)


@pytest.mark.claim("6.4")
@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 8), seed=st.integers(0, 2**16), need_weights=st.booleans())
def test_self_attention_is_permutation_equivariant(n, seed, need_weights):
    """Without positions, MHA(X[perm]) = MHA(X)[perm] and the weights are permuted both ways."""
    torch.manual_seed(seed)
    layer = mha.MultiHeadAttention(8, 2).double()
    x = torch.randn(2, n, 8, dtype=torch.float64)
    perm = torch.randperm(n)
    out, weights = layer(x, need_weights=need_weights)
    out_p, weights_p = layer(x[:, perm], need_weights=need_weights)
    torch.testing.assert_close(out_p, out[:, perm])
    if need_weights:
        torch.testing.assert_close(weights_p, weights[:, :, perm][:, :, :, perm])


def test_adding_the_encoding_breaks_permutation_equivariance():
    torch.manual_seed(0)
    layer = mha.MultiHeadAttention(8, 2).double()
    x = torch.randn(1, 5, 8, dtype=torch.float64)
    p = mha.sinusoidal_encoding(5, 8, dtype=torch.float64)
    perm = torch.tensor([1, 0, 2, 3, 4])
    out, _ = layer(x + p)
    out_p, _ = layer(x[:, perm] + p)
    assert (out_p - out[:, perm]).abs().max() > 1e-3


@pytest.mark.claim("6.3")
def test_one_layer_connects_every_position_to_every_other():
    """Maximum path length 1: every output depends on every input after one layer."""
    torch.manual_seed(0)
    layer = mha.MultiHeadAttention(8, 2).double()
    x = torch.randn(1, 6, 8, dtype=torch.float64)
    jac = torch.autograd.functional.jacobian(lambda t: layer(t)[0], x)  # (1,6,8, 1,6,8)
    block_norms = jac[0, :, :, 0].pow(2).sum(dim=(1, 3))  # (6 outputs, 6 inputs)
    assert torch.all(block_norms > 1e-12)
    # a kernel-3 convolution reaches only neighbours in one layer
    conv = torch.nn.Conv1d(8, 8, 3, padding=1).double()
    jac_c = torch.autograd.functional.jacobian(lambda t: conv(t.mT).mT, x)
    reach = jac_c[0, :, :, 0].pow(2).sum(dim=(1, 3)) > 0
    assert not reach[0, 5] and reach[0, 1]


@pytest.mark.claim("6.8")
def test_a_general_score_matrix_does_not_make_the_encoding_relative():
    """The seed's 'easily learn to attend by relative positions' needs a special W = W_Q W_K^T:
    with W = diag(1, 0, ..., 0) the position-position score p_i W p_j^T = sin(i) sin(j) is not
    a function of i - j; with W = M_k (a rotation) it is."""
    d = 8
    p = mha.sinusoidal_encoding(10, d, dtype=torch.float64)
    w = torch.zeros(d, d, dtype=torch.float64)
    w[0, 0] = 1.0
    assert abs(p[1] @ w @ p[2] - p[2] @ w @ p[3]) > 0.1  # same offset, different scores
    rot = mha.relative_rotation(3, d, dtype=torch.float64)
    torch.testing.assert_close(p[1] @ rot @ p[2], p[2] @ rot @ p[3])
