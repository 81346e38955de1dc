"""SelfAttention and the look-up task (chapter 3)."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

import mha

pytestmark = pytest.mark.chapter(3)  # make chapter runs this file (issue 38)

F64 = torch.float64


@pytest.fixture(autouse=True)
def one_thread():
    """The tensors here are tiny: one thread is faster than two (far faster on a busy machine)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def seed_formula(x, w_q, w_k, w_v):
    """softmax(X W_Q (X W_K)^T / sqrt(d_k)) X W_V in float64, straight from seed 000."""
    x = x.double()
    scores = (x @ w_q) @ (x @ w_k).transpose(-2, -1) / math.sqrt(w_q.shape[1])
    return torch.softmax(scores, dim=-1) @ (x @ w_v)


@settings(max_examples=30, deadline=None)
@given(d=st.integers(1, 6), dk=st.integers(1, 6), dv=st.integers(1, 6), n=st.integers(1, 6),
       seed=st.integers(0, 2**16))
@pytest.mark.claim("3.4")
def test_self_attention_is_the_seed_formula(d, dk, dv, n, seed):
    torch.manual_seed(seed)
    layer = mha.SelfAttention(d, key_dim=dk, value_dim=dv).double()
    x = torch.randn(3, n, d, dtype=F64)
    out, weights = layer(x)
    # nn.Linear stores W^T: the seed's W_Q is w_q.weight.T
    w_q, w_k, w_v = (lin.weight.detach().T for lin in (layer.w_q, layer.w_k, layer.w_v))
    torch.testing.assert_close(out, seed_formula(x, w_q, w_k, w_v))
    assert out.shape == (3, n, dv) and weights.shape == (3, n, n)
    torch.testing.assert_close(weights.sum(-1), torch.ones(3, n, dtype=F64))


def test_self_attention_is_one_head_of_multi_head_attention():
    """SelfAttention = MultiHeadAttention with h = 1 and W_O = I (no biases)."""
    torch.manual_seed(3)
    single = mha.SelfAttention(6, key_dim=6, value_dim=6).double()
    multi = mha.MultiHeadAttention(6, 1, bias=False).double()
    with torch.no_grad():
        multi.q_proj.weight.copy_(single.w_q.weight)
        multi.k_proj.weight.copy_(single.w_k.weight)
        multi.v_proj.weight.copy_(single.w_v.weight)
        multi.out_proj.weight.copy_(torch.eye(6))
    x = torch.randn(2, 5, 6, dtype=F64)
    torch.testing.assert_close(multi(x)[0], single(x)[0])
    torch.testing.assert_close(multi(x)[1][:, 0], single(x)[1])


@pytest.mark.claim("3.1")
def test_attention_with_a_diagonal_mask_is_exactly_the_projection_x_w_v():
    torch.manual_seed(4)
    layer = mha.SelfAttention(5, value_dim=3).double()
    x = torch.randn(2, 7, 5, dtype=F64)
    out, weights = layer(x, mask=torch.eye(7, dtype=torch.bool))
    torch.testing.assert_close(out, layer.w_v(x))
    torch.testing.assert_close(weights, torch.eye(7, dtype=F64).expand(2, 7, 7))


def identity_head(n, d, lam):
    """A head on [position one-hot (n) | features (d)] whose scores are lam * [i == j]."""
    layer = mha.SelfAttention(n + d, key_dim=n, value_dim=d).double()
    with torch.no_grad():
        select_positions = torch.cat([torch.eye(n), torch.zeros(d, n)]).double()  # (n+d, n)
        layer.w_q.weight.copy_((lam * math.sqrt(n) * select_positions).T)
        layer.w_k.weight.copy_(select_positions.T)
    return layer


@pytest.mark.claim("3.1")
@pytest.mark.parametrize("lam", [5.0, 10.0, 20.0, 40.0])
def test_attention_approaches_x_w_v_with_the_proven_bound(lam):
    """With scores lam * [i == j], |out_i - (X W_V)_i| <= 2 (n-1) e^{-lam} max_j |(X W_V)_j|."""
    torch.manual_seed(5)
    n, d = 6, 4
    layer = identity_head(n, d, lam)
    x = torch.cat([torch.eye(n, dtype=F64).expand(2, n, n), torch.randn(2, n, d, dtype=F64)], -1)
    out, weights = layer(x)
    projection = layer.w_v(x)
    err = (out - projection).norm(dim=-1).max()
    bound = 2 * (n - 1) * math.exp(-lam) * projection.norm(dim=-1).max()
    assert err <= bound
    off_diagonal = weights - torch.diag_embed(weights.diagonal(dim1=-2, dim2=-1))
    expected = 1 / (math.exp(lam) + n - 1)  # each off-diagonal weight, exactly
    torch.testing.assert_close(off_diagonal.sum(-1), torch.full((2, n), (n - 1) * expected,
                                                                dtype=F64))


@pytest.mark.claim("3.1")
def test_conv1x1_is_the_projection_x_w():
    """The slides' 1x1 2D convolution is the per-pixel linear map X W^T + b (pixels = tokens)."""
    torch.manual_seed(6)
    conv = nn.Conv2d(5, 3, kernel_size=1).double()
    image = torch.randn(2, 5, 3, 4, dtype=F64)  # (B, C, H, W)
    pixels = image.flatten(2).transpose(1, 2)   # (B, H*W, C)
    via_conv = conv(image).flatten(2).transpose(1, 2)
    torch.testing.assert_close(via_conv, pixels @ conv.weight[:, :, 0, 0].T + conv.bias)


@pytest.mark.claim("3.1")
def test_a_head_with_a_value_bias_and_the_diagonal_mask_is_the_conv1x1_with_its_bias():
    """The bias-free head contains the bias-free conv (X W); with bias=True its value bias gives
    X W + b, since a row of weights sums to 1. Pixels are tokens, as in chapter 3."""
    torch.manual_seed(11)
    conv = nn.Conv2d(5, 3, kernel_size=1).double()
    image = torch.randn(2, 5, 3, 4, dtype=F64)  # (B, C, H, W)
    pixels = image.flatten(2).transpose(1, 2)   # (B, H*W, C)
    expected = conv(image).flatten(2).transpose(1, 2)  # (B, H*W, 3)
    head = mha.SelfAttention(5, key_dim=4, value_dim=3, bias=True).double()
    with torch.no_grad():
        head.w_v.weight.copy_(conv.weight[:, :, 0, 0])
        head.w_v.bias.copy_(conv.bias)
    diagonal_only = torch.eye(12, dtype=torch.bool)  # True = may attend
    torch.testing.assert_close(head(pixels, mask=diagonal_only)[0], expected)
    # without a mask the weights sum to 1 in every row, so the bias passes through unchanged
    out, weights = head(pixels)
    torch.testing.assert_close(out, weights @ (pixels @ conv.weight[:, :, 0, 0].T) + conv.bias)


@pytest.mark.claim("3.3")
def test_untied_weights_give_asymmetric_scores_and_tied_give_symmetric():
    torch.manual_seed(7)
    layer = mha.SelfAttention(6, key_dim=4).double()
    x = torch.randn(1, 5, 6, dtype=F64)
    q, k = layer.w_q(x), layer.w_k(x)
    scores = q @ k.transpose(-2, -1)
    assert (scores - scores.transpose(-2, -1)).abs().max() > 1e-3
    tied = q @ q.transpose(-2, -1)  # W_K = W_Q
    torch.testing.assert_close(tied, tied.transpose(-2, -1))
    # tied: s_ij <= (s_ii + s_jj) / 2, so s_ij can never beat both s_ii and s_jj
    diag = tied.diagonal(dim1=-2, dim2=-1)
    assert (tied <= (diag[..., :, None] + diag[..., None, :]) / 2 + 1e-12).all()


def diagonal_gap(x_i, x_j, w_q, w_k):
    """s_ij - (s_ii + s_jj) / 2 for rows x_i, x_j (float64): > 0 breaks chapter 2's bound."""
    def s(a, b):
        return (a @ w_q) @ (b @ w_k) / math.sqrt(w_q.shape[1])
    return s(x_i, x_j) - (s(x_i, x_i) + s(x_j, x_j)) / 2


@settings(max_examples=30, deadline=None)
@given(d=st.integers(1, 6), dk=st.integers(1, 6),
       scale=st.floats(0.1, 10.0).filter(lambda c: abs(c - 1) > 1e-3),  # c = 1 is tied
       seed=st.integers(0, 2**16))
@pytest.mark.claim("3.3")
def test_untied_weights_with_a_symmetric_psd_m_keep_the_diagonal_bound(d, dk, scale, seed):
    """W_K = c W_Q (c > 0) and W_K = W_Q G (G symmetric PSD) differ from W_Q, yet every pair
    keeps s_ij <= (s_ii + s_jj) / 2: M = W_Q W_K^T is symmetric PSD (lemma lem-03-psd)."""
    torch.manual_seed(seed)
    w_q = torch.randn(d, dk, dtype=F64)
    root = torch.randn(dk, dk, dtype=F64)
    x = torch.randn(40, d, dtype=F64)
    for w_k in (scale * w_q, w_q @ (root @ root.T)):
        if torch.allclose(w_k, w_q):  # G = R R^T happened to be close to I: tied, not untied
            continue
        scores = (x @ w_q) @ (x @ w_k).T / math.sqrt(dk)
        diag = scores.diagonal()
        slack = 1e-9 * (1 + scores.abs().max())
        assert (scores <= (diag[:, None] + diag[None, :]) / 2 + slack).all()


@settings(max_examples=30, deadline=None)
@given(d=st.integers(2, 6), dk=st.integers(1, 6), seed=st.integers(0, 2**16))
@pytest.mark.claim("3.3")
def test_an_m_that_is_not_symmetric_psd_breaks_the_diagonal_bound(d, dk, seed):
    """The other direction of lem-03-psd, with the proof's own pairs: an antisymmetric part
    M_- != 0 is broken by x = a + w, a - w with a = t w M_-; a symmetric part M_+ that is not
    PSD by x = u, -u with u M_+ u^T < 0."""
    torch.manual_seed(seed)
    w_q, w_k = torch.randn(d, dk, dtype=F64), torch.randn(d, dk, dtype=F64)
    m = w_q @ w_k.T
    m_plus, m_minus = (m + m.T) / 2, (m - m.T) / 2
    if m_minus.norm() > 1e-3 * m.norm():  # far enough from symmetric for float64
        w = torch.randn(d, dtype=F64)
        w_m = w @ m_minus
        t = 1 + 2 * abs(w @ m_plus @ w) / (w_m @ w_m)  # large enough: 4wM+w - 4t|wM-|^2 < 0
        a = t * w_m
        assert diagonal_gap(a + w, a - w, w_q, w_k) > 0
    # a symmetric M that is not PSD: W_K = W_Q G with G symmetric but indefinite
    g = torch.diag(torch.tensor([1.0] * (dk - 1) + [-1.0], dtype=F64))
    m_sym = w_q @ g @ w_q.T
    eigenvalues, vectors = torch.linalg.eigh(m_sym)
    if eigenvalues[0] < -1e-9:
        u = vectors[:, 0]
        assert diagonal_gap(u, -u, w_q, w_q @ g) > 0


def m_is_neither_symmetric_nor_psd(w_m):
    return bool((w_m - w_m.T).norm() > 0.5 * w_m.norm()
                and torch.linalg.eigvalsh((w_m + w_m.T) / 2).min() < 0)


@pytest.mark.claim("3.3")
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_trained_head_looks_at_itself_only_when_wanted_and_its_m_was_untied_from_the_start(
        seed):
    """A head's M = W_Q W_K^T is neither symmetric nor PSD already at initialisation (so that
    alone shows no learning) and still after training on the one-look-up task, where its largest
    weight sits on the query itself only when the query wants itself."""
    torch.manual_seed(seed)
    n, m = 6, 3
    head = mha.SelfAttention(2 * n + m, key_dim=8, value_dim=8)
    with torch.no_grad():
        assert m_is_neither_symmetric_nor_psd(head.w_q.weight.T @ head.w_k.weight)
    mha.train_lookup(mha.LookupModel(head, 8, m), n, m, steps=300, batch=64, seed=seed)
    with torch.no_grad():
        assert m_is_neither_symmetric_nor_psd(head.w_q.weight.T @ head.w_k.weight)
        x, _, source = mha.lookup_task(512, n, m, generator=torch.Generator().manual_seed(9))
        top = (head.w_q(x) @ head.w_k(x).mT).argmax(-1)  # (B, n): where the largest weight is
    wants_itself = source[..., 0] == torch.arange(n)
    assert (top == source[..., 0]).float().mean() > 0.98
    assert ((top == torch.arange(n)) == wants_itself).float().mean() > 0.98


@pytest.mark.claim("3.5")
def test_attention_with_identity_weights_is_attention_without_weights():
    """W_Q = W_K = W_V = I (d_k = d_v = d) gives chapter 2's softmax(X X^T / sqrt(d)) X exactly:
    the layer with weights contains the one without, and chapter 3 shows what it adds."""
    torch.manual_seed(10)
    layer = mha.SelfAttention(5).double()
    with torch.no_grad():
        for linear in (layer.w_q, layer.w_k, layer.w_v):
            linear.weight.copy_(torch.eye(5))
    x = torch.randn(3, 7, 5, dtype=F64)
    expected = torch.softmax(x @ x.mT / math.sqrt(5), dim=-1) @ x
    torch.testing.assert_close(layer(x)[0], expected)
    torch.testing.assert_close(mha.self_attention(x)[0], expected)


@pytest.mark.claim("3.3")
def test_no_head_of_a_trained_language_model_has_a_symmetric_psd_m():
    """all-MiniLM-L6-v2, read with Hugging Face transformers (not the course's loader): every one
    of its 72 heads has an M = W_Q,h W_K,h^T that is neither symmetric nor PSD, as random
    weights of the same shapes have too (asymmetry about sqrt(2)); 70 of its heads are more
    symmetric than every random draw of chapter 3's cell. On a sentence its head 2 of layer 0
    (counting from 0, as the book does) scores the previous token highest in every row after the
    first, and [CLS] (row 0) scores itself."""
    transformers = pytest.importorskip("transformers")
    source = mha.models.pretrained.minilm_source()
    model = transformers.AutoModel.from_pretrained(source, attn_implementation="eager").eval()
    config = model.config
    d_k = config.hidden_size // config.num_attention_heads
    def asymmetry(m):
        return ((m - m.T).norm() / m.norm()).item()

    trained, random = [], []
    torch.manual_seed(3)  # the draws of chapter 3's cell: one random pair per layer
    for layer in model.encoder.layer:
        attention = layer.attention.self
        pairs = [(trained, attention.query.weight, attention.key.weight),
                 (random, nn.Linear(384, 384).weight, nn.Linear(384, 384).weight)]
        for target, q_weight, k_weight in pairs:
            for h in range(config.num_attention_heads):
                rows = slice(h * d_k, (h + 1) * d_k)
                m = (q_weight[rows].T @ k_weight[rows]).double().detach()
                assert m_is_neither_symmetric_nor_psd(m)
                target.append(asymmetry(m))
    assert abs(sum(random) / len(random) - math.sqrt(2)) < 0.02
    assert sum(a < min(random) for a in trained) == 70
    tokenizer = transformers.AutoTokenizer.from_pretrained(source)
    batch = tokenizer(["The cat sat on the mat because it was tired."], return_tensors="pt")
    with torch.no_grad():
        weights = model(**batch, output_attentions=True).attentions[0][0, 2]  # (n, n)
    n = weights.shape[-1]
    assert torch.equal(weights.argmax(-1)[1:], torch.arange(n - 1))
    assert weights[0].argmax() == 0


@pytest.mark.claim("3.2")
def test_each_query_of_one_head_has_its_own_distribution():
    """The reading of "all elements use the same attention" in which the elements are tokens is
    false: a head's weights differ from query to query (rows of A), here on the look-up task
    after training, where every query's largest weight sits on the token it wants."""
    torch.manual_seed(1)
    n, m = 6, 3
    head = mha.SelfAttention(2 * n + m, key_dim=8, value_dim=8)
    mha.train_lookup(mha.LookupModel(head, 8, m), n, m, steps=300, batch=64, seed=1)
    x, _, source = mha.lookup_task(64, n, m, generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        _, weights = head(x)  # (B, n, n)
    distinct_rows = [len({tuple(row.tolist()) for row in w.round(decimals=3)}) for w in weights]
    assert min(distinct_rows) > 1  # no sequence has one pattern for all its queries
    wanted = source[..., 0]
    differ = wanted[:, :, None] != wanted[:, None, :]  # queries that want different tokens
    far = (weights[:, :, None] - weights[:, None, :]).abs().sum(-1) > 1  # total variation > 1/2
    assert far[differ].float().mean() > 0.95
    assert (weights.argmax(-1) == wanted).float().mean() > 0.95  # on the token it wants


def test_self_attention_bad_input():
    with pytest.raises(ValueError, match="embed_dim must be a positive int, got None"):
        mha.SelfAttention(None)
    with pytest.raises(ValueError, match="key_dim must be a positive int, got 0"):
        mha.SelfAttention(4, key_dim=0)
    with pytest.raises(ValueError, match="embed_dim must be a positive int, got True"):
        mha.SelfAttention(True)
    layer = mha.SelfAttention(4)
    with pytest.raises(ValueError, match=r"4 features .* got shape \(2, 3, 5\)"):
        layer(torch.randn(2, 3, 5))
    with pytest.raises(ValueError, match="does not broadcast"):
        layer(torch.randn(2, 3, 4), mask=torch.ones(4, 4, dtype=torch.bool))


# --- the look-up task ---

@pytest.mark.parametrize("lookups", [1, 2, 3])
def test_lookup_task_targets_are_the_requested_tokens_contents(lookups):
    n, m = 5, 3
    g = torch.Generator().manual_seed(8)
    x, target, source = mha.lookup_task(4, n, m, n_lookups=lookups, generator=g)
    assert x.shape == (4, n, (1 + lookups) * n + lookups * m)
    assert target.shape == (4, n, lookups * m) and source.shape == (4, n, lookups)
    for b in range(4):
        names = x[b, :, :n].argmax(-1)
        assert sorted(names.tolist()) == list(range(n))  # names are distinct
        for i in range(n):
            for r in range(lookups):
                wanted = x[b, i, (1 + r) * n:(2 + r) * n].argmax()
                j = [t for t in range(n) if names[t] == wanted][0]
                assert source[b, i, r] == j
                start = (1 + lookups) * n + r * m
                assert torch.equal(target[b, i, r * m:(r + 1) * m], x[b, j, start:start + m])


def test_lookup_task_is_reproducible_and_checks_its_arguments():
    a = mha.lookup_task(2, 4, 2, generator=torch.Generator().manual_seed(1))
    b = mha.lookup_task(2, 4, 2, generator=torch.Generator().manual_seed(1))
    assert all(torch.equal(s, t) for s, t in zip(a, b, strict=True))
    with pytest.raises(ValueError, match="n_tokens must be a positive int, got 0"):
        mha.lookup_task(2, 0, 2)


@pytest.mark.claim("3.1")
def test_one_head_learns_the_single_lookup_and_a_projection_cannot():
    torch.manual_seed(0)
    n, m = 6, 3
    d = 2 * n + m
    model = mha.LookupModel(mha.SelfAttention(d, 8, 8), 8, m)
    losses = mha.train_lookup(model, n, m, steps=300, seed=0)
    assert losses[-1] < 0.05 * losses[0]
    assert mha.relative_error(model, n, m) < 0.05
    # the best per-token affine map, fitted by least squares in float64, stays near 1
    x, y, _ = mha.lookup_task(4096, n, m, generator=torch.Generator().manual_seed(1))
    rows = torch.cat([x.reshape(-1, d), torch.ones(x.shape[0] * n, 1)], 1).double()
    flat = y.reshape(-1, m).double()
    residual = rows @ torch.linalg.lstsq(rows, flat, driver="gelsd").solution - flat
    # 1 - 1/n^2: the best affine answer is c_i / n (the token wants itself with probability 1/n)
    assert abs(residual.square().mean() / flat.square().mean() - (1 - 1 / n**2)) < 0.005


def lookup_model(n: int = 8, m: int = 4) -> mha.LookupModel:
    torch.manual_seed(0)
    return mha.LookupModel(mha.MultiHeadAttention(2 * n + m, 2, head_dim=4), 2 * n + m, m)


def test_train_lookup_that_diverges_raises_and_puts_the_parameters_back():
    model = lookup_model()
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    with pytest.raises(ValueError, match=r"loss of model is (inf|nan) at step \d+: training "
                                         r"diverged \(try a smaller lr than 1000000.0\)"):
        mha.train_lookup(model, 8, 4, steps=40, batch=16, lr=1e6)
    for name, p in model.named_parameters():
        assert torch.equal(p, before[name]), name
    assert mha.relative_error(model, 8, 4) == mha.relative_error(lookup_model(), 8, 4)


def test_train_lookup_refuses_a_frozen_or_float16_model_by_name():
    with pytest.raises(ValueError, match="model has no trainable parameter"):
        mha.train_lookup(lookup_model().requires_grad_(False), 8, 4, steps=2)
    with pytest.raises(ValueError, match="model has float16 parameters"):
        mha.train_lookup(lookup_model().half(), 8, 4, steps=2)


def test_train_lookup_trains_only_what_requires_grad():
    """Adam over the trainable parameters only: a frozen read-out stays as it was, and the
    losses equal those of Adam over every parameter (frozen ones get no gradient)."""
    model, reference = lookup_model(), lookup_model()
    model.readout.requires_grad_(False)
    reference.readout.requires_grad_(False)
    frozen = model.readout.weight.detach().clone()
    losses = mha.train_lookup(model, 8, 4, steps=5, batch=16, seed=3)
    optimizer = torch.optim.Adam(reference.parameters(), lr=1e-2)
    generator, expected = torch.Generator().manual_seed(3), []
    for _ in range(5):
        x, y, _ = mha.lookup_task(16, 8, 4, generator=generator)
        loss = (reference(x) - y).square().mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        expected.append(loss.item())
    assert losses == expected and torch.equal(model.readout.weight, frozen)


def test_relative_error_refuses_a_nan_model():
    model = lookup_model()
    with torch.no_grad():
        model.readout.bias[0] = float("nan")
    with pytest.raises(ValueError, match="model's predictions holds? NaN"):
        mha.relative_error(model, 8, 4)


def test_relative_error_of_the_zero_predictor_is_one():
    class Zero(torch.nn.Module):
        def forward(self, x):
            return torch.zeros(*x.shape[:2], 4)

    assert abs(mha.relative_error(Zero(), 5, 2, n_lookups=2) - 1.0) < 1e-6


def test_train_lookup_that_raises_puts_the_grads_back():
    """The parameters came back on a raise but not their .grad (neighbour_task.train's rules,
    which the docstring cites, put both back)."""
    n, c = 4, 3
    model = mha.LookupModel(mha.MultiHeadAttention(2 * n + c, 1), 2 * n + c, c)
    for p in model.parameters():
        p.grad = torch.full_like(p, 7.0)
    before = [p.detach().clone() for p in model.parameters()]
    calls = [0]
    forward = model.forward

    def failing(x):  # fails on the third step, after two updates
        calls[0] += 1
        if calls[0] == 3:
            raise RuntimeError("boom")
        return forward(x)

    model.forward = failing
    with pytest.raises(RuntimeError, match="boom"):
        mha.train_lookup(model, n, c, steps=5)
    assert all(bool((p.grad == 7).all()) for p in model.parameters())
    for p, saved in zip(model.parameters(), before, strict=True):
        torch.testing.assert_close(p.detach(), saved, rtol=0, atol=0)
