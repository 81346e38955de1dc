"""Checks for the exercises of the lab (notebook 08): they never show the solution."""

from __future__ import annotations

import torch

from mha.exercises import Wrong, exercise_check, expect_close, finite_number, seed, within


def _padded_batch(default_seed: int = 8) -> tuple[torch.Tensor, torch.Tensor]:
    """Token vectors (3, 5, 4): one sentence of 5 real tokens, one of 1, and one of 2 to 4 (the
    hidden seed's); padding holds large values."""
    g = torch.Generator().manual_seed(seed(default_seed))
    hidden = torch.randn(3, 5, 4, generator=g, dtype=torch.float64)
    middle = int(torch.randint(2, 5, (), generator=g))
    mask = (torch.arange(5) < torch.tensor([5, middle, 1])[:, None]).long()
    hidden = torch.where(mask.bool()[..., None], hidden, torch.full_like(hidden, 50.0))
    return hidden, mask


def _check_mean_pool(answer, hidden: torch.Tensor, mask: torch.Tensor, what: str) -> None:
    rows = []
    for b in range(hidden.shape[0]):
        real = hidden[b, mask[b].bool()]
        mean = real.sum(dim=0) / real.shape[0]
        rows.append(mean / mean.norm())
    expected = torch.stack(rows)
    everything = hidden.mean(dim=1)  # the commonest slip: padding averaged in too
    got = answer(hidden, mask)
    # tolerance: expect_close's default (atol 1e-5, rtol 1e-4): unit vectors, so float32
    # rounding (~1e-7) and any order of the sums are far inside it
    expect_close(what, got, expected,
                 mistakes=[("your mean counts the padding tokens too: average the real ones "
                            "only (mask == 1)", everything / everything.norm(dim=-1,
                                                                             keepdim=True))])
    norms = got.detach().double().norm(dim=-1)
    if not torch.allclose(norms, torch.ones_like(norms)):
        raise Wrong("the sentence vectors must have length 1")


@exercise_check("8.1", points=0.5, part="padding after the real tokens",
                reference_names=("mha.pretrained.mean_pool",))
def mean_pool(answer) -> None:
    """Exercise 8.1: unit-length mean of the real tokens' vectors."""
    hidden, mask = _padded_batch()
    lengths = ", ".join(str(n) for n in mask.sum(dim=1).tolist())
    _check_mean_pool(answer, hidden, mask, f"for token vectors (3, 5, 4) with {lengths} real "
                                           f"tokens")


@mean_pool.part("padding before the real tokens (left padding)", points=0.5, hidden=True)
def _left_padding(answer) -> None:
    # The prompt says which tokens are real by the mask alone: with the padding first (as
    # left-padding tokenizers do), an answer that averages the first mask.sum() tokens fails
    hidden, mask = _padded_batch(1008)
    _check_mean_pool(answer, hidden.flip(1), mask.flip(1),
                     "for token vectors (3, 5, 4) padded on the left")


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


@exercise_check("8.2", reference_names=("mha.spearman_difference_bootstrap",
                                         "mha.bootstrap.spearman_difference_bootstrap",
                                         "mha.bootstrap._rowwise_spearman"))
def spearman(answer) -> None:
    """Exercise 8.2: Spearman's rank correlation with average ranks for ties."""
    g = torch.Generator().manual_seed(seed(82))

    def draw(n: int, levels: int | None) -> list[float]:
        if levels is None:  # distinct values
            return ((torch.randperm(n, generator=g) + 1).double() / 10).tolist()
        return torch.randint(0, levels, (n,), generator=g).double().tolist()

    cases = {"no ties": (draw(5, None), draw(5, None)),
             "ties in the grades": (draw(6, None), draw(6, 3)),
             "ties in both": (draw(7, 3), draw(7, 3))}
    for name, (x, y) in cases.items():
        y[0], y[1] = 0.0, 1.0  # never a constant sequence, whose correlation is undefined
        x[0], x[1] = (0.0, 1.0) if name == "ties in both" else (x[0], x[1])
        expected = _pearson(_average_ranks(x), _average_ranks(y))
        plain_ranks = _pearson(_first_ranks(x), _first_ranks(y))
        got = answer(torch.tensor(x, dtype=torch.float64), torch.tensor(y, dtype=torch.float64))
        what = f"for the case with {name} (x = {x}, y = {y})"
        got = finite_number(what, got)  # NaN, "nan" or True would slip past the test below
        # tolerance: 1e-6 absolute on a correlation in [-1, 1]: float32 ranks or corrcoef
        # round by ~1e-7; breaking ties by position moves it by more than 1e-3 here
        if not within(got, expected, 1e-6):
            if within(got, plain_ranks, 1e-6) and name != "no ties":
                raise Wrong(f"{what}: your ranks break ties by position; tied values share "
                            f"the average of their ranks")
            raise Wrong(f"{what}: your function returned {got:.4f}, which is not the rank "
                        f"correlation (ties share the average of their ranks)")


def _first_ranks(x: list[float]) -> list[float]:
    # ranks that break ties by position: the mistake the exercise warns of
    order = sorted(range(len(x)), key=lambda i: x[i])
    ranks = [0.0] * len(x)
    for rank, i in enumerate(order, start=1):
        ranks[i] = float(rank)
    return ranks
