"""Scaled dot-product attention, the function every later chapter builds on."""

from __future__ import annotations

import math

import torch

from mha._checks import require_broadcastable_mask, require_float_tensor


def attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    mask: torch.Tensor | None = None,
    scale: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Scaled dot-product attention: ``softmax(Q K^T * scale + M) V``.

    Shapes (``...`` is any number of leading batch dimensions, e.g. ``(batch, heads)``):

    - ``query``: ``(..., n_q, d_k)``, ``key``: ``(..., n_k, d_k)``, ``value``: ``(..., n_k, d_v)``
    - ``mask``: broadcastable to ``(..., n_q, n_k)``. A bool mask means **True = may attend**
      (as in ``torch.nn.functional.scaled_dot_product_attention``); a float mask is added to
      the scores (``-inf`` forbids a key).
    - returns ``output`` ``(..., n_q, d_v)`` and ``weights`` ``(..., n_q, n_k)``.

    ``scale`` defaults to ``1 / sqrt(d_k)``.

    A query whose keys are all masked has no distribution to take: its weights are all zero and
    its output is the zero vector (the same output as PyTorch's fused kernel), never NaN.
    """
    require_float_tensor("query", query, min_dim=2)
    require_float_tensor("key", key, min_dim=2)
    require_float_tensor("value", value, min_dim=2)
    if query.shape[-1] != key.shape[-1]:
        raise ValueError(
            f"query and key need the same feature size d_k: query {tuple(query.shape)}, "
            f"key {tuple(key.shape)}"
        )
    if key.shape[-2] != value.shape[-2]:
        raise ValueError(
            f"key and value need the same number of tokens n_k: key {tuple(key.shape)}, "
            f"value {tuple(value.shape)}"
        )
    if scale is None:
        scale = 1.0 / math.sqrt(query.shape[-1])

    scores = (query @ key.transpose(-2, -1)) * scale
    if mask is None:
        weights = torch.softmax(scores, dim=-1)
        return weights @ value, weights

    require_broadcastable_mask(mask, scores.shape)
    if mask.dtype == torch.bool:
        scores = scores.masked_fill(~mask, float("-inf"))
    else:
        scores = scores + mask
    # Rows with no allowed key would be softmax(-inf, ..., -inf) = NaN. Give them finite scores
    # (so no NaN reaches the backward pass either) and zero weights afterwards.
    has_key = (scores > float("-inf")).any(dim=-1, keepdim=True)
    scores = scores.masked_fill(~has_key, 0.0)
    weights = torch.softmax(scores, dim=-1).masked_fill(~has_key, 0.0)
    return weights @ value, weights


def self_attention(
    x: torch.Tensor, mask: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Self-attention without weights (seed 000): ``softmax(X X^T / sqrt(C)) X``.

    ``x``: ``(..., n, C)``; the queries, keys and values are all ``x`` itself.
    Returns ``output`` ``(..., n, C)`` and ``weights`` ``(..., n, n)``.
    """
    require_float_tensor("x", x, min_dim=2)
    return attention(x, x, x, mask=mask)
