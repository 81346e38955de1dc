"""Attention in chunks with an online softmax: the same output, no n x n matrix in memory."""

from __future__ import annotations

import torch

from mha._validation import (
    check_allocation,
    check_attention_inputs,
    check_output_allocation,
    may_read_values,
    require_flag,
    require_int,
)


def chunked_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    *,
    chunk_size: int = 1024,
    scale: float | None = None,
    causal: bool = False,
    is_causal: bool | None = None,
) -> torch.Tensor:
    r"""``softmax(Q K^T * scale) V`` computed block by block (Milakov & Gimelshein 2018;
    Rabe & Staats 2021; the idea inside FlashAttention).

    Queries are taken ``chunk_size`` at a time; for each query block the keys and values are
    read ``chunk_size`` at a time while three running quantities are updated per query:
    the largest score so far ``m``, the softmax denominator ``l`` relative to ``m`` and the
    unnormalised output ``o``. A new block of scores ``S`` updates them as

    .. math::
        m' = \max(m, \max_j S_j),\quad
        l' = l\,e^{m - m'} + \sum_j e^{S_j - m'},\quad
        o' = o\,e^{m - m'} + \sum_j e^{S_j - m'} v_j,

    and the output is ``o / l``: exactly softmax attention, because every term ends up
    scaled by the same ``e^{-m_final}``. Only a few ``(chunk_size, chunk_size)`` blocks exist at
    any time (within one step the old and the new scores, their exponentials and a temporary),
    so the memory for scores is ``O(chunk_size^2)`` instead of ``O(n_q n_k)``; the output blocks
    are kept and joined at the end, ``O(n_q d_v)`` like any output.

    Shapes: ``query`` ``(..., n_q, d_k)``, ``key`` ``(..., n_k, d_k)``, ``value``
    ``(..., n_k, d_v)``; returns ``(..., n_q, d_v)`` (no weights: they are never formed).
    ``scale`` defaults to ``1/sqrt(d_k)``. ``is_causal`` is another name for ``causal`` (the
    name every other function of the course takes). ``causal=True`` lets query ``i`` see
    keys ``j <= n_k - n_q + i`` only, the queries being the last ``n_q`` of the ``n_k`` positions as
    in :func:`mha.attention` (for ``n_q = n_k``: ``j <= i``), and skips blocks entirely in the
    future (after one look at the keys' and values' values, so in eager mode only: under
    ``torch.func.vmap`` or ``torch.compile``, which cannot branch on values, it computes those
    blocks too and masks them, for the same output); a query before every key sees none and
    gets zeros. A query with no key to see
    (``n_k = 0``) gets the zero vector, as in :func:`mha.attention`. NaN and inf follow
    the rule of :func:`mha.attention` exactly (nothing non-finite is hidden), and leading batch
    dimensions broadcast as there.

    Dtypes: ``query``, ``key`` and ``value`` floating, of one dtype and device; the output has
    it. The scores are computed in that dtype (as in :func:`mha.attention`), while ``m``, ``l``
    and ``o`` are kept in float32 at least (float16 and bfloat16 are widened; in float16 a sum
    over many keys would pass 65,504) and the output is cast once at the end. Raises
    ``ValueError`` naming the argument for a wrong type, shape, dtype, device, ``chunk_size``,
    ``scale``, ``causal`` or ``is_causal`` (or both given, disagreeing);
    :class:`mha.MemoryBudgetError` when a block or the output would exceed the memory budget.
    """
    scale, out_batch = check_attention_inputs(query, key, value, scale)
    chunk_size = require_int("chunk_size", chunk_size)
    causal = require_flag("causal", causal)
    if is_causal is not None:  # the course's other functions say is_causal: take that too
        is_causal = require_flag("is_causal", is_causal)
        if causal and not is_causal:
            raise ValueError("causal=True and is_causal=False disagree: they are one "
                             "setting, pass only is_causal")
        causal = is_causal
    acc = torch.promote_types(query.dtype, torch.float32)  # the running statistics' dtype
    # one block of scores (and of its exponentials, in acc) per step
    check_allocation("chunked_attention", (*out_batch, min(chunk_size, query.shape[-2]),
                                           min(chunk_size, key.shape[-2])), acc,
                     "use a smaller chunk_size")
    # the output (kept whole, like any output) and, when causal, a look at every key
    check_output_allocation("chunked_attention's output", "query", query,
                            (*out_batch, query.shape[-2], value.shape[-1]), value.dtype,
                            "use fewer queries or smaller batches")
    if causal:
        check_output_allocation("chunked_attention's check of the keys", "key", key,
                                key.shape, torch.bool, "use fewer keys or smaller batches")

    n_q, n_k = query.shape[-2], key.shape[-2]
    last_bad = -1  # the last key whose key or value holds NaN or inf
    if causal and n_k > chunk_size and not (may_read_values(key) and may_read_values(value)):
        # vmap and torch.compile cannot branch on values: skip no block (same output)
        last_bad = n_k
    elif causal and n_k > chunk_size:
        # Masking is not cleaning (see mha.attention): a NaN key or value reaches even the
        # queries that mask it. A block wholly in the future may be skipped only when it
        # holds nothing non-finite; one pass over key and value, O(n_k d), tells.
        bad = (~torch.isfinite(key)).any(-1).reshape(-1, n_k).any(0) \
            | (~torch.isfinite(value)).any(-1).reshape(-1, n_k).any(0)  # (n_k,), any batch
        last_bad = int(bad.nonzero()[-1]) if bad.any() else -1
    blocks = []
    for q_start in range(0, n_q, chunk_size):
        q = query[..., q_start:q_start + chunk_size, :] * scale
        # each query's position among the keys (bottom-right aligned, as in mha.attention)
        rows = torch.arange(q_start, q_start + q.shape[-2], device=q.device)[:, None] + n_k - n_q
        first_row, last_row = q_start + n_k - n_q, q_start + q.shape[-2] - 1 + n_k - n_q
        # The running statistics are kept in float32 at least and cast once at the end: in
        # float16, l (a sum of up to n_k terms of at most 1) and o (up to n_k * |v|) pass
        # 65,504 and become inf, then NaN, where mha.attention and SDPA are right. They have
        # the broadcast batch shape from the start, so that a block that sees no key (n_k = 0,
        # or causal queries before every key) still comes out with the output's shape.
        m = torch.full((*out_batch, q.shape[-2], 1), float("-inf"), dtype=acc, device=q.device)
        l = torch.zeros_like(m)  # noqa: E741 (the paper's name for the denominator)
        o = torch.zeros((*out_batch, q.shape[-2], value.shape[-1]), dtype=acc, device=q.device)
        for k_start in range(0, n_k, chunk_size):
            if causal and k_start > last_row and k_start > last_bad:
                break  # every later key is in the future of every query of this block
            # the scores in the input dtype (as mha.attention), then widened for the statistics
            s = (q @ key[..., k_start:k_start + chunk_size, :].transpose(-2, -1)).to(acc)
            if causal:
                cols = torch.arange(k_start, k_start + s.shape[-1], device=q.device)[None, :]
                future = torch.zeros(s.shape[-2:], dtype=s.dtype, device=s.device)
                # added, not filled in, as in mha.attention: NaN + (-inf) stays NaN
                s = s + future.masked_fill_(cols > rows, float("-inf"))
            m_new = torch.maximum(m, s.amax(dim=-1, keepdim=True))
            # while a query has seen only -inf scores, shift by 0 instead of -inf (no NaN)
            shift = m_new.masked_fill(m_new == float("-inf"), 0.0)
            p = torch.exp(s - shift)
            correction = torch.exp(m - shift)
            l = l * correction + p.sum(dim=-1, keepdim=True)  # noqa: E741
            o = o * correction + p @ value[..., k_start:k_start + chunk_size, :].to(acc)
            m = m_new
        # l >= 1 whenever a query sees a finite score (its largest term is e^0); l = 0 means
        # it saw no key at all (n_k = 0: zeros, as for a fully masked query in mha.attention)
        # or only -inf scores (from inf inputs: 0 / 0 = NaN, as softmax gives); NaN stays NaN
        out = (o / l if n_k else o).to(value.dtype)
        if causal and first_row < 0:  # queries before every key: fully masked, zeros
            out = out.masked_fill(rows < 0, 0.0)
        blocks.append(out)
    if not blocks:  # no queries
        return query.new_zeros((*out_batch, 0, value.shape[-1]))
    return torch.cat(blocks, dim=-2)
