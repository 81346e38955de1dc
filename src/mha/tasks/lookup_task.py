"""A synthetic look-up task: each token must fetch content from other tokens (chapters 3 and 4).

Every token carries a name (a one-hot id, all names of a sequence distinct), ``n_lookups``
requested names (one-hot each) and ``n_lookups`` content vectors. The target of token ``i``
is, for look-up ``r``, the ``r``-th content vector of the token whose name token ``i``
requested in slot ``r``. The answer lives in another token, so no per-token map (``X W`` or a
1x1 convolution) can produce it; with two look-ups the answer lives in two different tokens.
"""

from __future__ import annotations

import contextlib

import torch
from torch import nn

from mha._validation import (
    check_allocation,
    require_callable,
    require_finite,
    require_generator,
    require_gradients,
    require_int,
    require_positive,
    require_seed,
)
from mha.tasks.training_guard import (
    evaluating,
    put_back_if_raising,
    require_finite_loss,
    require_trainable,
    training_mode,
)


def lookup_task(
    batch: int,
    n_tokens: int,
    content_dim: int,
    n_lookups: int = 1,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    r"""Draw a batch of the look-up task.

    Token ``i`` is the row ``[name_i | want_{i,1} | ... | want_{i,L} | c_{i,1} | ... | c_{i,L}]``
    of size ``d = (1 + L) n + L m`` (``n`` tokens, ``L`` look-ups, contents of size ``m``):
    ``name_i`` and ``want_{i,r}`` are one-hot in ``R^n``, the contents are standard normal.
    The target of token ``i`` is ``[c_{p_1(i),1} | ... | c_{p_L(i),L}]`` where ``p_r(i)`` is
    the token whose name is ``want_{i,r}``.

    Returns ``x`` ``(batch, n, d)``, ``target`` ``(batch, n, L m)`` and ``source``
    ``(batch, n, L)``, the index ``p_r(i)`` of the token each look-up must read.

    ``x`` and ``target`` in torch's default dtype (``torch.get_default_dtype()``, float32
    unless changed), ``source`` int64. Raises ``ValueError`` naming a size that is
    not a positive int, or ``generator``; :class:`mha.MemoryBudgetError` when the batch would
    exceed the memory budget.
    """
    n, m = require_int("n_tokens", n_tokens), require_int("content_dim", content_dim)
    batch, lookups = require_int("batch", batch), require_int("n_lookups", n_lookups)
    require_generator("generator", generator)
    check_allocation("lookup_task", (batch, n, (1 + lookups) * n + lookups * m),
                     torch.get_default_dtype(), "use a smaller batch or fewer tokens")
    # distinct names per sequence: a random permutation of 0..n-1
    names = torch.argsort(torch.rand(batch, n, generator=generator), dim=-1)
    wants = torch.randint(0, n, (batch, n, lookups), generator=generator)
    contents = torch.randn(batch, n, lookups, m, generator=generator)

    # source[b, i, r] = the j with names[b, j] == wants[b, i, r]
    position_of_name = torch.argsort(names, dim=-1)
    source = torch.gather(position_of_name.unsqueeze(-1).expand(-1, -1, lookups), 1, wants)

    one_hot = torch.nn.functional.one_hot
    # the contents' dtype (the default): .float() made x float32 beside float16 contents
    parts = [one_hot(names, n).to(contents.dtype)]
    parts += [one_hot(wants[..., r], n).to(contents.dtype) for r in range(lookups)]
    parts += [contents[:, :, r] for r in range(lookups)]
    x = torch.cat(parts, dim=-1)
    target = torch.cat(
        [torch.gather(contents[:, :, r], 1, source[..., r : r + 1].expand(-1, -1, m))
         for r in range(lookups)],
        dim=-1,
    )
    return x, target, source


class LookupModel(nn.Module):
    """An attention layer followed by a linear read-out: ``x (B, n, d) -> (B, n, out_features)``.

    ``attention`` is any module whose call ``attention(x)`` returns ``(output, weights)``
    with ``output`` of shape ``(B, n, in_features)`` (``mha.SelfAttention``,
    ``mha.MultiHeadAttention``, ...). The read-out is per token, so every exchange between
    tokens happens in the attention layer.

    Raises ``ValueError`` naming ``attention`` (not an ``nn.Module``), ``in_features`` or
    ``out_features`` (positive ints).
    """

    def __init__(self, attention: nn.Module, in_features: int, out_features: int) -> None:
        super().__init__()
        if not isinstance(attention, nn.Module):
            raise ValueError(f"attention must be an nn.Module, got {type(attention).__name__}")
        in_features = require_int("in_features", in_features)
        out_features = require_int("out_features", out_features)
        self.attention = attention
        self.readout = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``(B, n, in_features)`` tokens -> ``(B, n, out_features)`` predictions; what
        raises is what the attention layer raises on ``x``.

        ``x`` floating, in the module's dtype; the predictions have it. Raises ``ValueError``
        naming ``x`` (from the attention layer) for a wrong type, shape or dtype."""
        return self.readout(self.attention(x)[0])


def relative_error(model: nn.Module, n_tokens: int, content_dim: int, n_lookups: int = 1,
                   batch: int = 2048, seed: int = 12345) -> float:
    r"""``E||f(x) - y||^2 / E||y||^2`` on a fresh batch: 0 is perfect, 1 is predicting zero.

    An ``nn.Module`` runs in eval mode (no dropout), whatever mode it was left in, and gets
    its submodules' modes back when the call returns or raises (as :func:`mha.bits_per_byte`).

    The batch is drawn by :func:`lookup_task`, in torch's default dtype on the CPU: an
    ``nn.Module`` must have its floating parameters in that dtype and on the CPU.

    Raises ``ValueError`` naming ``model`` (not callable, parameters of another dtype or
    device than the batch, or predictions that hold NaN or inf: the error would be NaN, not a
    number to compare) or a size, or what the model raises on the task's ``x``;
    :class:`mha.MemoryBudgetError` when the batch would exceed the memory budget."""
    require_callable("model", model)
    _require_task_dtype(model)
    x, y, _ = lookup_task(batch, n_tokens, content_dim, n_lookups,
                          generator=torch.Generator().manual_seed(seed))
    # the mode a training left the model in would keep its dropout on: a larger error, and
    # another one at every call
    with torch.no_grad(), (evaluating(model) if isinstance(model, nn.Module)
                           else contextlib.nullcontext()):
        predictions = require_finite("model's predictions", _predict(model, x, y),
                                     "check model's parameters (a NaN or inf weight, or a "
                                     "diverged training)")
        return ((predictions - y).square().mean() / y.square().mean()).item()


def _require_task_dtype(model: object) -> None:
    """An ``nn.Module`` ``model`` must compute in the dtype and on the device of the task's
    batches (torch's default dtype, the CPU): its layer would name ``x``, a tensor the caller
    of :func:`relative_error` or :func:`train_lookup` never holds, and advise converting it."""
    if not isinstance(model, nn.Module):
        return
    param = next((p for p in model.parameters() if p.is_floating_point()), None)
    dtype = torch.get_default_dtype()
    if param is not None and param.dtype != dtype:
        # float16 and bfloat16 as the default dtype would draw the task too coarsely
        other = (f", or draw them in {param.dtype} with torch.set_default_dtype("
                 f"{param.dtype}) before the call"
                 if param.dtype in (torch.float32, torch.float64) else "")
        raise ValueError(f"model's parameters are {param.dtype}, but the look-up task's batches "
                         f"are drawn in torch's default dtype, {dtype}: convert the model with "
                         f"model.to({dtype}){other}")
    if param is not None and param.device.type != "cpu":
        raise ValueError(f"model's parameters are on {param.device}, but the look-up task's "
                         f"batches are drawn on the CPU: move the model with model.to('cpu')")


def _predict(model, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """``model(x)``, which must have the target's shape (a broadcast would silently mislead)."""
    out = model(x)
    if not isinstance(out, torch.Tensor) or out.shape != y.shape:
        raise ValueError(f"model must map x {tuple(x.shape)} to the target's shape "
                         f"{tuple(y.shape)}, got {tuple(getattr(out, 'shape', ())) or out!r}")
    return out


def train_lookup(model: nn.Module, n_tokens: int, content_dim: int, n_lookups: int = 1,
                 steps: int = 400, batch: int = 128, lr: float = 1e-2,
                 seed: int = 0) -> list[float]:
    """Fit ``model`` to the look-up task with Adam on the squared error; returns the losses.

    Every step draws a fresh batch from a generator seeded with ``seed``, so a run is
    reproducible given the model's initial weights. The batches are :func:`lookup_task`'s, in
    torch's default dtype on the CPU: ``model``'s floating parameters must be too.

    Raises ``ValueError`` naming ``model``, a size, ``steps``, ``lr`` or ``seed``, or ``x`` when
    the model does not fit the task's tokens; naming ``model`` when its parameters have
    another dtype or device than the batches, when nothing is trainable, a
    trainable parameter is float16 (Adam's ``eps = 1e-8`` is 0 in float16), or the loss or a
    parameter becomes NaN or inf (training diverged): the parameters and their ``.grad`` are
    then put back as they were before the call (the rules of
    :func:`mha.tasks.neighbour_task.train`);
    :class:`mha.MemoryBudgetError` when a batch would exceed the memory budget.

    The steps run in training mode. When it returns, ``model`` is in eval mode, whatever mode
    it had before (ready to evaluate, as after :func:`mha.tasks.neighbour_task.train`; call
    ``model.train()`` to train on); when it raises, every submodule has its mode back.
    """
    if not isinstance(model, nn.Module):
        raise ValueError(f"model must be an nn.Module, got {type(model).__name__}")
    require_int("steps", steps)
    require_positive("lr", lr)
    require_gradients("train_lookup")  # torch's own error named no cause (tester 50)
    generator = torch.Generator().manual_seed(require_seed("seed", seed))
    trainable = [p for p in model.parameters() if p.requires_grad]
    require_trainable(trainable)  # names a float16 model for what it is: untrainable
    _require_task_dtype(model)
    optimizer = torch.optim.Adam(trainable, lr=lr)
    losses = []
    with training_mode(model, trainable), put_back_if_raising(trainable, lr):
        for step in range(steps):
            x, y, _ = lookup_task(batch, n_tokens, content_dim, n_lookups, generator=generator)
            loss = (_predict(model, x, y) - y).square().mean()
            require_finite_loss(loss, step, lr, "parameters")
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
    return losses
