"""Pruning curves: accuracy as heads are removed one by one in a given order (Michel et al.)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch


def _check_scores(scores: torch.Tensor) -> None:
    if not isinstance(scores, torch.Tensor) or scores.dim() != 2 or scores.is_complex():
        raise ValueError(f"scores must be a real tensor of shape (layers, heads), got "
                         f"{tuple(getattr(scores, 'shape', ()))}")


def pruning_order(scores: torch.Tensor) -> list[tuple[int, int]]:
    """All heads ``(layer, head)`` from the lowest score to the highest (ties: first index first).

    ``scores``: ``(layers, heads)``, e.g. Michel et al.'s importance; the curve removes the
    least important heads first.
    """
    _check_scores(scores)
    heads = scores.shape[1]
    flat = torch.sort(scores.flatten(), stable=True).indices.tolist()
    return [(i // heads, i % heads) for i in flat]


def masks_along(order: Sequence[tuple[int, int]], shape: tuple[int, int]) -> torch.Tensor:
    """Gates after removing the first k heads of ``order``, for k = 0..len(order).

    Returns a float tensor ``(len(order) + 1, layers, heads)``: row k is one everywhere except
    zeros at the first k heads of the order.
    """
    layers, heads = shape
    if sorted(set(order)) != sorted(order) or any(
            not (0 <= la < layers and 0 <= h < heads) for la, h in order):
        raise ValueError(f"order must list distinct (layer, head) pairs inside {shape}, "
                         f"got {list(order)}")
    masks = torch.ones(len(order) + 1, layers, heads)
    for k, (layer, head) in enumerate(order, start=1):
        masks[k:, layer, head] = 0.0
    return masks


def pruning_curve(
    evaluate: Callable[[torch.Tensor], float],
    order: Sequence[tuple[int, int]],
    shape: tuple[int, int],
) -> list[float]:
    """``[evaluate(mask_k) for k = 0..len(order)]``, the masks of ``masks_along``.

    ``evaluate(mask)`` runs the model with ``head_mask=mask`` (``(layers, heads)``) and returns
    a score such as the accuracy.
    """
    return [float(evaluate(mask)) for mask in masks_along(order, shape)]


def iterative_pruning_order(
    importance: Callable[[torch.Tensor], torch.Tensor], shape: tuple[int, int]
) -> list[tuple[int, int]]:
    """Remove heads one at a time, re-scoring the survivors after each removal.

    ``importance(mask)`` returns ``(layers, heads)`` scores of the model gated by ``mask``
    (heads already removed are zero in ``mask``; their scores are ignored). One-shot pruning
    scores once, with every head present; this variant lets the ranking adapt to the heads that
    are gone, at the price of one importance computation per head.
    """
    mask = torch.ones(shape)
    order = []
    for _ in range(shape[0] * shape[1]):
        scores = importance(mask.clone())
        _check_scores(scores)
        scores = scores.masked_fill(mask == 0, float("inf"))
        layer, head = pruning_order(scores)[0]
        order.append((layer, head))
        mask[layer, head] = 0.0
    return order
