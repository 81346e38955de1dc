"""Content heads: how much attention a head puts on other tokens holding the query's symbol."""

from __future__ import annotations

import torch

from mha._validation import (
    check_output_allocation,
    may_read_values,
    refuse_float8,
    require_finite,
    require_float_tensor,
    require_int_tensor,
    require_same_device,
    require_values,
)


def same_token_weight(weights: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    r"""Each head's mean weight on *other* positions with the same symbol as the query.

    For head ``h``: the mean over batch and queries ``i`` of
    ``sum_{j != i, tokens_j = tokens_i} weights[b, h, i, j]``.
    ``weights``: ``(batch, heads, n, n)`` self-attention weights; ``tokens``: integer
    ``(batch, n)``. Returns ``(heads,)``. A head that matches content (a look-up of "where else
    does my symbol occur?") scores high; a positional head scores about the chance that its
    neighbour holds the same symbol.

    ``weights`` floating; the result has its dtype. Raises ``ValueError`` naming ``weights`` or
    ``tokens`` for a wrong type, shape (n = 0 too: no query to average over), device,
    non-finite weights or weights outside [0, 1] (scores, not softmax outputs);
    :class:`mha.MemoryBudgetError` when the product would exceed the memory budget.
    """
    require_float_tensor("weights", weights, min_dim=4)
    refuse_float8("weights", weights)  # torch has no isfinite or arithmetic for it
    # n = 0 leaves no query to average over: NaN per head (as head_confidence refuses it)
    if (weights.dim() != 4 or weights.shape[-1] != weights.shape[-2] or weights.shape[0] == 0
            or weights.shape[-1] == 0):
        raise ValueError(f"weights must have shape (batch, heads, n, n) with batch, n >= 1, "
                         f"got {tuple(weights.shape)}")
    batch, _, n, _ = weights.shape
    require_int_tensor("tokens", tokens)
    if tuple(tokens.shape) != (batch, n):
        raise ValueError(f"tokens must be an integer tensor of shape ({batch}, {n}) to match "
                         f"weights of shape {tuple(weights.shape)}, got {tuple(tokens.shape)}")
    require_same_device(("weights", weights), ("tokens", tokens))
    # the product below is weights-sized (a stride-0 view of weights costs nothing, it does)
    check_output_allocation("same_token_weight's product", "weights", weights, weights.shape,
                            weights.dtype, "use fewer sequences or heads")
    # a NaN weight would make its head's score NaN, silently: attention weights are finite
    require_values("weights", weights)  # the score is read off the values
    require_finite("weights", weights, "attention weights are numbers in [0, 1]; check the "
                   "model that produced them")
    # raw scores would give a "weight" below 0 or above 1 that reads like a finding; rows need
    # not sum to 1 (chapter 7 drops the start token's key)
    if may_read_values(weights) and weights.numel() and (
            float(weights.min()) < 0 or float(weights.max()) > 1 + 1e-3):
        raise ValueError(f"weights must be attention weights in [0, 1], got values from "
                         f"{float(weights.min()):.3g} to {float(weights.max()):.3g}; pass "
                         f"softmax outputs, not scores")
    same = tokens[:, :, None] == tokens[:, None, :]  # (B, n, n)
    same &= ~torch.eye(n, dtype=torch.bool, device=tokens.device)  # other positions only
    return (weights * same[:, None].to(weights.dtype)).sum(dim=-1).mean(dim=(0, 2))
