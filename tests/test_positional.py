"""Chapter 6: position blindness, sinusoidal_encoding and relative_rotation."""

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import mha

pytestmark = pytest.mark.chapter(6)  # make chapter runs this file (issue 38)

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


@pytest.mark.claim("6.5")
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
    # unlike bits, each period is 10000^(2/d) times the one before, not twice it ...
    periods = 2 * math.pi / omega.double()
    torch.testing.assert_close(periods[1:] / periods[:-1],
                               torch.full((7,), 10000 ** (2 / 16), dtype=torch.float64))
    # ... and no row repeats: 4096 positions, 4096 distinct rows (bits repeat after 2^bits)
    p = mha.sinusoidal_encoding(4096, 16, dtype=torch.float64)
    assert (torch.cdist(p, p) + torch.eye(4096, dtype=torch.float64) * 1e9).min() > 0.5


@pytest.mark.claim("6.7")
def test_one_pair_separates_positions_but_the_encoding_keeps_them_less_apart_than_bits():
    """Literally true: one (sin, cos) pair gives 1024 positions 1024 distinct points. Useless:
    two of them are 1e-4 apart. Compared without regard to scale (smallest distance between two
    positions over the common length of the rows; computed here with scipy's pdist on the
    formula in numpy), ten centred bits score 0.632, the paper's encoding 0.434 with d = 10 and
    less with more columns, 0.260 with d = 64, and below the bits at every even d up to 64;
    base 10 comes closer, 0.547 with d = 10. The raw distance said the opposite (d = 16 above
    the bits' 1), only because longer rows lie further apart. The measure leaves the encoding
    uncentred; centring every column of both codes (dividing by the rms row length) gives the
    bits the same 0.632 and the encoding 0.495 (d = 10) falling to 0.318 (d = 64): the same
    conclusions."""
    from scipy.spatial.distance import pdist

    far = torch.eye(1024, dtype=torch.float64) * 1e9

    def closest(points):
        return (torch.cdist(points, points) + far).min().item()

    p = mha.sinusoidal_encoding(1024, 64, dtype=torch.float64)
    first_pair = closest(p[:, :2])
    assert f"{first_pair:.4f}" == "0.0001" and closest(p) > 1.4  # 1e-4 apart, as row 6.7 says
    # positions 0 and 44: 44 radians is 7 turns minus 0.0177 (pi is irrational: never exact)
    assert 0 < (p[44, :2] - p[0, :2]).norm() < 0.02

    def separation(code):
        code = np.asarray(code)
        lengths = np.linalg.norm(code, axis=1)
        np.testing.assert_allclose(lengths, lengths[0])  # every row equally long
        return pdist(code).min() / lengths[0]

    bits = (np.arange(1024)[:, None] >> np.arange(10)) & 1
    assert pdist(bits).min() == 1.0  # raw: ten bits keep 1024 positions at least 1 apart
    centred_bits = separation(bits - 0.5)
    assert round(centred_bits, 3) == 0.632
    by_width = {d: separation(paper_encoding(1024, d, 10000.0)) for d in range(2, 65, 2)}
    assert round(by_width[10], 3) == 0.434 and round(by_width[64], 3) == 0.260
    assert max(by_width.values()) == by_width[10] < centred_bits
    assert all(by_width[d + 2] < by_width[d] for d in range(10, 64, 2))  # more columns, less apart
    assert pdist(paper_encoding(1024, 16, 10000.0)).min() > 1  # the raw distance misleads
    assert round(separation(paper_encoding(1024, 10, 10.0)), 3) == 0.547

    def centred_separation(code):  # every column centred; rows then differ: rms length
        code = np.asarray(code) - np.asarray(code).mean(axis=0)
        return pdist(code).min() / np.sqrt((code ** 2).sum(axis=1).mean())

    assert round(centred_separation(bits), 3) == 0.632  # centring the bits' columns: -1/2, 1/2
    centred = {d: centred_separation(paper_encoding(1024, d, 10000.0)) for d in range(10, 65, 2)}
    assert round(centred[10], 3) == 0.495 and round(centred[64], 3) == 0.318
    assert max(centred.values()) == centred[10] < centred_bits  # the same conclusions
    assert all(centred[d + 2] < centred[d] for d in range(10, 64, 2))


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


@pytest.mark.claim("6.10")
@settings(max_examples=40, deadline=None)
@given(k=st.integers(-60, 60).filter(lambda k: k != 0), d=even_dims, base=bases)
def test_the_shift_is_a_linear_map_but_not_a_projection(k, d, base):
    """M_k is linear and orthogonal (it maps every P_i to P_{i+k}); a projection would satisfy
    M^2 = M, but M_k^2 = M_2k != M_k for k != 0: the first block turns by k radians, never a
    multiple of 2 pi."""
    m = mha.relative_rotation(k, d, base, dtype=torch.float64)
    p = mha.sinusoidal_encoding(200, d, base, dtype=torch.float64)
    rows = torch.arange(60, 140)
    torch.testing.assert_close(p[rows + k], p[rows] @ m.T)  # a linear map of the encoding
    torch.testing.assert_close(m @ m.T, torch.eye(d, dtype=torch.float64))
    torch.testing.assert_close(m @ m, mha.relative_rotation(2 * k, d, base, dtype=torch.float64))
    assert (m @ m - m).abs().max() > 1e-3
    assert mha.relative_rotation(0, d, base, dtype=torch.float64).equal(
        torch.eye(d, dtype=torch.float64))  # only the zero shift is a projection (the identity)


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


@pytest.mark.claim("6.8")
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


@pytest.mark.claim("6.4")
def test_adding_the_encoding_breaks_permutation_equivariance():
    torch.manual_seed(0)
    layer = mha.MultiHeadAttention(8, 2).double()
    x = torch.randn(1, 5, 8, dtype=torch.float64)
    p = mha.sinusoidal_encoding(5, 8, dtype=torch.float64)
    perm = torch.tensor([1, 0, 2, 3, 4])
    out, _ = layer(x + p)
    out_p, _ = layer(x[:, perm] + p)
    assert (out_p - out[:, perm]).abs().max() > 1e-3


class CountOps(torch.overrides.TorchFunctionMode):
    """Counts the torch functions and tensor methods a call runs."""

    def __init__(self):
        super().__init__()
        self.ops = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.ops += 1
        return func(*args, **(kwargs or {}))


def ops_of(fn, *args):
    with CountOps() as counter, torch.no_grad():
        fn(*args)
    return counter.ops


@pytest.mark.claim("6.3")
def test_attention_takes_a_fixed_number_of_steps_an_rnn_n_and_flops_do_not_decide():
    """O(1) sequential operations: mha.attention runs the same operations for every n; an Elman
    RNN run along the sequence runs a fixed number per token, each needing the previous one,
    although for n > d it counts fewer FLOPs than the attention core (and at every n fewer than a
    whole layer with its projections): the count does not imply it."""
    d = 32
    cell = torch.nn.RNNCell(d, d)

    def rnn_along(x):
        h = torch.zeros(1, d)
        for t in range(x.shape[1]):
            h = cell(x[:, t], h)
        return h

    attention_ops, rnn_ops = {}, {}
    for n in (8, 64, 512):
        x = torch.randn(1, n, d)
        attention_ops[n], rnn_ops[n] = ops_of(mha.attention, x, x, x), ops_of(rnn_along, x)
    assert attention_ops[8] == attention_ops[64] == attention_ops[512]
    per_step = (rnn_ops[64] - rnn_ops[8]) / 56
    assert per_step >= 1 and rnn_ops[512] - rnn_ops[64] == 448 * per_step
    cost = mha.analysis.cost
    assert cost.recurrent_flops(512, d) < cost.attention_flops(512, 512, d)
    # than the core only for n > d, than a whole layer (core + 8 n d^2) at every n
    for n in (1, 8, d, 64, 512):
        rnn, core = cost.recurrent_flops(n, d), cost.attention_flops(n, n, d)
        assert (rnn < core) == (n > d)
        assert rnn < core + cost.projection_flops(n, d)
    layer = mha.MultiHeadAttention(d, 4)
    assert ops_of(layer, torch.randn(1, 8, d)) == ops_of(layer, torch.randn(1, 512, d))


@pytest.mark.claim("6.3")
@pytest.mark.parametrize("n", [2, 6, 17])
def test_one_layer_connects_every_position_to_every_other(n):
    """Maximum path length 1: every output depends on every input after one layer; a kernel-3
    convolution reaches only the neighbours, so it needs about n / 2 layers."""
    torch.manual_seed(n)
    layer = mha.MultiHeadAttention(8, 2).double()
    x = torch.randn(1, n, 8, dtype=torch.float64)
    jac = torch.autograd.functional.jacobian(lambda t: layer(t)[0], x)  # (1,n,8, 1,n,8)
    block_norms = jac[0, :, :, 0].pow(2).sum(dim=(1, 3))  # (n outputs, n inputs)
    assert torch.all(block_norms > 1e-12)
    conv = torch.nn.Conv1d(8, 8, 3, padding=1).double()
    jac_c = torch.autograd.functional.jacobian(lambda t: conv(t.mT).mT, x)
    reach = jac_c[0, :, :, 0].pow(2).sum(dim=(1, 3)) > 0
    offsets = (torch.arange(n)[:, None] - torch.arange(n)[None, :]).abs()
    assert torch.equal(reach, offsets <= 1)


@pytest.mark.claim("6.8")
def test_a_general_score_matrix_does_not_make_the_encoding_relative():
    """The summary's 'easily learn to attend by relative positions' needs a special
    W = W_Q W_K^T: with W = diag(1, 0, ..., 0) the position-position score p_i W p_j^T =
    sin(i) sin(j) is not a function of j - i; with W = M_k (a rotation) it is, for all i, j."""
    d = 8
    p = mha.sinusoidal_encoding(40, d, dtype=torch.float64)
    w = torch.zeros(d, d, dtype=torch.float64)
    w[0, 0] = 1.0
    assert abs(p[1] @ w @ p[2] - p[2] @ w @ p[3]) > 0.1  # same offset, different scores
    rot = mha.relative_rotation(3, d, dtype=torch.float64)
    scores = p @ rot @ p.T  # (40, 40): entry (i, j) for the pair of positions
    for offset in range(-10, 11):
        diagonal = torch.diagonal(scores, offset)  # every pair with j - i = offset
        torch.testing.assert_close(diagonal, diagonal[:1].expand_as(diagonal))


def test_the_positions_diagram_shows_the_shapes_the_code_makes():
    """The chapter's picture, drawn with numbers, against X + P and RotaryMultiHeadAttention's
    own tensors (B = 2, n = 5, d = 12, h = 3, d_k = d_v = 4)."""
    import re

    from mha.diagrams import Notation
    from mha.layers.positional import positions_diagram

    sizes = Notation(batch="2", tokens="5", width="12", heads="3", key="4", value="4")
    torch.manual_seed(0)
    x = torch.randn(2, 5, 12)
    p = mha.sinusoidal_encoding(5, 12)
    layer = mha.RotaryMultiHeadAttention(12, 3)
    seen = {}
    layer.out_proj.register_forward_hook(lambda m, args, out: seen.update(merged=args[0].shape))
    rotated = mha.apply_rotary(layer._split_heads(layer.q_proj(x)), torch.arange(5))
    values = layer._split_heads(layer.v_proj(x))
    out, _ = layer(x)
    expected = {
        ("tokens $X$", "$X + P$"): x.shape, ("encoding $P$", "$X + P$"): p.shape,
        ("$X + P$", "multi-head\nattention"): (x + p).shape,
        ("$W_Q$, $W_K$, $W_V$, split heads", "rotate by position"): rotated.shape,
        ("positions", "rotate by position"): torch.arange(5).shape,
        ("rotate by position", "attention, each head"): rotated.shape,
        ("$W_Q$, $W_K$, $W_V$, split heads", "attention, each head"): values.shape,
        ("concatenate, $W_O$", "output"): out.shape,
    }
    drawn = {}
    for a in positions_diagram(sizes).arrows:
        numbers = re.search(r"\(([\d, ]*)\)", a.label).group(1)
        drawn[(a.start.label, a.end.label)] = tuple(int(v) for v in numbers.split(",") if v)
    for ends, shape in expected.items():
        assert drawn[ends] == tuple(shape), ends
    assert seen["merged"] == (2, 5, 12)  # heads concatenated: h * d_v = 12


def test_minilms_learned_positions_are_relative_only_nearby():
    """The chapter's worked example, on the table as Hugging Face transformers loads it: the
    offset explains over 0.8 of the variance of cos(P_p, P_{p+k}) among positions 1-63, between
    0.6 and 0.8 among 1-127 and under half over all 511 (position 0, [CLS], left out); next-door
    positions have nearly the same cosine everywhere, offset-32 ones do not."""
    transformers = pytest.importorskip("transformers")
    from mha.models import pretrained

    model = transformers.AutoModel.from_pretrained(pretrained.minilm_source())
    table = model.embeddings.position_embeddings.weight.detach().double().numpy()
    torch.testing.assert_close(
        pretrained.cached_minilm()[0].position_embeddings.weight.double(),
        torch.from_numpy(table))

    def share(rows, max_offset):
        unit = rows / np.linalg.norm(rows, axis=1, keepdims=True)
        sims = unit @ unit.T
        groups = [np.diagonal(sims, k) for k in range(1, max_offset + 1)]
        values = np.concatenate(groups)
        within = sum(((g - g.mean()) ** 2).sum() for g in groups)
        return 1 - within / ((values - values.mean()) ** 2).sum()

    assert np.linalg.norm(table[0]) > 4 * np.linalg.norm(table[1:], axis=1).mean()
    assert share(table[1:64], 32) > 0.8
    assert 0.6 < share(table[1:128], 64) < 0.8
    assert share(table[1:512], 64) < 0.5
    sinusoidal = mha.sinusoidal_encoding(128, 384, dtype=torch.float64).numpy()
    assert share(sinusoidal[1:], 64) == pytest.approx(1.0)
    unit = table[1:129] / np.linalg.norm(table[1:129], axis=1, keepdims=True)
    next_door, far = np.diagonal(unit @ unit.T, 1), np.diagonal(unit @ unit.T, 32)
    assert next_door.std() < 0.1 * next_door.mean() and far.std() > far.mean()
