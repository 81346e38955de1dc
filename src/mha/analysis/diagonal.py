"""Self-attention's diagonal: where seed 000's alpha_ij <= max(alpha_ii, alpha_jj) fails."""

from __future__ import annotations

import torch

from mha._validation import (
    check_output_allocation,
    refuse_float8,
    require_float_tensor,
    require_values,
)


def diagonal_violations(weights: torch.Tensor) -> torch.Tensor:
    r"""The pairs that break seed 000's :math:`\alpha_{ij} \le \max(\alpha_{ii}, \alpha_{jj})`.

    ``weights``: attention weights :math:`A` of shape ``(..., n, n)`` (one row per query, each row
    a distribution over the same ``n`` tokens), e.g. the weights of ``mha.self_attention``.

    Returns a bool tensor of shape ``(..., n, n)`` that is True at ``(i, j)`` exactly when
    ``i != j`` and :math:`\alpha_{ij} > \max(\alpha_{ii}, \alpha_{jj})`. The diagonal is always
    False. Self-attention without weights can make such pairs when the tokens' norms differ
    (chapter 2); the comparison is exact, with no tolerance, so a tie is not a violation.

    Raises ``ValueError`` naming ``weights`` when it is not a floating ``(..., n, n)`` tensor
    with values (not ``meta``) or holds NaN or inf; :class:`mha.MemoryBudgetError` when the
    comparison would exceed the memory budget.
    """
    require_float_tensor("weights", weights, min_dim=2)
    refuse_float8("weights", weights)  # torch has no isfinite for it
    n_q, n_k = weights.shape[-2:]
    if n_q != n_k:
        raise ValueError(
            f"weights must be square in the last two dimensions (n, n), got shape "
            f"{tuple(weights.shape)}"
        )
    require_values("weights", weights)  # the violations are read off the values
    # the result and the bounds are weights-sized (a stride-0 view costs nothing, they do)
    check_output_allocation("diagonal_violations' comparison", "weights", weights,
                            weights.shape, weights.dtype, "pass fewer or shorter sequences")
    if not torch.isfinite(weights).all():  # NaN compares False: it would hide violations
        raise ValueError("weights must be finite, got NaN or inf")
    diag = weights.diagonal(dim1=-2, dim2=-1)  # (..., n): alpha_ii
    # max(alpha_ii, alpha_jj) for every (i, j): row i's diagonal against column j's diagonal
    bound = torch.maximum(diag.unsqueeze(-1), diag.unsqueeze(-2))  # (..., n, n)
    off_diagonal = ~torch.eye(n_q, dtype=torch.bool, device=weights.device)
    return (weights > bound) & off_diagonal
