"""Chapter 6: what attention costs: FLOP counts, measurement helpers, chunked attention."""

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

import mha
from mha.analysis import cost, measure


def counted_flops(fn, *args):
    with FlopCounterMode(display=False) as counter:
        fn(*args)
    return counter.get_total_flops()


@settings(max_examples=20, deadline=None)
@given(n_q=st.integers(1, 40), n_k=st.integers(1, 40), d_k=st.integers(1, 16),
       d_v=st.integers(1, 16))
@pytest.mark.claim("6.1")
def test_attention_flops_match_torch_flop_counter(n_q, n_k, d_k, d_v):
    q, k, v = torch.randn(n_q, d_k), torch.randn(n_k, d_k), torch.randn(n_k, d_v)
    assert counted_flops(mha.attention, q, k, v) == cost.attention_flops(n_q, n_k, d_k, d_v)


@pytest.mark.claim("6.1")
@pytest.mark.parametrize("n, d, h", [(5, 8, 2), (12, 16, 4), (3, 6, 1)])
def test_multi_head_layer_costs_projections_plus_attention(n, d, h):
    """A whole layer: 8 n d^2 for the projections + h heads of 4 n^2 (d/h) = 4 n^2 d."""
    layer = mha.MultiHeadAttention(d, h)
    flops = counted_flops(layer, torch.randn(1, n, d))
    assert flops == cost.projection_flops(n, d) + h * cost.attention_flops(n, n, d // h)
    assert flops == 8 * n * d * d + 4 * n * n * d


@pytest.mark.parametrize("n, d", [(4, 8), (10, 3)])
def test_recurrent_flops_match_an_rnn_cell_run_over_the_sequence(n, d):
    cell = nn.RNNCell(d, d)
    x = torch.randn(n, 1, d)

    def run(x):
        h = torch.zeros(1, d)
        for t in range(n):  # n steps, each waiting for the previous one
            h = cell(x[t], h)

    assert counted_flops(run, x) == cost.recurrent_flops(n, d)


@pytest.mark.parametrize("n, d, k", [(10, 8, 3), (7, 4, 5), (16, 2, 1)])
def test_convolution_flops_match_torch_flop_counter(n, d, k):
    conv = nn.Conv1d(d, d, k, padding=k // 2)
    assert counted_flops(conv, torch.randn(1, d, n)) == cost.convolution_flops(n, d, k)


@settings(max_examples=50, deadline=None)
@given(n=st.integers(1, 2000), d=st.integers(1, 2000), k=st.integers(1, 9))
def test_crossovers(n, d, k):
    """Attention's core is cheaper than recurrence exactly when n < d, than a convolution
    when n < k d / 2."""
    assert (cost.attention_flops(n, n, d) < cost.recurrent_flops(n, d)) == (n < d)
    assert (cost.attention_flops(n, n, d) < cost.convolution_flops(n, d, k)) == (2 * n < k * d)


def test_attention_weights_bytes_is_the_size_of_the_weights_tensor():
    for dtype in (torch.float32, torch.float64, torch.bfloat16):
        q = torch.randn(2, 3, 7, 4, dtype=dtype)
        k = torch.randn(2, 3, 9, 4, dtype=dtype)
        _, weights = mha.attention(q, k, k)
        assert weights.nbytes == cost.attention_weights_bytes(7, 9, heads=3, batch=2, dtype=dtype)
    with pytest.raises(ValueError, match="n_q must be a positive int, got 0"):
        cost.attention_weights_bytes(0, 3)
    with pytest.raises(ValueError, match="d_k must be a positive int"):
        cost.attention_flops(2, 2, -1)


def test_loglog_slope_recovers_a_power_law():
    sizes = [10, 20, 40, 80]
    assert measure.loglog_slope(sizes, [3 * s**2 for s in sizes]) == pytest.approx(2.0)
    assert measure.loglog_slope(sizes, [s**0.5 for s in sizes]) == pytest.approx(0.5)
    with pytest.raises(ValueError, match="positive and finite"):
        measure.loglog_slope([1, 2], [0, 1])
    with pytest.raises(ValueError, match=r"sizes and values .* got 2 sizes and 3 values"):
        measure.loglog_slope([1, 2], [1, 2, 3])
    with pytest.raises(ValueError, match=r"sizes and values .* length >= 2"):
        measure.loglog_slope([1], [1])
    # one size repeated: numpy's polyfit only warned (RankWarning) and returned 0.43 here
    with pytest.raises(ValueError, match="at least two different sizes"):
        measure.loglog_slope([2, 2, 2], [1, 2, 3])
    # two distinct sizes among repeats still fit: the slope of the two means' line
    assert measure.loglog_slope([2, 2, 4, 4], [1, 1, 4, 4]) == pytest.approx(2.0)


def test_time_call_is_the_fastest_run():
    calls = []
    assert measure.time_call(lambda: calls.append(1), repeats=3) >= 0
    assert len(calls) == 4  # one warm-up and three timed runs
    with pytest.raises(ValueError, match="repeats must be a positive int, got 0"):
        measure.time_call(lambda: None, repeats=0)


@settings(max_examples=40, deadline=None)
@given(n_q=st.integers(1, 40), n_k=st.integers(1, 40), d=st.integers(1, 8),
       chunk=st.integers(1, 50), causal=st.booleans(), seed=st.integers(0, 2**16))
def test_chunked_attention_equals_scaled_dot_product_attention(n_q, n_k, d, chunk, causal, seed):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(2, 3, n_q, d, generator=g, dtype=torch.float64)
    k = torch.randn(2, 3, n_k, d, generator=g, dtype=torch.float64)
    v = torch.randn(2, 3, n_k, d + 1, generator=g, dtype=torch.float64)
    got = mha.chunked_attention(q, k, v, chunk_size=chunk, causal=causal)
    # the queries are the last n_q positions (bottom-right), as in mha.attention(is_causal=True);
    # torch's own is_causal is top-left aligned, so give it the mask
    allowed = torch.ones(n_q, n_k, dtype=torch.bool).tril(n_k - n_q) if causal else None
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
    if causal:  # a query before every key: no distribution, zeros (torch gives NaN or 0)
        expected = expected.masked_fill(~allowed.any(-1)[:, None], 0.0)
    torch.testing.assert_close(got, expected)


@pytest.mark.parametrize("n_q,n_k", [(9, 9), (7, 9), (12, 5)])
def test_causal_chunked_attention_under_vmap_equals_the_loop_and_torch(n_q, n_k):
    """vmap cannot branch on values, so the causal look for NaN that lets eager code skip
    future blocks is left out there: every block is computed and masked, same output."""
    g = torch.Generator().manual_seed(n_q * 100 + n_k)
    q = torch.randn(3, 2, n_q, 4, generator=g, dtype=torch.float64)
    k = torch.randn(3, 2, n_k, 4, generator=g, dtype=torch.float64)
    v = torch.randn(3, 2, n_k, 5, generator=g, dtype=torch.float64)
    def chunked(a, b, c):
        return mha.chunked_attention(a, b, c, chunk_size=3, causal=True)

    def loop(q, k, v):  # one batch entry at a time, in eager mode
        return torch.stack([chunked(q[i], k[i], v[i]) for i in range(len(q))])

    got = torch.func.vmap(chunked)(q, k, v)
    torch.testing.assert_close(got, loop(q, k, v))
    allowed = torch.ones(n_q, n_k, dtype=torch.bool).tril(n_k - n_q)  # bottom-right aligned
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
    expected = expected.masked_fill(~allowed.any(-1)[:, None], 0.0)  # a query before every key
    if n_q == n_k:  # torch's own is_causal (top-left) is the same mask here
        expected = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(got, expected)
    k[1, 0, -1, 0] = float("nan")  # a NaN key in a block after every query of a block...
    nan_out = torch.func.vmap(chunked)(q, k, v)  # ...reaches even the queries that mask it
    torch.testing.assert_close(nan_out, loop(q, k, v),
                               equal_nan=True)
    sees_a_key = allowed.any(-1)  # a query before every key stays zeros (masked, no key)
    assert nan_out[1, 0][sees_a_key].isnan().all() and not nan_out[0].isnan().any()


def test_chunked_attention_is_stable_for_large_scores():
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 64, 8, generator=g, dtype=torch.float64) for _ in range(3))
    # scores in the thousands: exp(score) alone would overflow even float64 (above 709)
    assert (q @ k.mT * 200.0).max() > 1000
    got = mha.chunked_attention(q, k, v, chunk_size=16, scale=200.0)
    assert torch.isfinite(got).all()
    torch.testing.assert_close(got, mha.attention(q, k, v, scale=200.0)[0])


def test_chunked_attention_with_no_keys_or_no_queries():
    q, v = torch.randn(2, 3, 4), torch.randn(2, 0, 5)
    torch.testing.assert_close(mha.chunked_attention(q, torch.randn(2, 0, 4), v),
                               torch.zeros(2, 3, 5))
    assert mha.chunked_attention(torch.randn(2, 0, 4), torch.randn(2, 3, 4),
                                 torch.randn(2, 3, 5)).shape == (2, 0, 5)


def test_chunked_attention_keeps_its_running_sums_in_float32():
    """m, l and o run over every key: in float16 they passed 65,504 (inf, then NaN) and in
    bfloat16 they lost bits per block, where mha.attention is right."""
    # equal scores: the output is the mean of the values, by hand 100 and 1
    q = torch.zeros(1, 2, 8, dtype=torch.float16)
    k = torch.zeros(1, 1000, 8, dtype=torch.float16)
    v = torch.full((1, 1000, 8), 100.0, dtype=torch.float16)
    got = mha.chunked_attention(q, k, v)  # o reaches 100 * 1000
    assert got.dtype == torch.float16 and (got == 100).all()
    k, v = torch.zeros(1, 70_000, 8, dtype=torch.float16), torch.ones(1, 70_000, 8,
                                                                       dtype=torch.float16)
    assert (mha.chunked_attention(q, k, v) == 1).all()  # l reaches 70,000
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, n, 8, generator=g).to(torch.bfloat16) for n in (4, 3000, 3000))
    expected = mha.attention(q.double(), k.double(), v.double())[0]
    error = (mha.chunked_attention(q, k, v, chunk_size=256).double() - expected).abs().max()
    # within one bfloat16 step of the largest output (summed in bfloat16: 1.8 steps)
    assert error <= torch.finfo(torch.bfloat16).eps * expected.abs().max()


def test_chunked_attention_broadcasts_batch_dimensions_as_attention_does():
    """Leading dimensions that broadcast (the query's or the keys' of size 1, or missing),
    with no keys and with causal queries before every key: the running tensors have the
    broadcast batch shape from the start, so every case has attention's shape and values."""
    g = torch.Generator().manual_seed(0)
    batches = [((), (2,)), ((2,), ()), ((1, 3), (2, 1)), ((2, 1), (3,)), ((2, 3), (1,))]
    cases = [(0, 0), (2, 0), (5, 2), (5, 1), (3, 3), (2, 5), (7, 4)]  # (n_q, n_k)
    for index, ((n_q, n_k), (batch_q, batch_k)) in enumerate(
            (case, batch) for case in cases for batch in batches):
        chunk, causal = 1 + index % 3, index % 2 == 0
        q = torch.randn(*batch_q, n_q, 4, generator=g, dtype=torch.float64)
        k = torch.randn(*batch_k, n_k, 4, generator=g, dtype=torch.float64)
        v = torch.randn(*batch_k, n_k, 3, generator=g, dtype=torch.float64)
        for is_causal in (causal, True) if n_q > n_k else (causal,):
            expected = mha.attention(q, k, v, is_causal=is_causal)[0]
            got = mha.chunked_attention(q, k, v, chunk_size=chunk, is_causal=is_causal)
            torch.testing.assert_close(got, expected, msg=lambda m, c=(
                n_q, n_k, batch_q, batch_k, chunk, is_causal): f"{c}: {m}")


def test_chunked_attention_bad_input():
    x = torch.randn(1, 4, 8)
    with pytest.raises(ValueError, match="chunk_size must be a positive int, got 0"):
        mha.chunked_attention(x, x, x, chunk_size=0)
    with pytest.raises(ValueError, match=r"d_k: query \(1, 4, 8\), key \(1, 4, 7\)"):
        mha.chunked_attention(x, torch.randn(1, 4, 7), x)
    with pytest.raises(ValueError, match=r"n_k: key \(1, 4, 8\), value \(1, 5, 8\)"):
        mha.chunked_attention(x, x, torch.randn(1, 5, 8))


def test_chunked_attention_never_holds_the_n_by_n_matrix():
    """Measured with a fresh process per call: the plain formula holds two (n, n) float32
    matrices (quadruple for twice the tokens); chunked holds a few blocks, whatever n."""
    sizes, block = [1024, 2048, 4096], 256
    memory = measure.peak_memories(["plain", "chunked"], sizes, d=16, chunk_size=block)
    plain, chunked = memory["plain"], memory["chunked"]
    for n, used in zip(sizes, plain, strict=True):
        assert 0.95 <= used / (2 * cost.attention_weights_bytes(n, n)) <= 1.5
    assert chunked[-1] <= plain[-1] / 8
    assert max(chunked) <= 8 * block * block * 4  # at most eight blocks of scores
    assert measure.peak_memory("plain", [2048], d=16)[0] == pytest.approx(plain[1], rel=0.05)
    with pytest.raises(ValueError, match="method must be one of"):
        measure.peak_memory("fast", [16])
    with pytest.raises(ValueError, match="increasing"):
        measure.peak_memory("plain", [32, 16])


def test_each_measurement_runs_in_a_process_of_its_own():
    """Two calls on the same n report the same growth: the second does not reuse memory the
    first one freed (in one process it would, and would look almost free)."""
    # the plain formula's two (n, n) matrices (32 MiB at n = 2048): a few pages of allocator
    # noise cannot move it by the tolerance, as they could the chunked blocks' 0.15 MiB
    twice = measure.peak_memory("plain", [2048, 2048], d=16)
    assert twice[0] >= 1.9 * cost.attention_weights_bytes(2048, 2048)
    assert twice[1] == pytest.approx(twice[0], rel=0.2)
    assert "os.fork()" in measure._MEMORY_SCRIPT


def test_plain_formula_in_the_memory_script_is_attention():
    # the memory script's "plain" method is softmax(Q K^T / sqrt(d)) V: the same as mha.attention
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(1, 50, 16, generator=g) for _ in range(3))
    formula = torch.softmax(q @ k.transpose(-2, -1) / 16**0.5, dim=-1) @ v
    torch.testing.assert_close(formula, mha.attention(q, k, v)[0])
    assert "torch.softmax(q @ k.transpose(-2, -1) / d**0.5, dim=-1) @ v" in measure._MEMORY_SCRIPT


def test_without_fork_each_measurement_gets_a_fresh_python(monkeypatch):
    """Windows has no os.fork: there every measurement runs in a Python process of its own.
    That path, forced here on Linux (where the child still reads VmHWM), measures the same:
    one process per method (each imports PyTorch, so one size is enough here)."""
    monkeypatch.setattr(measure, "_FORK", False)
    commands = []
    run = measure.subprocess.run

    def counted_run(command, **kwargs):
        commands.append(command)
        return run(command, **kwargs)

    monkeypatch.setattr(measure.subprocess, "run", counted_run)
    memory = measure.peak_memories(["plain", "chunked"], [4096], d=16, chunk_size=256)
    assert [c[3:] for c in commands] == [[m, "16", "256", "single", "4096"]
                                         for m in ("plain", "chunked")]
    assert 0.95 <= memory["plain"][0] / (2 * cost.attention_weights_bytes(4096, 4096)) <= 1.5
    assert memory["chunked"][0] <= memory["plain"][0] / 8
