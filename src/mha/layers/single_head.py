"""One head with its own projections W_Q, W_K, W_V (seed 000: "attention with weights")."""

from __future__ import annotations

import torch
from torch import nn

from mha._validation import (
    check_allocation,
    check_output_allocation,
    require_flag,
    require_float_tensor,
    require_int,
    require_module_device,
    require_module_dtype,
    require_optional_int,
)
from mha.layers.attention import attention


class SelfAttention(nn.Module):
    r"""``softmax(X W_Q (X W_K)^T / sqrt(d_k)) X W_V``: one head, no output projection.

    Args:
        embed_dim: feature size C of the input tokens.
        key_dim: d_k, the size of queries and keys (default ``embed_dim``).
        value_dim: d_v, the size of values and so of the output (default ``embed_dim``).
        bias: add biases to the projections (the seed's formula has none).

    ``forward(x, mask=None)``: ``x`` ``(B, n, C)`` (or ``(n, C)``) ->
    ``(output (B, n, d_v), weights (B, n, n))``; ``Q = x W_Q`` and ``K = x W_K`` are
    ``(B, n, d_k)``, ``V = x W_V`` is ``(B, n, d_v)``. ``mask`` as in ``mha.attention``
    (bool, True = may attend, broadcastable to ``(B, n, n)``).

    ``w_q``, ``w_k``, ``w_v`` are ``nn.Linear`` layers, which store the transpose: the
    seed's ``W_Q`` is ``w_q.weight.T``.

    Raises ``ValueError`` naming a bad ``embed_dim``, ``key_dim``, ``value_dim`` or ``bias``;
    :class:`mha.MemoryBudgetError` when the projections would exceed the memory budget.
    """

    def __init__(
        self,
        embed_dim: int,
        key_dim: int | None = None,
        value_dim: int | None = None,
        bias: bool = False,
    ) -> None:
        super().__init__()
        embed_dim = require_int("embed_dim", embed_dim)
        key_dim = require_optional_int("key_dim", key_dim)
        value_dim = require_optional_int("value_dim", value_dim)
        bias = require_flag("bias", bias)
        check_allocation("SelfAttention's projections", (embed_dim, max(key_dim or embed_dim,
                         value_dim or embed_dim)), torch.get_default_dtype(),
                         f"use a smaller embed_dim ({embed_dim}), key_dim ({key_dim}) or "
                         f"value_dim ({value_dim})")
        self.embed_dim = embed_dim
        self.key_dim = key_dim or embed_dim
        self.value_dim = value_dim or embed_dim
        self.w_q = nn.Linear(embed_dim, self.key_dim, bias=bias)
        self.w_k = nn.Linear(embed_dim, self.key_dim, bias=bias)
        self.w_v = nn.Linear(embed_dim, self.value_dim, bias=bias)

    def forward(
        self, x: torch.Tensor, mask: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``x``: ``(..., n, embed_dim)``; returns ``(output (..., n, value_dim), weights
        (..., n, n))``. NaN and inf in ``x`` reach the outputs (the rule of
        :func:`mha.attention`).

        Dtypes: ``x`` floating, in the module's dtype; ``mask`` as in :func:`mha.attention`
        (bool: True = may attend). Raises ``ValueError`` naming ``x`` or ``mask`` for a wrong
        shape, dtype or device; :class:`mha.MemoryBudgetError` when the projections would exceed
        the memory budget."""
        require_float_tensor("x", x, min_dim=2)
        if x.shape[-1] != self.embed_dim:
            raise ValueError(
                f"x must have {self.embed_dim} features in its last dimension, "
                f"got shape {tuple(x.shape)}"
            )
        require_module_dtype("x", x, self)
        require_module_device("x", x, self)
        check_output_allocation("SelfAttention's projections", "x", x,
                                (*x.shape[:-1], max(self.key_dim, self.value_dim)), x.dtype,
                                "use fewer or shorter sequences")
        return attention(self.w_q(x), self.w_k(x), self.w_v(x), mask=mask)
