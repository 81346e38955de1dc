"""Checks for the exercises of chapter 6 (positions, and what attention costs)."""

from __future__ import annotations

import torch

from mha.exercises import Wrong, exercise_check, expect_close, seed


def _rotate_reference(x: torch.Tensor, positions: torch.Tensor, base: float) -> torch.Tensor:
    # Independent of the answer's route: rotate each pair with an explicit 2x2 matrix.
    d = x.shape[-1]
    out = torch.empty_like(x)
    for j in range(d // 2):
        angle = positions.double() * base ** (-2.0 * j / d)
        c, s = angle.cos().to(x.dtype)[:, None], angle.sin().to(x.dtype)[:, None]
        pair = x[..., 2 * j:2 * j + 2]
        out[..., 2 * j:2 * j + 2] = torch.cat(
            [c * pair[..., :1] - s * pair[..., 1:], s * pair[..., :1] + c * pair[..., 1:]], -1)
    return out


def _rotate_halves(x: torch.Tensor, positions: torch.Tensor, base: float) -> torch.Tensor:
    # the other common layout: pair j is (x_j, x_{j + d/2})
    d = x.shape[-1]
    half = d // 2
    out = torch.empty_like(x)
    for j in range(half):
        angle = positions.double() * base ** (-2.0 * j / d)
        c, s = angle.cos().to(x.dtype), angle.sin().to(x.dtype)
        a, b = x[..., j], x[..., j + half]
        out[..., j], out[..., j + half] = c * a - s * b, s * a + c * b
    return out


@exercise_check("6.2", reference_names=("mha.apply_rotary", "mha.rotary.apply_rotary",
                                         "mha.relative_rotation",
                                         "mha.positional.relative_rotation"))
def rope_complex(answer) -> None:
    """``answer(x, positions)`` rotates ``x`` ``(n, d)`` like RoPE with base 10000."""
    g = torch.Generator().manual_seed(seed(62))
    for n, d in [(5, 2), (7, 8), (3, 16)]:
        x = torch.randn(n, d, generator=g, dtype=torch.float64)
        positions = torch.randint(0, 50, (n,), generator=g)
        # the reference first, from the check's own tensors; the answer gets copies of them
        expected = _rotate_reference(x, positions, 10000.0)
        mistakes = [("each pair is turned the wrong way (by -p omega_j): multiply by "
                     "e^{+i p omega_j}", _rotate_reference(x, -positions, 10000.0))]
        if d > 2:
            mistakes.append(("the features are paired as (x_j, x_j+d/2); this exercise pairs "
                             "neighbours (x_2j, x_2j+1)", _rotate_halves(x, positions, 10000.0)))
        got = answer(x, positions)
        # tolerance: 1e-6 (absolute and relative). x is float64; the angles p omega_j (p < 50)
        # through exp, polar or cos/sin in float64 agree to ~1e-14, and a float32 step inside
        # to ~1e-6; a wrong direction or pairing differs by order 1
        expect_close(f"rope_complex(x of shape {(n, d)}, positions={positions.tolist()})",
                     got, expected, atol=1e-6, rtol=1e-6, mistakes=mistakes)
        if got.dtype != x.dtype:
            raise Wrong(f"the result should keep x's dtype {x.dtype}, got {got.dtype}")


def _partial(scores: torch.Tensor, values: torch.Tensor):
    """(m, l, o) of one block, computed from the definitions."""
    m = scores.max(dim=-1, keepdim=True).values
    p = torch.exp(scores - m)
    return m, p.sum(dim=-1, keepdim=True), p @ values


def _merge_case(answer, scores: torch.Tensor, values: torch.Tensor, n1: int, where: str,
                tol: float) -> None:
    first = _partial(scores[:, :n1], values[:n1])
    second = _partial(scores[:, n1:], values[n1:])
    full_m, full_l, full_o = _partial(scores, values)  # the reference, before the answer
    got = answer(*first, *second)
    if not isinstance(got, tuple | list) or len(got) != 3:
        raise Wrong(f"expected a tuple (m, l, o), got {type(got).__name__}")
    if not all(isinstance(t, torch.Tensor) for t in got):
        raise Wrong(f"for {where}: expected a tuple (m, l, o) of tensors")
    if not all(torch.isfinite(t).all() for t in got):
        raise Wrong(f"for {where}: the merged (m, l, o) is not finite: subtract the new "
                    f"maximum before taking exponentials")
    m, ell, o = got
    expect_close(f"m for {where}", m, full_m, atol=tol, rtol=tol)
    expect_close(f"l for {where}", ell, full_l, atol=tol, rtol=tol)
    expect_close(f"o for {where}", o, full_o, atol=tol, rtol=tol)
    expect_close(f"o / l (the attention output) for {where}", o / ell,
                 torch.softmax(scores.double(), -1) @ values.double(), atol=tol, rtol=tol)


@exercise_check("6.3", points=0.5, part="random blocks, and scores near 1000",
                reference_names=("mha.chunked_attention", "mha.chunked.chunked_attention"))
def merge_partials(answer) -> None:
    """``answer(m1, l1, o1, m2, l2, o2)`` merges two blocks' partial softmax results."""
    g = torch.Generator().manual_seed(seed(63))
    for n_q, n1, n2, d in [(1, 1, 1, 1), (4, 3, 5, 2), (6, 8, 2, 3)]:
        scores = 4 * torch.randn(n_q, n1 + n2, generator=g, dtype=torch.float64)
        values = torch.randn(n1 + n2, d, generator=g, dtype=torch.float64)
        # tolerance: 1e-6 (absolute and relative). The blocks are float64; rescaling by
        # exp(m_1 - m), a where(), or log-sum-exp agree to ~1e-14, a float32 step to ~1e-6
        _merge_case(answer, scores, values, n1, f"two blocks of {n1} and {n2} keys, {n_q} "
                    f"queries", 1e-6)
    # large scores: exp of the raw scores would overflow float32. Tolerance: expect_close's
    # default for float32 (atol 1e-5, rtol 1e-4)
    scores = (900 + 200 * torch.rand(1, 2, generator=g)).round()
    high, low = sorted(scores.flatten().tolist(), reverse=True)
    _merge_case(answer, scores, torch.randn(2, 1, generator=g), 1,
                f"two blocks of one key each, with scores {high:.0f} and {low:.0f}", 1e-4)


@merge_partials.part("maxima a thousand apart, in both orders, beside rows where both count",
                     points=0.5, hidden=True)
def _far_apart(answer) -> None:
    # The smaller block's factor exp(-1000) underflows to 0: the merge must still be finite
    # and right whichever block holds the larger maximum (an answer that always rescales the
    # second block by exp(m_2 - m_1) overflows when m_2 is the larger). Each case has rows of
    # both orders and a row whose blocks both count: an answer that returns the block with the
    # larger maximum, right where the other one underflows, is wrong there
    g = torch.Generator().manual_seed(seed(1063))
    for order in (1, -1):
        gaps = 1000 + torch.randint(0, 200, (2, 1), generator=g).double()
        gap = torch.cat([order * gaps[:1], -order * gaps[1:], torch.zeros(1, 1)])
        scores = torch.cat([gap, torch.zeros(3, 2, dtype=torch.float64)], 1)
        scores = scores + torch.randn(3, 3, generator=g, dtype=torch.float64)
        values = torch.randn(3, 2, generator=g, dtype=torch.float64)
        which = "first" if order == 1 else "second"
        _merge_case(answer, scores, values, 1, f"blocks whose maxima are about 1000 apart "
                    f"(the larger in the {which} block in the first row) and a row where "
                    f"they are close", 1e-6)
