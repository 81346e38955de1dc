"""A paired bootstrap over groups, for a difference of two Spearman correlations (lab, notebook 08).

Two versions of a model (say the full encoder and a pruned one) score the same pairs of
sentences, ``x`` and ``y``, and each is compared with the human ``grades`` by Spearman's rank
correlation. Is ``rho(x, grades) - rho(y, grades)`` more than noise?

- *Paired*: both correlations are measured on the same pairs, so they rise and fall together
  when the pairs change. Every bootstrap draw therefore resamples the pairs once and computes
  both correlations on that one sample; the spread of the difference is what matters, and it is
  much smaller than the spread of either correlation alone.
- *Over groups*: pairs that share a base sentence are not independent. Whole groups are
  resampled: a draw picks ``G`` of the ``G`` groups with replacement (a group picked twice counts
  twice) and keeps every pair of each picked group.

The draws are ``np.random.default_rng(seed).integers(0, G, size=(draws, G))``: row ``t`` lists
the groups of draw ``t``, numbered in the order of ``np.unique(groups)``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from mha._validation import (
    check_allocation,
    require_int,
    require_number,
    require_seed,
    require_values,
)


@dataclass(frozen=True)
class BootstrapDifference:
    """The observed difference, its bootstrap interval and standard error, and every draw."""

    difference: float       # rho(x, grades) - rho(y, grades) on the data
    low: float              # the interval: percentiles (1 - level)/2 and (1 + level)/2 of draws
    high: float
    standard_error: float   # standard deviation of the draws
    draws: np.ndarray       # (draws,) the difference in each bootstrap sample


def _is_complex(values: object) -> bool:
    try:
        return np.iscomplexobj(np.asarray(values))
    except (TypeError, ValueError):  # ragged or not numbers: _vector says so
        return False


def _tensor_to_numpy(name: str, values: torch.Tensor) -> np.ndarray:
    """A tensor's values as numpy: meta has none, and numpy has no bfloat16 (float64 holds
    every floating value exactly)."""
    require_values(name, values)
    values = values.detach().cpu()
    return (values.double() if values.is_floating_point() else values).numpy()


def _vector(name: str, values: object) -> np.ndarray:
    if isinstance(values, torch.Tensor):
        values = _tensor_to_numpy(name, values)
    if _is_complex(values):  # np.asarray(..., float64) would drop the imaginary part
        raise ValueError(f"{name} must be real numbers, got complex ones; pass their real part "
                         f"or magnitude explicitly")
    try:
        raw = np.asarray(values)
        array = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a 1-D sequence of real numbers, got "
                         f"{type(values).__name__}") from None
    if array.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {array.shape}")
    # integers beyond 2**53 round in float64: distinct scores would tie, and the ranks (the
    # correlations) change silently (tester 49)
    if raw.dtype.kind in "iu" and (array.astype(raw.dtype) != raw).any():
        raise ValueError(f"{name} holds integers beyond 2**53, which float64 cannot tell apart "
                         f"(distinct values would tie): pass their ranks instead")
    if not np.isfinite(array).all():
        raise ValueError(f"{name} must be finite (no NaN or inf)")
    return array


def _rowwise_spearman(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Spearman's rho of every row of ``a`` with the same row of ``b``, both ``(draws, n)``."""
    import scipy.stats  # here, not at the top: it would add 0.6 s to every `import mha`

    ra = scipy.stats.rankdata(a, axis=1)  # (draws, n), ties get their mean rank
    rb = scipy.stats.rankdata(b, axis=1)
    ra -= ra.mean(axis=1, keepdims=True)
    rb -= rb.mean(axis=1, keepdims=True)
    norm = np.sqrt((ra * ra).sum(axis=1) * (rb * rb).sum(axis=1))
    with np.errstate(invalid="ignore", divide="ignore"):
        return (ra * rb).sum(axis=1) / norm   # (draws,)


def spearman_difference_bootstrap(
    x: object,
    y: object,
    grades: object,
    groups: object,
    *,
    draws: int = 1000,
    seed: int = 0,
    level: float = 0.95,
) -> BootstrapDifference:
    r"""Paired bootstrap over groups of :math:`\rho(x, g) - \rho(y, g)` (Spearman's rho).

    ``x``, ``y``, ``grades`` and ``groups`` are 1-D, of the same length ``n`` (one entry per
    pair; numpy arrays, tensors or lists). ``groups`` labels each pair's group; every group must
    hold the same number of pairs (so every draw has ``n`` pairs). Each of the ``draws`` samples
    picks the groups with replacement (see the module's docstring for the exact rule) and
    computes both correlations on it. The interval is the percentile interval at ``level``.
    Raises ``ValueError`` if a correlation is undefined on the data or on a draw (constant
    scores or grades), rather than return NaN.
    """
    x, y, grades = _vector("x", x), _vector("y", y), _vector("grades", grades)
    draws = require_int("draws", draws, minimum=2)
    seed = require_seed("seed", seed)
    level = require_number("level", level, greater_than=0.0)
    if not level < 1.0:
        raise ValueError(f"level must lie in (0, 1), got {level:g}")
    if isinstance(groups, torch.Tensor):
        groups = _tensor_to_numpy("groups", groups)
    groups = np.asarray(groups)
    if groups.ndim != 1:
        raise ValueError(f"groups must be 1-D, got shape {groups.shape}")
    n = len(x)
    if not len(y) == len(grades) == len(groups) == n:
        raise ValueError(f"x, y, grades and groups must have the same length, got {len(x)}, "
                         f"{len(y)}, {len(grades)} and {len(groups)}")
    try:
        labels, inverse = np.unique(groups, return_inverse=True)
    except TypeError:  # numpy sorts the labels: None, or numbers mixed with objects, do not
        raise ValueError(f"groups must hold labels of one sortable kind (ints or strings), "
                         f"got {sorted({type(g).__name__ for g in groups.tolist()})}") from None
    counts = np.bincount(inverse)
    if len(labels) < 2:
        raise ValueError(f"groups must hold at least 2 groups, got {len(labels)}")
    if (counts != counts[0]).any():
        raise ValueError(f"groups must give every group the same number of pairs, got sizes from "
                         f"{counts.min()} to {counts.max()}")
    size = len(labels)
    check_allocation("spearman_difference_bootstrap", (draws, n), torch.float64,
                     hint="use fewer draws")

    observed = _rowwise_spearman(np.stack([x, y]), np.stack([grades, grades]))
    if np.isnan(observed).any():
        raise ValueError("the correlation is undefined: x, y or grades is constant")
    members = np.argsort(inverse, kind="stable").reshape(size, counts[0])  # (G, m) pair indices
    pick = np.random.default_rng(seed).integers(0, size, size=(draws, size))  # (draws, G)
    index = members[pick].reshape(draws, n)                                # (draws, n)
    g = grades[index]
    differences = _rowwise_spearman(x[index], g) - _rowwise_spearman(y[index], g)  # (draws,)
    if np.isnan(differences).any():
        raise ValueError("a bootstrap draw has constant scores or grades, where the correlation "
                         "is undefined; use larger groups or more of them")
    tail = 50 * (1 - level)
    low, high = np.percentile(differences, [tail, 100 - tail])
    return BootstrapDifference(float(observed[0] - observed[1]), float(low), float(high),
                               float(differences.std()), differences)
