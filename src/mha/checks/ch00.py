"""Checks of the worked example in the instructors' guide (exercises 0.2 and 0.3).

Chapter 0 is not a chapter of the book: it is the small example notebook
(``tests/fixtures/00_example_exercises.ipynb``) that shows the exercise format and on which the
student-edition and grading tools are tested.
"""

from __future__ import annotations

import math

import torch

from mha.exercises import Wrong, exercise_check, expect_close, seed


@exercise_check("0.2", points=1, reference_names=("mha.attention", "mha.attention.attend"))
def scaled_scores(answer) -> None:
    """``answer(q, k)`` must return ``q @ k.T / sqrt(d_k)`` of shape ``(n_q, n_k)``."""
    generator = torch.Generator().manual_seed(seed(2))
    for n_q, n_k, d_k in [(3, 5, 4), (1, 2, 16), (6, 6, 1)]:
        q = torch.randn(n_q, d_k, generator=generator)
        k = torch.randn(n_k, d_k, generator=generator)
        # the reference, in float64 and written as a sum over the feature axis
        expected = (q.double()[:, None, :] * k.double()[None, :, :]).sum(-1) / math.sqrt(d_k)
        got = answer(q.clone(), k.clone())
        # tolerance: expect_close's default (atol 1e-5, rtol 1e-4), float32 rounding of sums
        # of 16 products of standard normals in any order or scaling is below 1e-5
        expect_close(f"for q of shape {(n_q, d_k)} and k of shape {(n_k, d_k)}", got,
                     expected.float())


def _check_mask(got, n: int) -> None:
    """Exact comparison: a mask is bools, there is nothing to round."""
    if not isinstance(got, torch.Tensor) or got.dtype != torch.bool:
        what = got.dtype if isinstance(got, torch.Tensor) else type(got).__name__
        raise Wrong(f"for n={n}: expected a bool tensor (True = may attend), got {what}")
    if got.shape != (n, n):
        raise Wrong(f"for n={n}: expected shape {(n, n)}, got {tuple(got.shape)}")
    for i in range(n):
        for j in range(n):
            allowed = j <= i  # a query may look at its own position and earlier ones
            if bool(got[i, j]) != allowed:
                raise Wrong(f"for n={n}: entry ({i}, {j}) is {bool(got[i, j])}, but query "
                            f"{i} {'may' if allowed else 'may not'} attend to key {j}")


@exercise_check("0.3", points=1, part="n = 2 and two sizes",
                reference_names=("mha.attention.causal_mask",))
def causal_mask(answer) -> None:
    """``answer(n)`` must return the ``(n, n)`` bool mask with True where key ``j <= i``."""
    generator = torch.Generator().manual_seed(seed(3))
    # n = 2, then two sizes drawn from the hidden seed
    for n in [2, *torch.randint(3, 12, (2,), generator=generator).tolist()]:
        _check_mask(answer(n), n)


@causal_mask.part("one token (n = 1), and a longer sequence", points=1, hidden=True)
def _one_token(answer) -> None:
    # the edge case: a (1, 1) mask, which a .squeeze() turns into shape (); and a size the
    # hidden seed draws, so that no constant answer (all True passes n = 1) earns this part
    _check_mask(answer(1), 1)
    n = int(torch.randint(12, 20, (), generator=torch.Generator().manual_seed(seed(1003))))
    _check_mask(answer(n), n)
