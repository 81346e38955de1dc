"""Input validation: clear ValueErrors instead of errors from deep inside torch."""

from __future__ import annotations

import torch


def require_float_tensor(name: str, x: object, min_dim: int = 1) -> torch.Tensor:
    """Return ``x`` if it is a floating-point tensor with at least ``min_dim`` dimensions."""
    if not isinstance(x, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if not x.is_floating_point():
        raise ValueError(f"{name} must have a floating dtype, got {x.dtype}")
    if x.dim() < min_dim:
        raise ValueError(
            f"{name} must have at least {min_dim} dimensions, got shape {tuple(x.shape)}"
        )
    return x


def require_broadcastable_mask(mask: object, target: torch.Size) -> torch.Tensor:
    """Return ``mask`` if it is a bool or float tensor that broadcasts to ``target``."""
    if not isinstance(mask, torch.Tensor):
        raise ValueError(f"mask must be a torch.Tensor, got {type(mask).__name__}")
    if mask.dtype != torch.bool and not mask.is_floating_point():
        raise ValueError(
            f"mask must be bool (True = may attend) or floating (added to the scores), "
            f"got {mask.dtype}"
        )
    try:
        shape = torch.broadcast_shapes(mask.shape, target)
    except RuntimeError:
        shape = None
    if shape != target:
        raise ValueError(
            f"mask of shape {tuple(mask.shape)} does not broadcast to the scores' shape "
            f"{tuple(target)}"
        )
    return mask
