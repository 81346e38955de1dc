"""What a head does, read off its attention weights (Voita et al. 2019)."""

from __future__ import annotations

import torch

from mha._validation import (
    check_output_allocation,
    refuse_float8,
    require_bool_tensor,
    require_distributions,
    require_float_tensor,
    require_number,
    require_same_device,
    require_values,
)


def _check(weights: torch.Tensor, token_mask: torch.Tensor | None,
           name: str = "token_mask") -> torch.Tensor:
    require_float_tensor("weights", weights, min_dim=4)
    refuse_float8("weights", weights)  # torch has no isfinite or sum for it
    if weights.dim() != 4 or weights.shape[0] == 0 or weights.shape[2] == 0:
        raise ValueError(f"weights must be self-attention weights of shape (batch, heads, n, n) "
                         f"with batch, n >= 1, got {tuple(weights.shape)}")
    batch, _, n_q, n_k = weights.shape
    if n_q != n_k:
        raise ValueError(
            f"weights must be self-attention weights of shape (batch, heads, n, n), "
            f"got {tuple(weights.shape)}"
        )
    require_values("weights", weights)  # a head's role is read off its weights' values
    # the scores made from weights are weights-sized (a stride-0 view costs nothing, they do)
    check_output_allocation("the analysis of the heads", "weights", weights, weights.shape,
                            weights.dtype, "pass fewer or shorter sequences")
    if not torch.isfinite(weights).all():  # a max or argmax of NaN is NaN or meaningless
        raise ValueError("weights hold NaN or inf: attention weights are finite numbers in "
                         "[0, 1]; check the model that produced them")
    if token_mask is None:
        return torch.ones(batch, n_q, dtype=torch.bool, device=weights.device)
    require_bool_tensor(name, token_mask, (batch, n_q))
    require_same_device(("weights", weights), (name, token_mask))
    if not token_mask.any():
        raise ValueError(f"{name} must mark at least one real token (True), got all False")
    return token_mask


def head_confidence(
    weights: torch.Tensor,
    token_mask: torch.Tensor | None = None,
    key_mask: torch.Tensor | None = None,
) -> torch.Tensor:
    r"""Each head's confidence: the mean, over real query tokens, of its largest weight.

    ``weights``: ``(batch, heads, n, n)``; ``token_mask``: ``(batch, n)``, True for the query
    tokens to average over (padding is left out). ``key_mask``: ``(batch, n)``, True for the keys
    whose weight may count as the largest (default: all keys). Voita et al. define confidence
    "excluding the end of sentence symbol": pass a ``key_mask`` without it (in a BERT-like model
    its analogue is ``[SEP]``; leaving ``[CLS]`` out too goes beyond their definition). Returns
    ``(heads,)``. A head that always puts all its weight on one key has confidence 1; one that
    spreads evenly over n keys has 1/n.

    ``weights`` floating with rows that sum to 1; the masks bool; returns ``weights``' dtype.
    Raises ``ValueError`` naming ``weights``, ``token_mask`` or ``key_mask`` for a wrong type,
    shape, device, non-finite or non-distribution weights, or a mask with no True (for
    ``key_mask``: no True in a sequence whose queries ``token_mask`` counts);
    :class:`mha.MemoryBudgetError` when the analysis would exceed the memory budget.
    """
    token_mask = _check(weights, token_mask)
    require_distributions("weights", weights)  # else a "confidence" above 1 means nothing
    if key_mask is not None:
        key_mask = _check(weights, key_mask, "key_mask")
        # a sequence with scored queries but no key allowed would count 0 for each of its
        # queries and drag the mean down: refuse it
        empty = ~key_mask.any(dim=-1) & token_mask.any(dim=-1)
        if empty.any():
            row = int(empty.nonzero()[0, 0])
            raise ValueError(f"key_mask row {row} has no True key, but token_mask has queries "
                             f"in that sequence: their largest weight would be over no key; "
                             f"allow at least one key in each sequence, or leave that "
                             f"sequence out of token_mask")
        weights = weights.masked_fill(~key_mask[:, None, None, :], 0.0)
    top = weights.max(dim=-1).values  # (batch, heads, n)
    # count and sum in float32 at least: in float16 a count above 65,504 queries is inf, and
    # every head would score 0 (float32 and float64 weights are summed as before)
    total = torch.promote_types(top.dtype, torch.float32)
    real = token_mask[:, None, :].to(total)
    return ((top.to(total) * real).sum(dim=(0, 2)) / real.sum(dim=(0, 2))).to(top.dtype)


def relative_offsets(
    weights: torch.Tensor, token_mask: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""For each head, the most common offset ``j - i`` of its largest weight, and how often.

    For each real query ``i`` take the key ``j`` with the largest weight (among real keys). Returns
    ``(offsets, shares)``, both ``(heads,)``: the most frequent offset and the fraction of real
    queries whose largest weight falls exactly there.

    ``weights`` floating, ``token_mask`` bool; ``offsets`` are int64, ``shares`` floating.
    Only each row's largest entry counts, so finite raw scores give the same result as their
    softmax: unlike :func:`head_confidence`, rows need not sum to 1 (masked scores, with
    ``-inf`` where a mask forbids a key, are refused: pass the weights). Raises
    ``ValueError`` naming ``weights`` (a wrong type or shape, NaN or inf) or ``token_mask`` (a
    wrong shape or device, or no True); :class:`mha.MemoryBudgetError` when the analysis would
    exceed the memory budget.
    """
    token_mask = _check(weights, token_mask)
    n = weights.shape[-1]
    masked = weights.masked_fill(~token_mask[:, None, None, :], float("-inf"))
    offset = masked.argmax(dim=-1) - torch.arange(n, device=weights.device)  # (batch, heads, n)
    offsets, shares = [], []
    for head in range(weights.shape[1]):
        values = offset[:, head][token_mask]
        counts = torch.bincount(values + n - 1, minlength=2 * n - 1)
        best = int(counts.argmax())
        offsets.append(best - (n - 1))
        shares.append(counts[best].item() / values.numel())
    return torch.tensor(offsets), torch.tensor(shares, dtype=torch.float64)


def positional_heads(
    weights: torch.Tensor, token_mask: torch.Tensor | None = None, threshold: float = 0.9
) -> list[tuple[int, int, float]]:
    r"""Voita et al.'s positional heads: those whose largest weight falls at one fixed relative
    offset for at least ``threshold`` of the real tokens. Returns ``(head, offset, share)`` tuples.

    ``weights`` floating ``(batch, heads, n, n)``, ``token_mask`` bool ``(batch, n)``. Raises
    ``ValueError`` as :func:`relative_offsets` does, and naming ``threshold`` outside ``(0,
    1]``; :class:`mha.MemoryBudgetError` when the analysis would exceed the memory budget.
    """
    threshold = require_number("threshold", threshold, greater_than=0.0)
    if threshold > 1.0:
        raise ValueError(f"threshold must lie in (0, 1], got {threshold}")
    offsets, shares = relative_offsets(weights, token_mask)
    return [(h, int(offsets[h]), float(shares[h]))
            for h in range(len(offsets)) if shares[h] >= threshold]
