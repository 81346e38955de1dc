"""Checks for the exercises of the lab (notebook 08): they never show the solution."""

from __future__ import annotations

import torch

from mha.exercises import Wrong, exercise_check, expect_close, seed


def _padded_batch() -> tuple[torch.Tensor, torch.Tensor]:
    """Token vectors (3, 5, 4) with 5, 3 and 1 real tokens; padding holds large values."""
    g = torch.Generator().manual_seed(seed(8))
    hidden = torch.randn(3, 5, 4, generator=g, dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0], [1, 0, 0, 0, 0]])
    hidden = torch.where(mask.bool()[..., None], hidden, torch.full_like(hidden, 50.0))
    return hidden, mask


@exercise_check("8.1")
def mean_pool(answer) -> None:
    """Exercise 8.1: unit-length mean of the real tokens' vectors."""
    hidden, mask = _padded_batch()
    rows = []
    for b in range(hidden.shape[0]):
        real = hidden[b, mask[b].bool()]
        mean = real.sum(dim=0) / real.shape[0]
        rows.append(mean / mean.norm())
    expected = torch.stack(rows)
    got = answer(hidden.clone(), mask.clone())
    expect_close("for token vectors (3, 5, 4) with 5, 3 and 1 real tokens", got, expected)
    norms = got.detach().double().norm(dim=-1)
    if not torch.allclose(norms, torch.ones_like(norms)):
        raise Wrong("the sentence vectors must have length 1")


def _average_ranks(x: list[float]) -> list[float]:
    # rank of x_i: 1 + (number of smaller values) + (number of other equal values) / 2
    return [1 + sum(v < xi for v in x) + (sum(v == xi for v in x) - 1) / 2 for xi in x]


def _pearson(a: list[float], b: list[float]) -> float:
    n = len(a)
    ma, mb = sum(a) / n, sum(b) / n
    cov = sum((p - ma) * (q - mb) for p, q in zip(a, b, strict=True))
    va = sum((p - ma) ** 2 for p in a)
    vb = sum((q - mb) ** 2 for q in b)
    return cov / (va * vb) ** 0.5


@exercise_check("8.2")
def spearman(answer) -> None:
    """Exercise 8.2: Spearman's rank correlation with average ranks for ties."""
    cases = {
        "no ties": ([0.3, 0.1, 0.9, 0.5, 0.7], [1.0, 2.0, 5.0, 3.0, 4.0]),
        "ties in the grades": ([0.8, 0.1, 0.4, 0.6, 0.2, 0.9], [5.0, 0.0, 2.0, 5.0, 0.0, 3.0]),
        "ties in both": ([0.5, 0.5, 0.2, 0.9, 0.2], [1.0, 2.0, 2.0, 3.0, 1.0]),
    }
    for name, (x, y) in cases.items():
        expected = _pearson(_average_ranks(x), _average_ranks(y))
        got = answer(torch.tensor(x, dtype=torch.float64), torch.tensor(y, dtype=torch.float64))
        got = float(got)
        if abs(got - expected) > 1e-6:
            raise Wrong(f"for the case with {name} (x = {x}, y = {y}) the rank correlation is "
                        f"{expected:.4f}, your function returned {got:.4f}")
