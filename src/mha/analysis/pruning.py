"""Removing heads: gradient importance (Michel et al. 2019) and structural pruning."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

import torch

from mha._validation import (
    check_allocation,
    require_callable,
    require_flag,
    require_float_dtype,
    require_gradients,
    require_indices,
    require_int,
)
from mha.layers.multi_head import MultiHeadAttention, require_built_projections


def prune_heads(module: MultiHeadAttention, heads: Sequence[int]) -> MultiHeadAttention:
    """A smaller ``MultiHeadAttention`` without the given heads.

    Its outputs equal ``module(..., head_mask=g)`` with ``g`` zero on ``heads`` and one elsewhere:
    a head's rows of ``q/k/v_proj.weight`` and its columns of ``out_proj.weight`` (PyTorch's
    ``(out, in)`` storage) are dropped, so it costs neither parameters nor time. At least one
    head must remain. Each parameter keeps its ``requires_grad`` (a frozen weight stays
    frozen), as do the dropout probability and the train/eval mode.

    ``heads`` is a list (tuple, range, 1-D int tensor) of distinct head indices; ``[]`` gives
    an exact copy. Only a plain ``MultiHeadAttention`` is rebuilt: a subclass (rotary,
    split-input, ...) or a module whose projections were replaced or parametrized (such as
    ``GridSelfAttention.attn``, whose output has ``out_channels`` features) raises
    ``ValueError`` instead of silently losing what makes it different.

    Raises ``ValueError`` naming ``module`` (not a plain MultiHeadAttention) or ``heads`` (not
    distinct indices in ``0 .. h - 1``, or all of them).
    """
    _require_plain_attention(module)
    if module.num_kv_heads != module.num_heads:
        raise ValueError(
            f"prune_heads does not prune grouped-query attention (num_kv_heads="
            f"{module.num_kv_heads} < num_heads={module.num_heads}): a key/value head is "
            f"shared by several query heads"
        )
    h, d = module.num_heads, module.head_dim
    removed = set(require_indices("heads", heads, h))
    keep = [i for i in range(h) if i not in removed]
    if not keep:
        raise ValueError(f"cannot prune all {h} heads: at least one must remain")

    bias = module.q_proj.bias is not None
    pruned = MultiHeadAttention(module.embed_dim, len(keep), kdim=module.kdim,
                                vdim=module.vdim, bias=bias, head_dim=d,
                                dropout=module.dropout).train(module.training)
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
    for name, parameter in module.named_parameters():  # a frozen weight stays frozen
        pruned.get_parameter(name).requires_grad_(parameter.requires_grad)
    return pruned


def _require_plain_attention(module: object) -> None:
    """``module`` must be exactly what ``MultiHeadAttention(...)`` builds."""
    if type(module) is not MultiHeadAttention:
        raise ValueError(
            f"module must be a plain mha.MultiHeadAttention, got {type(module).__name__}: "
            f"prune_heads rebuilds a MultiHeadAttention and would lose what a subclass adds"
        )
    require_built_projections(module, "prune_heads")


def dtype_hint(error: ValueError, function: str, dtype: torch.dtype,
               what: str = "masks") -> ValueError:
    """The model refused ``function``'s ``what`` (of ``dtype``) deep inside the caller's
    callable, in a message about a ``head_mask`` the caller never passed: point to ``dtype=``,
    with an example dtype other than the one refused."""
    example = "torch.float32" if dtype == torch.float64 else "torch.float64"
    return ValueError(f"{error}. {function}'s {what} are {dtype}: pass the model's dtype as "
                      f"dtype= (e.g. {function}(..., dtype={example}))")


def head_importance(
    loss_fn: Callable[[object, torch.Tensor], torch.Tensor],
    batches: Iterable[object],
    num_layers: int,
    num_heads: int,
    normalize_layers: bool = True,
    *,
    dtype: torch.dtype | None = None,
) -> torch.Tensor:
    r"""Head importance after Michel et al., shape ``(layers, heads)``: a cheaper batch variant.

    The paper defines ``I_h = E_x |dL(x) / d xi_h|`` per example; the authors' code takes the
    absolute value even finer, per example and per token, before summing. This function takes
    ``|dL_B / d xi_h|`` of each *batch's mean* loss ``L_B`` and averages it over the batches:
    one backward pass per batch, and, by the triangle inequality, never larger than the
    per-example score before the normalisation (gradients of opposite sign cancel inside a batch).

    ``loss_fn(batch, gates)`` must run the model with ``gates`` (``(layers, heads)``, all ones)
    as its per-layer ``head_mask`` and return the batch's mean loss. The gates, and the
    importances returned, have ``dtype``: pass the model's (its ``head_mask`` refuses another
    float dtype); ``None`` is torch's default dtype. With ``normalize_layers``
    each layer's scores are divided by their l2 norm, the paper's normalisation that makes
    scores comparable across layers. A loss (or gradient) that is NaN or inf raises
    ``ValueError`` rather than giving NaN importances.

    ``gates`` and the result are ``(layers, heads)`` of ``dtype``. Raises ``ValueError``
    naming the argument for a bad ``loss_fn``, ``batches`` (none, or not iterable), size, flag
    or ``dtype``, a loss that is not a scalar tensor depending on ``gates``, a model that
    refuses the gates' dtype (the message names ``dtype=``), or a non-finite loss or
    gradient; :class:`mha.MemoryBudgetError` when the scores would exceed the memory budget.
    """
    require_callable("loss_fn", loss_fn)
    require_gradients("head_importance")
    num_layers = require_int("num_layers", num_layers)
    num_heads = require_int("num_heads", num_heads)
    normalize_layers = require_flag("normalize_layers", normalize_layers)
    dtype = require_float_dtype("dtype", dtype)
    check_allocation("head_importance", (num_layers, num_heads), dtype,
                     "use fewer layers or heads")
    if not isinstance(batches, Iterable):
        raise ValueError(f"batches must be an iterable of batches, got {type(batches).__name__}")
    gates = torch.ones(num_layers, num_heads, dtype=dtype, requires_grad=True)
    # a running sum over many batches: in float16 it would pass 65,504 and reach inf, so it
    # is kept in float32 at least and cast back at the end (float32 and float64 as before)
    total = torch.zeros(num_layers, num_heads, dtype=torch.promote_types(dtype, torch.float32))
    count = 0
    for batch in batches:
        try:
            loss = loss_fn(batch, gates)
        except ValueError as error:
            if "head_mask" not in str(error) or "dtype" not in str(error):
                raise
            raise dtype_hint(error, "head_importance", dtype, "gates") from error
        if not isinstance(loss, torch.Tensor) or loss.numel() != 1 or not loss.requires_grad:
            raise ValueError(f"loss_fn must return a scalar tensor that depends on gates, got "
                             f"{type(loss).__name__} of shape {tuple(getattr(loss, 'shape', ()))}")
        if not torch.isfinite(loss.detach()).all():
            raise ValueError(f"loss_fn returned a non-finite loss ({loss.item()}) for batch "
                             f"{count}: head importance would be NaN; check the model and the "
                             f"batch")
        (grad,) = torch.autograd.grad(loss, gates, allow_unused=True)
        if grad is None:
            raise ValueError("loss_fn's loss does not depend on gates: pass gates to the model "
                             "as its head_mask")
        if not torch.isfinite(grad).all():
            raise ValueError(f"the gradient of loss_fn's loss with respect to gates is not "
                             f"finite for batch {count}: head importance would be NaN")
        total += grad.abs()
        count += 1
    if count == 0:
        raise ValueError("head_importance needs at least one batch")
    importance = total / count
    if normalize_layers:
        importance = importance / importance.norm(dim=-1, keepdim=True).clamp_min(1e-20)
    return importance.to(dtype)
