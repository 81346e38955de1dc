"""Removing heads: gradient importance (Michel et al. 2019) and structural pruning."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

import torch

from mha.multi_head import MultiHeadAttention


def prune_heads(module: MultiHeadAttention, heads: Sequence[int]) -> MultiHeadAttention:
    """A smaller ``MultiHeadAttention`` without the given heads.

    Its outputs equal ``module(..., head_mask=g)`` with ``g`` zero on ``heads`` and one elsewhere:
    a head's rows of ``W_Q``, ``W_K``, ``W_V`` and its columns of ``W_O`` are dropped, so it
    costs neither parameters nor time. At least one head must remain.
    """
    if not isinstance(module, MultiHeadAttention):
        raise ValueError(f"expected mha.MultiHeadAttention, got {type(module).__name__}")
    h, d = module.num_heads, module.head_dim
    removed = set(int(i) for i in heads)
    if not removed <= set(range(h)):
        raise ValueError(f"head indices must lie in 0..{h - 1}, got {sorted(removed)}")
    keep = [i for i in range(h) if i not in removed]
    if not keep:
        raise ValueError(f"cannot prune all {h} heads: at least one must remain")

    bias = module.q_proj.bias is not None
    pruned = MultiHeadAttention(module.embed_dim, len(keep), kdim=module.kdim,
                                vdim=module.vdim, bias=bias, head_dim=d)
    weight = module.out_proj.weight
    pruned.to(device=weight.device, dtype=weight.dtype)
    # feature index of head i, dimension j, in the concatenated projections: i * d + j
    rows = torch.cat([torch.arange(i * d, (i + 1) * d) for i in keep]).to(weight.device)
    with torch.no_grad():
        for new, old in [(pruned.q_proj, module.q_proj), (pruned.k_proj, module.k_proj),
                         (pruned.v_proj, module.v_proj)]:
            new.weight.copy_(old.weight[rows])
            if bias:
                new.bias.copy_(old.bias[rows])
        pruned.out_proj.weight.copy_(module.out_proj.weight[:, rows])
        if bias:
            pruned.out_proj.bias.copy_(module.out_proj.bias)
    return pruned


def head_importance(
    loss_fn: Callable[[object, torch.Tensor], torch.Tensor],
    batches: Iterable[object],
    num_layers: int,
    num_heads: int,
    normalize_layers: bool = True,
) -> torch.Tensor:
    r"""Michel et al.'s head importance ``I_h = E_x |dL / d xi_h|``, shape ``(layers, heads)``.

    ``loss_fn(batch, gates)`` must run the model with ``gates`` (``(layers, heads)``, all ones)
    as its per-layer ``head_mask`` and return the batch's mean loss. The absolute gradient is
    accumulated batch by batch (as in the authors' code) and averaged over batches. With
    ``normalize_layers`` each layer's scores are divided by their l2 norm, the paper's
    normalisation that makes scores comparable across layers.
    """
    gates = torch.ones(num_layers, num_heads, requires_grad=True)
    total = torch.zeros(num_layers, num_heads)
    count = 0
    for batch in batches:
        loss = loss_fn(batch, gates)
        (grad,) = torch.autograd.grad(loss, gates)
        total += grad.abs()
        count += 1
    if count == 0:
        raise ValueError("head_importance needs at least one batch")
    importance = total / count
    if normalize_layers:
        importance = importance / importance.norm(dim=-1, keepdim=True).clamp_min(1e-20)
    return importance
