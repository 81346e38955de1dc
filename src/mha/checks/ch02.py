"""Checks for the exercises of chapter 2 (self-attention's diagonal)."""

from __future__ import annotations

import torch

from mha.attention import attention, self_attention
from mha.diagonal import diagonal_violations
from mha.exercises import Wrong, exercise_check, seed


def _cases_for_prefers_other() -> list[torch.Tensor]:
    """Inputs of several shapes: collinear tokens, integer-valued tokens, uneven norms."""
    g = torch.Generator().manual_seed(seed(2002))
    collinear = torch.tensor([[1.0], [2.0], [3.0]], dtype=torch.float64)
    integers = torch.randint(-3, 4, (2, 5, 3), generator=g).double()
    uneven = torch.randn(4, 6, 8, generator=g, dtype=torch.float64)
    uneven = uneven * torch.exp(torch.randn(4, 6, 1, generator=g, dtype=torch.float64))
    return [collinear, integers, uneven]


@exercise_check("2.2")
def prefers_other(answer) -> None:
    """``answer(x)``, ``x`` ``(..., n, C)``, must give bool ``(..., n, n)``: alpha_ij > alpha_ii."""
    for case, x in enumerate(_cases_for_prefers_other(), start=1):
        # The reference compares the softmax weights themselves, not the lemma's shortcut. It
        # computes the scores as (x x^T) / sqrt(C), so that equal dot products (exact for the
        # integer tokens) give bit-equal scores and weights: a tie is a tie, not rounding.
        scores = x @ x.transpose(-2, -1) / x.shape[-1] ** 0.5  # (..., n, n)
        weights = torch.softmax(scores, dim=-1)
        expected = weights > weights.diagonal(dim1=-2, dim2=-1).unsqueeze(-1)
        got = answer(x.clone())
        if not isinstance(got, torch.Tensor):
            raise Wrong(f"case {case}: expected a torch.Tensor, got {type(got).__name__}")
        if got.dtype != torch.bool:
            raise Wrong(f"case {case}: expected a bool tensor, got dtype {got.dtype}")
        if got.shape != expected.shape:
            raise Wrong(f"case {case}: for x of shape {tuple(x.shape)} expected shape "
                        f"{tuple(expected.shape)}, got {tuple(got.shape)}")
        wrong = (got != expected).nonzero()
        if len(wrong):
            *batch, i, j = wrong[0].tolist()
            where = f"batch index {tuple(batch)}, " if batch else ""
            raise Wrong(
                f"case {case} (x of shape {tuple(x.shape)}): at {where}(i={i}, j={j}) "
                f"alpha_ij = {weights[tuple(wrong[0])].item():.4f} and alpha_ii = "
                f"{weights[(*batch, i, i)].item():.4f}, so the answer should be "
                f"{bool(expected[tuple(wrong[0])])}, got {bool(got[tuple(wrong[0])])}"
            )


@exercise_check("2.4")
def previous_token_projections(answer) -> None:
    """``answer(n)`` must return ``(w_q, w_k)`` with which one-hot token i attends to i - 1.

    The exercise asks for every ``n >= 2``; the check tries sizes from 2 to 256.
    """
    for n in (2, 3, 5, 8, 13, 32, 100, 256):
        result = answer(n)
        if not (isinstance(result, tuple) and len(result) == 2):
            raise Wrong(f"n = {n}: expected a tuple (w_q, w_k), got {type(result).__name__}")
        w_q, w_k = result
        for name, w in (("w_q", w_q), ("w_k", w_k)):
            if not isinstance(w, torch.Tensor) or not w.is_floating_point():
                raise Wrong(f"n = {n}: {name} must be a floating torch.Tensor")
            if w.dim() != 2 or w.shape[0] != n:
                raise Wrong(f"n = {n}: {name} must have shape (n, d_k) = ({n}, d_k), "
                            f"got {tuple(w.shape)}")
        if w_q.shape != w_k.shape:
            raise Wrong(f"n = {n}: w_q and w_k need the same shape, got {tuple(w_q.shape)} "
                        f"and {tuple(w_k.shape)}")
        x = torch.eye(n, dtype=torch.float64)  # one-hot tokens: all of norm 1
        _, weights = attention(x @ w_q.double(), x @ w_k.double(), x)
        for i in range(1, n):
            if not weights[i, i - 1] >= 0.9:
                raise Wrong(f"n = {n}: token {i} puts weight {weights[i, i - 1].item():.4f} "
                            f"on token {i - 1}; it needs at least 0.9")


@exercise_check("2.3")
def failure_rate_by_tokens(answer) -> None:
    """``answer()`` must return ``{n: fraction of token sets breaking the seed's inequality}``.

    The sampling is the exercise's: 2000 sets of ``n`` standard normal tokens with ``C = 2``.
    The check draws its own 2000 sets, so it allows for sampling noise.
    """
    sizes = (2, 3, 4, 8, 16, 32)
    got = answer()
    if not isinstance(got, dict) or sorted(got) != list(sizes):
        keys = sorted(got) if isinstance(got, dict) else type(got).__name__
        raise Wrong(f"expected a dict with keys {sizes}, got {keys}")
    g = torch.Generator().manual_seed(seed(23))
    for n in sizes:
        x = torch.randn(2000, n, 2, generator=g, dtype=torch.float64)
        _, weights = self_attention(x)
        expected = diagonal_violations(weights).flatten(-2).any(-1).double().mean().item()
        try:
            value = float(got[n])
        except (TypeError, ValueError) as error:
            raise Wrong(f"n = {n}: expected a number, got {type(got[n]).__name__}") from error
        if not 0.0 <= value <= 1.0:
            raise Wrong(f"n = {n}: a fraction lies in [0, 1], got {value:.4f}")
        # two estimates from 2000 sets each differ by about 0.016 at most rates: allow ~4 sigma
        if abs(value - expected) > 0.06:
            raise Wrong(f"n = {n}: got {value:.4f}, but 2000 fresh token sets give "
                        f"{expected:.4f}; sampling noise alone rarely differs this much")
