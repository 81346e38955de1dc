"""The chapter-7 toy task, a neighbour look-up: it needs both a positional and a content look-up.

Each sequence holds ``n`` random symbols ``x_0 ... x_{n-1}`` from a vocabulary of ``V``. At
position ``i`` the answer is

    ``y_i = x_{i-1}``  if the symbol ``x_i`` occurs somewhere else in the sequence,
    ``y_i = x_{i+1}``  otherwise,

with indices taken cyclically (mod ``n``). Reading the neighbours is a *positional* look-up
(a head attending at offset -1 or +1); deciding which neighbour is a *content* look-up (the
current symbol compared with all others).

The model sees a start symbol ``BOS = V`` in front of every sequence (position 0, no answer:
its target is ``IGNORE``). Attention weights sum to one, so a head that spreads its weight over
the copies of ``x_i`` returns the same average for one copy as for three; the start symbol is a
place to park weight, and the weight left on it, ``1 / (1 + copies)``, tells the copies apart.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from mha._validation import (
    check_allocation,
    check_output_allocation,
    may_read_values,
    require_callable,
    require_float_tensor,
    require_generator,
    require_int,
    require_int_tensor,
    require_positive,
    require_same_device,
    require_values,
)
from mha.tasks.training_guard import put_back_if_raising, require_finite_loss, require_trainable

#: The target of the start position: ignored by the loss and the accuracy.
IGNORE = -100


def lookup_targets(tokens: torch.Tensor) -> torch.Tensor:
    """The answers ``y`` (same shape as ``tokens`` ``(B, n)``) of the look-up task.

    ``tokens`` integer; the answers have its dtype. Raises ``ValueError`` naming ``tokens`` (not
    a 2-D integer tensor); :class:`mha.MemoryBudgetError` when the comparison would exceed the
    memory budget."""
    require_int_tensor("tokens", tokens, dim=2)
    # every pair of tokens is compared: (B, n, n), from a (B, n) that may be a stride-0 view
    check_output_allocation("lookup_targets' comparison", "tokens", tokens,
                            (*tokens.shape, tokens.shape[1]), torch.bool,
                            "use fewer or shorter sequences")
    same = tokens[:, :, None] == tokens[:, None, :]  # (B, n, n): x_i == x_j
    repeated = same.sum(dim=-1) > 1  # x_i == x_j for some j != i
    previous = tokens.roll(1, dims=1)  # previous[:, i] = x_{i-1}
    following = tokens.roll(-1, dims=1)  # following[:, i] = x_{i+1}
    return torch.where(repeated, previous, following)


def lookup_batch(
    batch_size: int, seq_len: int, vocab_size: int, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """``batch_size`` random sequences and their answers, both ``(B, 1 + n)``.

    ``tokens[:, 0]`` is the start symbol ``V`` and ``tokens[:, 1:]`` are ``n`` symbols drawn
    uniformly from ``0..V-1``; ``targets[:, 0]`` is ``IGNORE`` and ``targets[:, 1:]`` is
    ``lookup_targets(tokens[:, 1:])``. A model for it needs ``V + 1`` input symbols, ``V``
    classes and ``1 + n`` positions.

    Both int64. Raises ``ValueError`` naming ``batch_size``, ``seq_len`` (at least 3),
    ``vocab_size`` (at least 2) or ``generator`` (not a ``torch.Generator``, ``None`` too);
    :class:`mha.MemoryBudgetError` when the batch would exceed the memory budget.
    """
    batch_size = require_int("batch_size", batch_size)
    seq_len = require_int("seq_len", seq_len, minimum=3)
    vocab_size = require_int("vocab_size", vocab_size, minimum=2)
    if generator is None:  # the global generator would make the batches irreproducible
        raise ValueError("generator must be a torch.Generator, got None; make one with "
                         "torch.Generator().manual_seed(0)")
    require_generator("generator", generator)
    # lookup_targets compares every pair of tokens: (B, n, n)
    check_allocation("lookup_batch", (batch_size, seq_len, seq_len), torch.bool,
                     "use a smaller batch or shorter sequences")
    symbols = torch.randint(vocab_size, (batch_size, seq_len), generator=generator)
    start = torch.full((batch_size, 1), vocab_size)
    ignore = torch.full((batch_size, 1), IGNORE)
    return torch.cat([start, symbols], 1), torch.cat([ignore, lookup_targets(symbols)], 1)


def token_accuracy(logits: torch.Tensor, targets: torch.Tensor) -> float:
    """The fraction of positions (targets other than ``IGNORE``) where ``argmax logits`` is right.

    ``logits``: ``(B, n, C)``; ``targets``: ``(B, n)``.

    ``logits`` floating, ``targets`` integer. Raises ``ValueError`` naming ``logits`` or
    ``targets`` for a wrong type, shape or device, targets outside the classes, no scored
    position, or ``logits`` that hold NaN or a largest score of +-inf shared by several
    classes at a position (a tie argmax would break by taking the first class).
    """
    require_float_tensor("logits", logits, dim=3)
    if logits.shape[-1] == 0:
        raise ValueError(f"logits need C >= 1 classes, got shape {tuple(logits.shape)}")
    require_int_tensor("targets", targets, dim=2)
    if logits.shape[:-1] != targets.shape:
        raise ValueError(f"logits {tuple(logits.shape)} do not match targets "
                         f"{tuple(targets.shape)}")
    require_same_device(("logits", logits), ("targets", targets))
    require_values("targets", targets)  # the accuracy reads them
    scored = targets != IGNORE
    if not scored.any():
        raise ValueError(f"targets has no scored position (all are IGNORE = {IGNORE})")
    classes = logits.shape[-1]
    if ((targets[scored] < 0) | (targets[scored] >= classes)).any():
        raise ValueError(f"targets must lie in 0..{classes - 1} (or be IGNORE = {IGNORE}) for "
                         f"{classes} classes, got values from {int(targets[scored].min())} to "
                         f"{int(targets[scored].max())}")
    # argmax takes NaN for the largest value: NaN logits would give a believable accuracy.
    # amax propagates NaN and is (B, n): no logits-sized mask, even for an expanded view
    if may_read_values(logits) and bool(logits.amax(dim=-1).isnan().any()):
        raise ValueError("logits holds NaN: argmax would count it as the largest score; check "
                         "the model's parameters (a NaN or inf weight, or a diverged training)")
    if may_read_values(logits):
        # a largest score of +-inf held by two classes (a row of all +inf) is a tie argmax
        # breaks by taking the first class: no prediction. Only those rows are gathered
        top = logits.amax(dim=-1)  # (B, n)
        infinite = top.isinf()
        if bool(infinite.any()):
            tied = (logits[infinite] == top[infinite][:, None]).sum(dim=-1) > 1  # (rows,)
            if bool(tied.any()):
                raise ValueError(
                    f"logits has {int(tied.sum())} position(s) whose largest score, +inf or "
                    f"-inf, is shared by several classes (e.g. a row of all +inf): argmax "
                    f"would pick the first of them, which the model did not predict; check "
                    f"the model's parameters (an inf weight, or a diverged training)")
    return (logits.argmax(dim=-1) == targets)[scored].double().mean().item()


def cross_entropy(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy over the scored positions: ``logits (B, n, C)``, ``targets (B, n)``
    (int64 or int32: F.cross_entropy takes only int64 class indices). Computed (and returned)
    in float32 at least: float16 and bfloat16 logits are widened."""
    # the mean sums over every scored position: in float16 past 65,504 (inf), in bfloat16
    # with lost bits; float32 and float64 logits are used as they are
    wide = logits.to(torch.promote_types(logits.dtype, torch.float32))
    return F.cross_entropy(wide.flatten(0, 1), targets.flatten().long(), ignore_index=IGNORE)


def train(
    model: nn.Module,
    batches: Callable[[int], tuple[torch.Tensor, torch.Tensor]],
    steps: int,
    lr: float = 3e-3,
    extra_loss: Callable[[], torch.Tensor] | None = None,
    forward: Callable[[torch.Tensor], torch.Tensor] | None = None,
    on_step: Callable[[int], None] | None = None,
    param_groups: list[dict] | None = None,
    stop_after: int | None = None,
) -> dict[str, float]:
    r"""Adam with a cosine-decaying learning rate on ``cross_entropy + extra_loss()``.

    ``batches(step)`` returns ``(tokens, targets)``; ``forward(tokens)`` returns logits
    (default: ``model(tokens)[0]``); ``extra_loss`` adds a penalty (the L0 term of the
    Hard Concrete gates); ``on_step(step)`` runs after each update (to record gate values);
    ``param_groups`` (Adam's groups, e.g. a larger ``lr`` for gates) replaces the default of
    all of ``model``'s trainable parameters at ``lr``; ``stop_after`` stops after that many
    steps of the ``steps``-step schedule (the same first steps as the whole run, for a cheap
    fingerprint of a long training).
    Returns the last loss and the wall-clock seconds taken.

    Raises ``ValueError`` naming ``model`` when nothing is trainable (no parameter with
    ``requires_grad``) or a trainable parameter is float16 (Adam's ``eps = 1e-8`` is 0 in
    float16: one step turns every parameter NaN; use float32, or bfloat16), and when the loss
    or a parameter becomes NaN or inf (training diverged); the parameters are then put back as
    they were before the call, as they are when ``batches``, ``forward`` or ``on_step`` raise,
    and so are the modes of ``model``'s submodules and the parameters' ``.grad``.

    When it returns, ``model`` is in eval mode, whatever mode it had before (ready to
    evaluate; call ``model.train()`` to train on), and the parameters' ``.grad`` hold the last
    step's gradients.
    """
    require_int("steps", steps)
    if stop_after is not None:
        require_int("stop_after", stop_after, minimum=1)
    require_positive("lr", lr)
    require_callable("batches", batches)
    forward = forward or (lambda tokens: model(tokens)[0])
    groups = param_groups or [{"params": [p for p in model.parameters() if p.requires_grad]}]
    # the groups' params as lists (a generator such as model.parameters() is read once)
    groups = [{**group, "params": [group["params"]] if isinstance(group["params"], torch.Tensor)
               else list(group["params"])} for group in groups]
    trainable = [p for group in groups for p in group["params"] if p.requires_grad]
    require_trainable(trainable)
    optimizer = torch.optim.Adam(groups, lr=lr)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=steps)
    # what a call that raises puts back besides the parameters: every submodule's mode and
    # the parameters' .grad (zero_grad sets them to None, so the old tensors stay untouched)
    modes = [(module, module.training) for module in model.modules()]
    grads = [(p, p.grad) for p in trainable]
    model.train()
    start = time.perf_counter()
    try:
        with put_back_if_raising(trainable, lr):
            for step in range(steps if stop_after is None else min(steps, stop_after)):
                tokens, targets = batches(step)
                loss = cross_entropy(forward(tokens), targets)
                if extra_loss is not None:
                    loss = loss + extra_loss()
                require_finite_loss(loss, step, lr, "parameters or inputs")
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                schedule.step()
                if on_step is not None:
                    on_step(step)
    except BaseException:
        for module, mode in modes:
            module.training = mode
        for p, grad in grads:
            p.grad = grad
        raise
    model.eval()
    return {"loss": loss.item(), "seconds": time.perf_counter() - start}
