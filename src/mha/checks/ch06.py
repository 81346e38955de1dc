"""Checks for the exercises of chapter 6 (positions, and what attention costs)."""

from __future__ import annotations

import math

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
        expect_close(f"rope_complex(x of shape {(n, d)}, positions={positions.tolist()})",
                     got, expected, atol=1e-9, rtol=1e-9, mistakes=mistakes)
        if got.dtype != x.dtype:
            raise Wrong(f"the result should keep x's dtype {x.dtype}, got {got.dtype}")


def _partial(scores: torch.Tensor, values: torch.Tensor):
    """(m, l, o) of one block, computed from the definitions."""
    m = scores.max(dim=-1, keepdim=True).values
    p = torch.exp(scores - m)
    return m, p.sum(dim=-1, keepdim=True), p @ values


@exercise_check("6.3")
def merge_partials(answer) -> None:
    """``answer(m1, l1, o1, m2, l2, o2)`` merges two blocks' partial softmax results."""
    g = torch.Generator().manual_seed(seed(63))
    for n_q, n1, n2, d in [(1, 1, 1, 1), (4, 3, 5, 2), (6, 8, 2, 3)]:
        scores = 4 * torch.randn(n_q, n1 + n2, generator=g, dtype=torch.float64)
        values = torch.randn(n1 + n2, d, generator=g, dtype=torch.float64)
        first = _partial(scores[:, :n1], values[:n1])
        second = _partial(scores[:, n1:], values[n1:])
        full_m, full_l, full_o = _partial(scores, values)  # the reference, before the answer
        got = answer(*first, *second)
        if not isinstance(got, tuple | list) or len(got) != 3:
            raise Wrong(f"expected a tuple (m, l, o), got {type(got).__name__}")
        m, ell, o = got
        where = f"two blocks of {n1} and {n2} keys, {n_q} queries"
        expect_close(f"m for {where}", m, full_m, atol=1e-9, rtol=1e-9)
        expect_close(f"l for {where}", ell, full_l, atol=1e-9, rtol=1e-9)
        expect_close(f"o for {where}", o, full_o, atol=1e-9, rtol=1e-9)
        expect_close(f"o / l (the attention output) for {where}", o / ell,
                     torch.softmax(scores, -1) @ values, atol=1e-9, rtol=1e-9)
    # large scores: exp of the raw scores would overflow float32
    scores = (900 + 200 * torch.rand(1, 2, generator=g)).round()
    values = torch.randn(2, 1, generator=g)
    got = answer(*_partial(scores[:, :1], values[:1]), *_partial(scores[:, 1:], values[1:]))
    if not isinstance(got, tuple | list) or len(got) != 3 or not all(
            isinstance(t, torch.Tensor) and t.numel() == 1 for t in got):
        raise Wrong("for two blocks of one key each: expected a tuple (m, l, o) of tensors "
                    "with one number each")
    if not all(math.isfinite(t.flatten()[0].item()) for t in got):
        high, low = sorted(scores.flatten().tolist(), reverse=True)
        raise Wrong(f"with scores {high:.0f} and {low:.0f} the merged (m, l, o) is not finite: "
                    f"subtract the new maximum before taking exponentials")
    m, ell, o = got
    expect_close("o / l (the attention output) for two blocks of one key with large scores",
                 o / ell, torch.softmax(scores, -1) @ values)
