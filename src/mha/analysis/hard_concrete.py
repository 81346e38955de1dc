r"""Hard Concrete gates with an L0 penalty (Louizos et al. 2018), as Voita et al. (2019) use.

A gate ``z`` in [0, 1] is drawn by squashing logistic noise, stretching it to ``(low, high)``
with ``low < 0 < 1 < high`` and clipping back to [0, 1]:

    ``u ~ U(0, 1)``,  ``s = sigmoid((log u - log(1 - u) + log_alpha) / beta)``,
    ``z = clip(low + (high - low) s, 0, 1)``.

The stretch puts a point mass at exactly 0 and at exactly 1, yet ``z`` stays differentiable in
``log_alpha`` where it is not clipped. The expected number of open gates, the L0 norm, has the
closed form

    ``P(z != 0) = sigmoid(log_alpha - beta log(-low / high))``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import nn

from mha._validation import (
    broadcast_batch,
    check_allocation,
    check_output_allocation,
    refuse_float8,
    require_float_tensor,
    require_generator,
    require_int,
    require_no_nan,
    require_number,
    require_positive,
    require_same_device,
    require_shape,
    require_values,
)

# why a log_alpha holds NaN, for the error message
NAN_LOG_ALPHA = "it usually comes from a diverged training step (lower the learning rate)"


def _check_params(temperature: float, stretch: tuple[float, float]) -> None:
    require_positive("temperature", temperature)
    if isinstance(stretch, str | bytes) or not isinstance(stretch, Sequence) or len(stretch) != 2:
        raise ValueError(f"stretch must be a pair (low, high), got {stretch!r}")
    low, high = (require_number(f"stretch[{i}]", v) for i, v in enumerate(stretch))
    if not (low < 0 and high > 1):
        raise ValueError(f"stretch must be (low, high) with low < 0 and high > 1, got {stretch}")


def _require_temperature_in(dtype: torch.dtype, temperature: float) -> None:
    """Refuse a temperature that rounds to 0 in the dtype the gates are computed in: logit(u) +
    log_alpha divided by it is 0 / 0 where the sum is 0, a NaN gate (tester 49: 1e-46)."""
    if torch.tensor(temperature, dtype=dtype).item() == 0:
        raise ValueError(f"temperature {temperature:g} rounds to 0 in {dtype}, the dtype the "
                         f"gates are computed in (the gates would be NaN): use a larger one")


def hard_concrete_sample(
    log_alpha: torch.Tensor,
    u: torch.Tensor,
    temperature: float = 0.33,
    stretch: tuple[float, float] = (-0.1, 1.1),
) -> torch.Tensor:
    r"""Gates ``z = clip(low + (high - low) sigmoid((logit(u) + log_alpha) / beta), 0, 1)``.

    ``u``: uniform noise in (0, 1), broadcastable with ``log_alpha`` (any shape).

    ``log_alpha`` and ``u`` floating; the gates have the broadcast shape. Raises ``ValueError``
    naming ``log_alpha`` (NaN), ``u`` (values outside ``(0, 1)``), ``temperature`` (also one
    that rounds to 0 in the gates' dtype) or ``stretch``; :class:`mha.MemoryBudgetError` when
    the gates would exceed the memory budget.
    """
    _check_params(temperature, stretch)
    require_float_tensor("log_alpha", log_alpha, min_dim=0)
    require_float_tensor("u", u, min_dim=0)
    refuse_float8("log_alpha", log_alpha)  # torch would stop at the dtype promotion
    refuse_float8("u", u)
    require_same_device(("log_alpha", log_alpha), ("u", u))
    shape = broadcast_batch(("log_alpha", log_alpha.shape), ("u", u.shape))
    # before any look at the values: a stride-0 view of u costs nothing, the gates do
    name, larger = max([("log_alpha", log_alpha), ("u", u)], key=lambda item: item[1].numel())
    check_output_allocation("hard_concrete_sample's gates", name, larger, shape,
                            torch.promote_types(log_alpha.dtype, u.dtype),
                            "use fewer gates or a smaller batch of noise")
    require_no_nan("log_alpha", log_alpha, NAN_LOG_ALPHA)
    require_values("u", u)  # noise must be read to be checked
    if not ((u > 0) & (u < 1)).all():  # written so that NaN fails too
        raise ValueError("u must be uniform noise strictly inside (0, 1), got values outside")
    _require_temperature_in(torch.promote_types(log_alpha.dtype, u.dtype), temperature)
    return _squash(log_alpha, u, temperature, stretch)


def _squash(log_alpha: torch.Tensor, u: torch.Tensor, temperature: float,
            stretch: tuple[float, float]) -> torch.Tensor:
    """The gates of checked arguments (:func:`hard_concrete_sample` without its checks)."""
    low, high = stretch
    s = torch.sigmoid((torch.log(u) - torch.log1p(-u) + log_alpha) / temperature)
    return (low + (high - low) * s).clamp(0.0, 1.0)


def prob_nonzero(
    log_alpha: torch.Tensor,
    temperature: float = 0.33,
    stretch: tuple[float, float] = (-0.1, 1.1),
) -> torch.Tensor:
    r"""``P(z != 0) = sigmoid(log_alpha - beta log(-low / high))``, elementwise.

    ``log_alpha`` floating, of any shape; the result has its shape and dtype. Raises
    ``ValueError`` naming ``log_alpha`` (not floating, or NaN), ``temperature`` or ``stretch``;
    :class:`mha.MemoryBudgetError` when the result would exceed the memory budget."""
    _check_params(temperature, stretch)
    require_float_tensor("log_alpha", log_alpha, min_dim=0)
    refuse_float8("log_alpha", log_alpha)  # torch has no arithmetic for it
    check_output_allocation("prob_nonzero's output", "log_alpha", log_alpha, log_alpha.shape,
                            log_alpha.dtype, "use fewer gates")
    require_no_nan("log_alpha", log_alpha, NAN_LOG_ALPHA)
    low, high = stretch
    return torch.sigmoid(log_alpha - temperature * math.log(-low / high))


class HardConcreteGates(nn.Module):
    r"""A tensor of learnable Hard Concrete gates, e.g. shape ``(layers, heads)``.

    In training mode ``forward(batch)`` samples fresh gates ``(batch, *shape)`` (one draw per
    example, which lowers the variance of the gradient); in eval mode it returns the
    deterministic gates ``clip(low + (high - low) sigmoid(log_alpha), 0, 1)`` of shape
    ``shape``, as Voita et al. do at test time. ``l0_penalty()`` is the expected number of open
    gates, ``sum P(z != 0)``.

    Args:
        shape: shape of the gate tensor.
        temperature: beta; smaller is closer to a 0/1 gate.
        stretch: the interval ``(low, high)`` before clipping.
        init_log_alpha: starting value of every ``log_alpha`` (large = gates start open).

    Raises ``ValueError`` naming ``shape``, ``temperature``, ``stretch`` or ``init_log_alpha``;
    :class:`mha.MemoryBudgetError` when the gates would exceed the memory budget.
    """

    def __init__(
        self,
        shape: tuple[int, ...],
        temperature: float = 0.33,
        stretch: tuple[float, float] = (-0.1, 1.1),
        init_log_alpha: float = 3.0,
    ) -> None:
        super().__init__()
        _check_params(temperature, stretch)
        shape = require_shape("shape", (shape,) if isinstance(shape, int) else shape)
        check_allocation("HardConcreteGates", shape, torch.get_default_dtype(), "use fewer gates")
        init_log_alpha = require_number("init_log_alpha", init_log_alpha)
        self.temperature = temperature
        self.stretch = stretch
        self.log_alpha = nn.Parameter(torch.full(tuple(shape), float(init_log_alpha)))

    def forward(self, batch: int | None = None, generator: torch.Generator | None = None
                ) -> torch.Tensor:
        """Sampled gates ``(batch, *shape)`` in training mode, deterministic ``shape`` in eval.

        Float, in ``log_alpha``'s dtype and on its device (the noise is drawn there).
        Raises ``ValueError`` naming ``batch`` or ``generator`` (not a ``torch.Generator``, or
        on another device than ``log_alpha``), or when ``log_alpha`` holds NaN (a diverged
        training step); :class:`mha.MemoryBudgetError` when the sampled gates would exceed the
        memory budget."""
        if not self.training:
            require_no_nan("log_alpha", self.log_alpha, NAN_LOG_ALPHA)
            low, high = self.stretch
            return (low + (high - low) * torch.sigmoid(self.log_alpha)).clamp(0.0, 1.0)
        batch = None if batch is None else require_int("batch", batch)
        require_generator("generator", generator)
        device = self.log_alpha.device
        if generator is not None and (generator.device.type != device.type or (
                device.index is not None and generator.device.index not in (None, device.index))):
            fix = ("pass no generator (meta tensors hold no values to draw)"
                   if device.type == "meta" else
                   f"pass a generator made there, e.g. torch.Generator(device="
                   f"{str(device)!r}).manual_seed(0)")
            raise ValueError(f"generator is on {generator.device} but the gates (log_alpha) are "
                             f"on {device}: {fix}")
        size = self.log_alpha.shape if batch is None else (batch, *self.log_alpha.shape)
        # the gates are computed in the dtype of log_alpha and u together, as
        # hard_concrete_sample checked them
        check_allocation("HardConcreteGates", size,
                         torch.promote_types(self.log_alpha.dtype, torch.get_default_dtype()),
                         "use a smaller batch")
        require_no_nan("log_alpha", self.log_alpha, NAN_LOG_ALPHA)
        # the noise on the gates' device: drawn on the CPU, gates elsewhere failed with a
        # message about a u the caller never passed. Keep u away from 0 and 1 so that
        # logit(u) stays finite (in float32: 1 - 1e-6 rounds to 1 in float16 and bfloat16,
        # whose gates are computed in float32 and returned in log_alpha's dtype, as
        # documented, for its head_mask)
        u = torch.rand(size, generator=generator, device=device).clamp(1e-6, 1 - 1e-6)
        _require_temperature_in(torch.promote_types(self.log_alpha.dtype, u.dtype),
                                self.temperature)
        # u is in (0, 1) by construction: hard_concrete_sample's check of it would read its
        # values, which gates on the meta device do not have
        gates = _squash(self.log_alpha, u, self.temperature, self.stretch)
        return gates.to(self.log_alpha.dtype)

    def prob_nonzero(self) -> torch.Tensor:
        """``P(z != 0)`` for every gate, the shape of ``log_alpha``.

        Float, ``log_alpha``'s dtype and shape. Raises ``ValueError`` when ``log_alpha`` holds
        NaN."""
        return prob_nonzero(self.log_alpha, self.temperature, self.stretch)

    def l0_penalty(self) -> torch.Tensor:
        """The expected number of nonzero gates (a differentiable scalar).

        A 0-d float tensor. Raises ``ValueError`` when ``log_alpha`` holds NaN."""
        return self.prob_nonzero().sum()
