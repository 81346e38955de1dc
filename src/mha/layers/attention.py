"""Scaled dot-product attention, the function every later chapter builds on."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from mha._validation import (
    check_allocation,
    check_attention_inputs,
    may_read_values,
    require_broadcastable_mask,
    require_flag,
    require_float_tensor,
    require_probability,
    require_same_device,
)


def attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    mask: torch.Tensor | None = None,
    scale: float | None = None,
    *,
    is_causal: bool = False,
    dropout: float = 0.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Scaled dot-product attention: ``softmax(Q K^T * scale + M) V``.

    Shapes (``...`` is any number of leading batch dimensions, e.g. ``(batch, heads)``):

    - ``query``: ``(..., n_q, d_k)``, ``key``: ``(..., n_k, d_k)``, ``value``: ``(..., n_k, d_v)``
    - ``mask``: broadcastable to ``(..., n_q, n_k)``. A bool mask means **True = may attend**
      (as in ``torch.nn.functional.scaled_dot_product_attention``); a float mask is added to
      the scores (``-inf`` forbids a key), after conversion to the query's dtype.
    - returns ``output`` ``(..., n_q, d_v)`` and ``weights`` ``(..., n_q, n_k)``.

    ``scale`` defaults to ``1 / sqrt(d_k)``. ``is_causal=True`` lets query ``i`` see only the
    keys up to its own position, counting the queries as the *last* ``n_q`` of the ``n_k``
    positions (query ``i`` sees keys ``0 .. n_k - n_q + i``): for ``n_q = n_k`` the usual
    lower-triangular mask, and right for new tokens whose earlier keys come from a cache.
    It combines with ``mask`` (a key must be allowed by both). ``dropout`` zeroes each weight
    with that probability and scales the others by ``1 / (1 - dropout)``, as
    ``nn.MultiheadAttention`` does in training; the weights returned are the dropped ones.

    NaN and inf, the rule of every attention path in ``mha`` (this function, the fused path of
    :class:`mha.MultiHeadAttention`, :func:`mha.chunked_attention`, the rotary and ALiBi
    variants):

    - A query whose keys are all masked (its mask row is all False or all ``-inf``, or
      ``n_k = 0``) has no distribution to take: its weights are all zero and its output is the
      zero vector, whatever the inputs hold.
    - Every other query gets what IEEE arithmetic gives for the formula, the mask being
      *added* to the scores (a bool mask as 0 and ``-inf``): nothing non-finite is hidden. A
      NaN or inf in the query, or in a key or value it sees, or a NaN in its float mask, makes
      its output NaN or inf. Masking is not cleaning: a NaN key's score stays NaN under
      ``-inf`` (NaN + (-inf) = NaN, and so does an inf key whose score is +inf), and a NaN or
      inf value meets a masked key's zero weight (0 * inf = NaN), so they reach even the
      queries that mask them. ``is_causal`` is added the same way (as ``-inf`` at the future
      keys), so a NaN or ``+inf`` in a float mask at a key the causal rule forbids still makes
      that query's output NaN. Clean inputs before attending. (Finite inputs whose scores
      overflow the dtype, ``|q . k| * scale`` above ``torch.finfo(dtype).max``, are left to
      each path: the fused and chunked kernels skip some masked scores. In float16 a row
      masked entirely with the finite ``torch.finfo(torch.float16).min`` can differ between
      the paths too, as ``nn.MultiheadAttention``'s own two paths do: each rounds the sum.)

    Raises ``ValueError`` on bad arguments (wrong types, dtypes that differ, shapes that do not
    fit, a score matrix larger than the memory budget of :func:`mha.memory_budget`; the last a
    :class:`mha.MemoryBudgetError`) before anything is computed.

    The code scales ``Q`` before the product, ``(Q * scale) K^T``, rather than the product
    after it: the same numbers, one pass over an ``(n_q, d_k)`` matrix instead of an
    ``(n_q, n_k)`` one.
    """
    scale, batch = check_attention_inputs(query, key, value, scale)
    is_causal = require_flag("is_causal", is_causal)
    dropout = require_probability("dropout", dropout)
    n_q, n_k = query.shape[-2], key.shape[-2]
    scores_shape = torch.Size((*batch, n_q, n_k))
    check_allocation("attention's scores", scores_shape, query.dtype,
                     "use mha.chunked_attention (it never forms them) or a smaller n")
    if mask is not None:
        require_broadcastable_mask(mask, scores_shape)
        require_same_device(("query", query), ("mask", mask))
    return attend(query, key, value, mask, scale, is_causal, dropout)


def attend(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    mask: torch.Tensor | None,
    scale: float,
    is_causal: bool,
    dropout: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`attention`'s computation, for arguments already checked (as a layer checks its
    own inputs once): the same shapes, rules and results, without the checks' cost."""
    n_q, n_k = query.shape[-2], key.shape[-2]
    if is_causal:
        allowed = causal_mask(n_q, n_k, query.device)
        mask = allowed if mask is None else combine_masks(mask, allowed)

    scores = (query * scale) @ key.transpose(-2, -1)  # (..., n_q, n_k)
    if mask is not None:
        additive, has_key = additive_mask(mask, scores.dtype)
        if may_read_values(additive):
            scores.add_(additive)  # in place: the product itself is not kept for backward
        else:  # under vmap a batched mask cannot be added in place to unbatched scores
            scores = scores + additive
        # compiled or vmapped code cannot branch on values: it always takes the safe route
        if not may_read_values(scores) or not has_key.all():
            # softmax(-inf, ..., -inf) is NaN: give those rows finite scores (so no NaN
            # reaches the backward pass either) and zero weights afterwards
            scores = scores.masked_fill(~has_key, 0.0)
            weights = torch.softmax(scores, dim=-1).masked_fill(~has_key, 0.0)
            weights = F.dropout(weights, dropout) if dropout else weights
            # zero weights times a non-finite value would still be NaN: zero those rows
            return (weights @ value).masked_fill(~has_key, 0.0), weights
    weights = torch.softmax(scores, dim=-1)
    if dropout:
        weights = F.dropout(weights, dropout)
    return weights @ value, weights


def causal_mask(n_q: int, n_k: int, device: torch.device | None = None) -> torch.Tensor:
    """``(n_q, n_k)`` bool mask, True where query ``i`` may see key ``j``: ``j <= n_k - n_q + i``.

    The queries are the last ``n_q`` of the ``n_k`` positions (bottom-right aligned), so the
    same mask is right for a whole sequence (``n_q = n_k``, lower triangular) and for new
    tokens attending over a cache of earlier ones.
    """
    return torch.ones(n_q, n_k, dtype=torch.bool, device=device).tril(n_k - n_q)


def combine_masks(mask: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    """A mask that forbids what either forbids; ``allowed`` is a bool mask (True = may attend).

    A float ``mask`` gets ``allowed`` *added* as ``0`` and ``-inf`` (filling would turn a NaN
    or ``+inf`` at a forbidden key into ``-inf`` and hide it, where the rule of
    :func:`attention` and PyTorch's SDPA given the sum make that query's output NaN)."""
    if mask.dtype == torch.bool:
        return mask & allowed
    return mask + additive_mask(allowed, mask.dtype)[0]  # NaN + (-inf) stays NaN


def additive_mask(mask: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """The mask as numbers to add to the scores, and which of its rows allow some key.

    Both keep the mask's own (broadcastable) shape, usually far smaller than the scores':
    a bool mask becomes ``0`` where allowed and ``-inf`` where not. A float row is blocked
    only when it is all ``-inf`` in ``dtype``: a NaN in it is an input to show, not a mask.
    """
    if mask.dtype == torch.bool:
        additive = torch.zeros(mask.shape, dtype=dtype, device=mask.device)
        # out of place: under vmap the mask may be batched where the zeros are not
        return additive.masked_fill(~mask, float("-inf")), mask.any(dim=-1, keepdim=True)
    # read the converted mask: -1e9 is finite in float32 but -inf in float16
    additive = mask.to(dtype)
    return additive, (additive != float("-inf")).any(dim=-1, keepdim=True)


def self_attention(
    x: torch.Tensor, mask: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Self-attention without weights: ``softmax(X X^T / sqrt(C)) X`` (chapter 2).

    ``x``: ``(..., n, C)``; the queries, keys and values are all ``x`` itself.
    Returns ``output`` ``(..., n, C)`` and ``weights`` ``(..., n, n)``. NaN and inf in ``x``
    reach the outputs (the rule of :func:`mha.attention`: nothing non-finite is hidden).

    Dtypes: ``x`` floating; ``mask`` bool (True = may attend) or float (added to the scores), as
    in :func:`mha.attention`. Raises ``ValueError`` naming ``x`` or ``mask`` for a wrong type,
    shape, dtype or device; :class:`mha.MemoryBudgetError` when the weights would exceed the
    memory budget.
    """
    require_float_tensor("x", x, min_dim=2)
    if x.shape[-1] == 0:
        raise ValueError(f"x needs C >= 1 features, got shape {tuple(x.shape)}")
    if isinstance(mask, torch.Tensor):  # attention() would name x "query"
        require_same_device(("x", x), ("mask", mask))
    return attention(x, x, x, mask=mask)
