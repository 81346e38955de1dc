"""Additive attention scores (Bahdanau et al. 2015): the other classic scoring function.

Attention is "score every key against the query, softmax over the keys, average the values".
The score is a choice. ``mha.attention`` uses the scaled dot product ``q . k / sqrt(d_k)``;
additive attention scores a pair with a network of one hidden layer instead:

    s(q, k) = w_v . tanh(q W_q + k W_k + b)

It needs parameters of its own, but lets queries and keys have different sizes.
"""

from __future__ import annotations

import torch
from torch import nn

from mha._validation import (
    check_allocation,
    require_flag,
    require_float_tensor,
    require_int,
    require_same_device,
    require_same_dtype,
)


def additive_scores(
    query: torch.Tensor,
    key: torch.Tensor,
    w_q: torch.Tensor,
    w_k: torch.Tensor,
    w_v: torch.Tensor,
    bias: torch.Tensor | None = None,
) -> torch.Tensor:
    r"""Additive attention scores ``s_ij = w_v . tanh(q_i W_q + k_j W_k + b)``.

    Shapes (``...`` is any number of leading batch dimensions; query's and key's must broadcast):

    - ``query``: ``(..., n_q, d_q)``, ``key``: ``(..., n_k, d_k)``; ``d_q`` and ``d_k`` may differ
    - ``w_q``: ``(d_q, hidden)``, ``w_k``: ``(d_k, hidden)``, ``w_v`` and ``bias``: ``(hidden,)``
      (``bias=None`` means ``b = 0``)
    - returns the scores ``(..., n_q, n_k)``, before the softmax.

    Every (query, key) pair goes through the hidden layer, so the intermediate tensor has shape
    ``(..., n_q, n_k, hidden)``: ``hidden`` times the memory of the dot-product scores.

    Dtypes: every tensor floating, all of one dtype and device; the scores have that dtype.
    Raises ``ValueError`` naming the argument whose shape, dtype or device does not fit;
    :class:`mha.MemoryBudgetError` when the hidden layer would exceed the memory budget.
    """
    require_float_tensor("query", query, min_dim=2)
    require_float_tensor("key", key, min_dim=2)
    require_float_tensor("w_q", w_q, min_dim=2)
    require_float_tensor("w_k", w_k, min_dim=2)
    require_float_tensor("w_v", w_v)
    if w_q.dim() != 2 or w_q.shape[0] != query.shape[-1]:
        raise ValueError(
            f"w_q must have shape (d_q, hidden) = ({query.shape[-1]}, hidden) for query of shape "
            f"{tuple(query.shape)}, got {tuple(w_q.shape)}"
        )
    if w_k.dim() != 2 or w_k.shape[0] != key.shape[-1]:
        raise ValueError(
            f"w_k must have shape (d_k, hidden) = ({key.shape[-1]}, hidden) for key of shape "
            f"{tuple(key.shape)}, got {tuple(w_k.shape)}"
        )
    if bias is not None:  # a float or a list has no dtype to compare below
        require_float_tensor("bias", bias)
    named = [("query", query), ("key", key), ("w_q", w_q), ("w_k", w_k), ("w_v", w_v)]
    named += [("bias", bias)] if bias is not None else []
    require_same_dtype(*named)
    require_same_device(*named)
    hidden = w_q.shape[1]
    if w_k.shape[1] != hidden or w_v.shape != (hidden,):
        raise ValueError(
            f"w_q {tuple(w_q.shape)}, w_k {tuple(w_k.shape)} and w_v {tuple(w_v.shape)} need "
            f"the same hidden size: (d_q, {hidden}), (d_k, {hidden}) and ({hidden},)"
        )
    if bias is not None:
        if bias.shape != (hidden,):
            raise ValueError(f"bias must have shape ({hidden},), got {tuple(bias.shape)}")
    try:
        torch.broadcast_shapes(query.shape[:-2], key.shape[:-2])
    except RuntimeError:
        raise ValueError(
            f"the batch dimensions of query {tuple(query.shape)} and key {tuple(key.shape)} "
            f"do not broadcast"
        ) from None
    batch = torch.broadcast_shapes(query.shape[:-2], key.shape[:-2])
    check_allocation("additive_scores' hidden layer",
                     (*batch, query.shape[-2], key.shape[-2], hidden), query.dtype,
                     "use fewer tokens or a smaller hidden size")
    # Project once per token, then pair every query with every key by broadcasting:
    # (..., n_q, 1, hidden) + (..., 1, n_k, hidden) -> (..., n_q, n_k, hidden).
    pairs = (query @ w_q).unsqueeze(-2) + (key @ w_k).unsqueeze(-3)
    if bias is not None:
        pairs = pairs + bias
    return torch.tanh(pairs) @ w_v


class AdditiveScore(nn.Module):
    r"""The learnable scoring function of additive attention: ``w_v . tanh(q W_q + k W_k + b)``.

    Args:
        query_dim: d_q, the size of each query.
        key_dim: d_k, the size of each key (may differ from ``query_dim``).
        hidden_dim: the width of the hidden layer.
        bias: learn the bias ``b`` of the hidden layer (without it, ``s(-q, -k) = -s(q, k)``).

    ``forward(query (..., n_q, d_q), key (..., n_k, d_k))`` returns the scores
    ``(..., n_q, n_k)``; a softmax over the last dimension turns them into attention weights.

    Raises ``ValueError`` naming a bad ``query_dim``, ``key_dim``, ``hidden_dim`` or ``bias``;
    :class:`mha.MemoryBudgetError` when the weights would exceed the memory budget.
    """

    def __init__(self, query_dim: int, key_dim: int, hidden_dim: int, bias: bool = True) -> None:
        super().__init__()
        query_dim, key_dim = require_int("query_dim", query_dim), require_int("key_dim", key_dim)
        hidden_dim, bias = require_int("hidden_dim", hidden_dim), require_flag("bias", bias)
        check_allocation("AdditiveScore's weights", (max(query_dim, key_dim), hidden_dim),
                         torch.get_default_dtype(),
                         f"use a smaller query_dim ({query_dim}), key_dim ({key_dim}) or "
                         f"hidden_dim ({hidden_dim})")
        # One bias for the hidden layer is enough: a second one (on the key side) would add to
        # the same sum, and a bias after w_v adds the same constant to a whole row of scores,
        # which the softmax ignores.
        self.w_q = nn.Linear(query_dim, hidden_dim, bias=bias)
        self.w_k = nn.Linear(key_dim, hidden_dim, bias=False)
        self.w_v = nn.Linear(hidden_dim, 1, bias=False)

    def forward(self, query: torch.Tensor, key: torch.Tensor) -> torch.Tensor:
        """Scores ``(..., n_q, n_k)`` of ``query`` ``(..., n_q, d_q)`` against ``key``
        ``(..., n_k, d_k)``, in the module's dtype. Raises ``ValueError`` as
        :func:`mha.additive_scores` does (shapes, dtypes, devices that do not fit)."""
        # nn.Linear stores its weight as (out, in); the formula wants (in, out).
        return additive_scores(query, key, self.w_q.weight.T, self.w_k.weight.T,
                               self.w_v.weight[0], self.w_q.bias)
