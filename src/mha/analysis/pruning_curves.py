"""Pruning curves: accuracy as heads are removed one by one in a given order (Michel et al.)."""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Iterable, Sequence

import torch

from mha._validation import (
    check_allocation,
    check_output_allocation,
    refuse_float8,
    require_callable,
    require_float_dtype,
    require_shape,
    require_tensor,
    require_values,
)
from mha.analysis.pruning import dtype_hint


def _check_scores(scores: torch.Tensor, shape: tuple[int, int] | None = None,
                  nan_ok: bool = False, name: str = "scores") -> None:
    """``scores`` ``(layers, heads)``, real; ``name`` is what the user passed (``scores``, or
    ``importance(mask)`` for the scores a callable returned)."""
    if not isinstance(scores, torch.Tensor):
        require_tensor(name, scores, "float")
    if scores.dim() != 2 or scores.is_complex() or scores.dtype == torch.bool or 0 in scores.shape:
        raise ValueError(f"{name} must be a real tensor of shape (layers, heads), got "
                         f"{scores.dtype} of shape {tuple(scores.shape)}")
    if scores.is_floating_point():
        refuse_float8(name, scores)  # torch has no float8 sort (tester 50)
    if shape is not None and tuple(scores.shape) != shape:
        raise ValueError(f"{name} must have shape {shape}, got {tuple(scores.shape)}")
    require_values(name, scores)  # a ranking reads the values
    if not nan_ok and scores.is_floating_point() and scores.isnan().any():
        raise ValueError(f"{name} must not be NaN (a NaN has no place in a ranking)")


def _check_order(order: object, shape: tuple[int, int]) -> list[tuple[int, int]]:
    if isinstance(order, str | bytes) or not isinstance(order, Iterable) or (
            isinstance(order, torch.Tensor) and order.dim() != 2):
        raise ValueError(f"order must be a list of (layer, head) pairs, got "
                         f"{type(order).__name__}")
    if isinstance(order, torch.Tensor):  # its rows are tensors, not the pairs asked for
        raise ValueError(f"order must be a list of (layer, head) pairs of ints, got a tensor "
                         f"of shape {tuple(order.shape)}; pass order.tolist()")
    order = list(order)
    for pair in order:
        if isinstance(pair, str | bytes) or not isinstance(pair, Sequence) or len(pair) != 2 \
                or any(isinstance(i, bool) or not isinstance(i, numbers.Integral) for i in pair):
            raise ValueError(f"order must hold (layer, head) pairs of ints, got {pair!r}")
    order = [(int(la), int(h)) for la, h in order]
    layers, heads = shape
    if len(set(order)) != len(order) or any(
            not (0 <= la < layers and 0 <= h < heads) for la, h in order):
        raise ValueError(f"order must list distinct (layer, head) pairs inside {shape}, "
                         f"got {order}")
    return order


def pruning_order(scores: torch.Tensor) -> list[tuple[int, int]]:
    """All heads ``(layer, head)`` from the lowest score to the highest (ties: first index first).

    ``scores``: ``(layers, heads)``, e.g. Michel et al.'s importance; the curve removes the
    least important heads first.

    ``scores``: a real-valued tensor (float or int) without NaN. Raises ``ValueError`` naming
    ``scores`` for a wrong type, shape or NaN; :class:`mha.MemoryBudgetError` when the sort
    would exceed the memory budget.
    """
    require_tensor("scores", scores, "float")
    # the NaN check and the sort copy the values (a stride-0 view costs nothing, they do)
    check_output_allocation("pruning_order's sort", "scores", scores, (scores.numel(),),
                            torch.int64, "use fewer layers or heads")
    _check_scores(scores)
    heads = scores.shape[1]
    flat = torch.sort(scores.flatten(), stable=True).indices.tolist()
    return [(i // heads, i % heads) for i in flat]


def masks_along(order: Sequence[tuple[int, int]], shape: tuple[int, int], *,
                dtype: torch.dtype | None = None) -> torch.Tensor:
    """Gates after removing the first k heads of ``order``, for k = 0..len(order).

    Returns a float tensor ``(len(order) + 1, layers, heads)`` of ``dtype`` (``None``: torch's
    default): row k is one everywhere except zeros at the first k heads of the order.

    Raises ``ValueError`` naming ``shape``, ``order`` (heads outside ``shape`` or repeated) or
    ``dtype``; :class:`mha.MemoryBudgetError` when the masks would exceed the memory budget.
    """
    shape = require_shape("shape", shape, 2)
    dtype = require_float_dtype("dtype", dtype)
    check_allocation("masks_along", shape, dtype, "use a smaller shape")
    order = _check_order(order, shape)
    check_allocation("masks_along", (len(order) + 1, *shape), dtype,
                     "use a smaller shape or a shorter order")
    layers, heads = shape
    masks = torch.ones(len(order) + 1, layers, heads, dtype=dtype)
    for k, (layer, head) in enumerate(order, start=1):
        masks[k:, layer, head] = 0.0
    return masks


def pruning_curve(
    evaluate: Callable[[torch.Tensor], float],
    order: Sequence[tuple[int, int]],
    shape: tuple[int, int],
    *,
    dtype: torch.dtype | None = None,
) -> list[float]:
    """``[evaluate(mask_k) for k = 0..len(order)]``, the masks of ``masks_along``.

    ``evaluate(mask)`` runs the model with ``head_mask=mask`` (``(layers, heads)``) and returns
    a score such as the accuracy. The masks have ``dtype``: pass the model's (its ``head_mask``
    refuses another float dtype); ``None`` is torch's default dtype.

    Each mask is float ``(layers, heads)``. Raises ``ValueError`` as :func:`masks_along` does,
    naming ``evaluate`` when it is not callable or does not return a number (or returns
    nan), and ``dtype=``
    when the model refuses the masks' dtype; :class:`mha.MemoryBudgetError` when the masks
    would exceed the memory budget.
    """
    require_callable("evaluate", evaluate)
    masks = masks_along(order, shape, dtype=dtype)
    scores = []
    for mask in masks:
        try:
            score = evaluate(mask)
        except ValueError as error:
            if "head_mask" not in str(error) or "dtype" not in str(error):
                raise
            raise dtype_hint(error, "pruning_curve", masks.dtype) from error
        try:
            value = float(score)
        except (TypeError, ValueError, RuntimeError):
            raise ValueError(f"evaluate must return a number (e.g. an accuracy), got "
                             f"{type(score).__name__}") from None
        if math.isnan(value):  # a nan in the curve would pass for a point (as bits_per_byte)
            raise ValueError(f"evaluate returned nan for the mask with {len(scores)} head(s) "
                             f"removed: check the model's parameters (a NaN or inf weight) "
                             f"or what evaluate computes")
        scores.append(value)
    return scores


def iterative_pruning_order(
    importance: Callable[[torch.Tensor], torch.Tensor], shape: tuple[int, int], *,
    dtype: torch.dtype | None = None,
) -> list[tuple[int, int]]:
    """Remove heads one at a time, re-scoring the survivors after each removal.

    ``importance(mask)`` returns ``(layers, heads)`` scores of the model gated by ``mask``
    (heads already removed are zero in ``mask``; their scores are ignored). One-shot pruning
    scores once, with every head present; this variant lets the ranking adapt to the heads that
    are gone, at the price of one importance computation per head.

    ``mask`` and the scores are float ``(layers, heads)``; ``mask`` has ``dtype``: pass the
    model's (its ``head_mask`` refuses another float dtype); ``None`` is torch's default.
    A live head's score may be ``inf`` (ranked last) but not NaN. Raises ``ValueError`` naming
    ``importance`` (not callable, or returning scores of another shape or type, or NaN for a
    live head), ``shape`` or ``dtype`` (also when the model refuses the mask's dtype);
    :class:`mha.MemoryBudgetError` when the gates would exceed the memory budget.
    """
    require_callable("importance", importance)
    shape = require_shape("shape", shape, 2)
    dtype = require_float_dtype("dtype", dtype)
    check_allocation("iterative_pruning_order", shape, dtype, "use a smaller shape")
    mask = torch.ones(shape, dtype=dtype)
    order = []
    for _ in range(shape[0] * shape[1]):
        try:
            scores = importance(mask.clone())
        except ValueError as error:
            if "head_mask" not in str(error) or "dtype" not in str(error):
                raise
            raise dtype_hint(error, "iterative_pruning_order", dtype) from error
        # removed heads' scores are ignored
        _check_scores(scores, shape, nan_ok=True, name="the scores importance(mask) returned")
        # choose among the live heads only: filling the removed ones with +inf let a live
        # head scored +inf tie with them, and the stable sort then removed a head twice
        live = (mask != 0).flatten().nonzero().flatten()
        values = scores.detach().double().cpu().flatten()[live]
        if values.isnan().any():
            bad = int(live[values.isnan().nonzero()[0, 0]])
            raise ValueError(f"importance(mask) returned NaN for the live head "
                             f"{divmod(bad, shape[1])} (layer, head): a NaN has no place in a "
                             f"ranking; check what importance computes")
        flat = int(live[torch.sort(values, stable=True).indices[0]])  # ties: first index
        layer, head = divmod(flat, shape[1])
        order.append((layer, head))
        mask[layer, head] = 0.0
    return order
