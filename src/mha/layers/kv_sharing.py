"""Sharing key/value heads: grouped-query attention (GQA) from a multi-head checkpoint.

In grouped-query attention (Ainslie et al. 2023) ``h`` query heads share ``h_kv`` key/value
heads: query head ``i`` reads key/value head ``i // (h / h_kv)``, so each key/value head
serves a *group* of ``h / h_kv`` consecutive query heads (``h_kv = 1`` is multi-query
attention, Shazeer 2019; ``h_kv = h`` is multi-head attention). Ainslie et al. turn a trained
multi-head model into a GQA one by mean-pooling the key and value projections of each group,
then training briefly ("uptraining").
"""

from __future__ import annotations

import torch

from mha._validation import check_allocation, require_float_tensor, require_int
from mha.layers.multi_head import MultiHeadAttention, require_built_projections
from mha.layers.rotary import RotaryMultiHeadAttention


def repeat_kv(x: torch.Tensor, groups: int) -> torch.Tensor:
    """Repeat each key/value head ``groups`` times along the head axis.

    ``x``: ``(B, h_kv, n, d)`` -> ``(B, h_kv * groups, n, d)`` with head ``i`` of the result
    equal to head ``i // groups`` of ``x`` (the layout of ``scaled_dot_product_attention(...,
    enable_gqa=True)``). Attention with the repeated heads is grouped-query attention written
    as ordinary multi-head attention. A copy: NaN and inf in ``x`` are copied as they are.

    ``x`` floating; the result has its dtype. Raises ``ValueError`` naming ``x`` (not 4-D
    floating) or ``groups`` (a positive int); :class:`mha.MemoryBudgetError` when the copy would
    exceed the memory budget.
    """
    require_float_tensor("x", x)
    if x.dim() != 4:
        raise ValueError(f"x must have shape (batch, kv_heads, n, head_dim), got "
                         f"{tuple(x.shape)}")
    groups = require_int("groups", groups)
    check_allocation("repeat_kv", (x.shape[0], x.shape[1] * groups, *x.shape[2:]), x.dtype,
                     "use fewer groups")
    return x.repeat_interleave(groups, dim=1)  # (B, h_kv * groups, n, d)


def pool_kv_heads(module: MultiHeadAttention, num_kv_heads: int) -> MultiHeadAttention:
    r"""A grouped-query copy of ``module`` with ``num_kv_heads`` key/value heads.

    Key/value head ``g`` of the copy is the mean of the ``h / h_kv`` heads ``g (h/h_kv) ...``
    of ``module``: ``W_K^{(g)} = mean_{i in group g} W_K^{(i)}`` and likewise for ``W_V`` and
    the biases (Ainslie et al.'s conversion). Queries and ``W_O`` are copied unchanged, and so
    are the dropout probability, the train/eval mode and, for a
    :class:`mha.RotaryMultiHeadAttention`, the rotation (the copy is rotary too), and each
    parameter's ``requires_grad`` (a frozen weight stays frozen). When
    ``module``'s heads of a group are equal, the copy computes exactly what ``module`` does.
    Other subclasses raise ``ValueError``. Weights are averaged as they are: a NaN in
    ``module`` stays NaN in the copy (and its outputs follow :func:`mha.attention`'s rule).

    Raises ``ValueError`` naming ``module`` (not a MultiHeadAttention or
    RotaryMultiHeadAttention, or with projections replaced or parametrized, such as
    ``GridSelfAttention.attn``) or ``num_kv_heads`` (not a positive divisor of the module's
    key/value heads).
    """
    if not isinstance(module, MultiHeadAttention):
        raise ValueError(f"module must be an mha.MultiHeadAttention, got {type(module).__name__}")
    if type(module) not in (MultiHeadAttention, RotaryMultiHeadAttention):
        raise ValueError(f"pool_kv_heads rebuilds a MultiHeadAttention or a "
                         f"RotaryMultiHeadAttention; module is a {type(module).__name__}, "
                         f"whose additions would be lost")
    # it views the weights per head and loads q_proj's and out_proj's state_dicts: a
    # replaced or parametrized projection would fail inside torch
    require_built_projections(module, "pool_kv_heads")
    h, h_kv_old, d = module.num_heads, module.num_kv_heads, module.head_dim
    num_kv_heads = require_int("num_kv_heads", num_kv_heads)
    if h_kv_old % num_kv_heads:
        raise ValueError(f"num_kv_heads must be a positive int dividing the module's "
                         f"{h_kv_old} key/value heads, got {num_kv_heads!r}")
    bias = module.q_proj.bias is not None
    options = dict(bias=bias, head_dim=d, num_kv_heads=num_kv_heads, dropout=module.dropout)
    if isinstance(module, RotaryMultiHeadAttention):  # keep the rotation of queries and keys
        pooled = RotaryMultiHeadAttention(module.embed_dim, h, base=module.base, **options)
    else:
        pooled = MultiHeadAttention(module.embed_dim, h, kdim=module.kdim, vdim=module.vdim,
                                    **options)
    pooled.train(module.training)
    weight = module.out_proj.weight
    pooled.to(device=weight.device, dtype=weight.dtype)
    per_group = h_kv_old // num_kv_heads
    with torch.no_grad():
        for new, old in [(pooled.k_proj, module.k_proj), (pooled.v_proj, module.v_proj)]:
            w = old.weight.view(num_kv_heads, per_group, d, -1)  # (h_kv, group, d, in)
            new.weight.copy_(w.mean(dim=1).reshape(num_kv_heads * d, -1))
            if bias:
                new.bias.copy_(old.bias.view(num_kv_heads, per_group, d).mean(dim=1).flatten())
        pooled.q_proj.load_state_dict(module.q_proj.state_dict())
        pooled.out_proj.load_state_dict(module.out_proj.state_dict())
    for name, parameter in module.named_parameters():  # a frozen weight stays frozen
        pooled.get_parameter(name).requires_grad_(parameter.requires_grad)
    return pooled
