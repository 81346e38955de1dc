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
    refuse_float8,
    require_callable,
    require_float_tensor,
    require_generator,
    require_gradients,
    require_int,
    require_int_tensor,
    require_positive,
    require_same_device,
    require_values,
)
from mha.tasks.training_guard import (
    put_back_if_raising,
    require_finite_loss,
    require_trainable,
    training_mode,
)

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
    require_generator("generator", generator, required=True)
    # lookup_targets compares every pair of tokens: (B, n, n)
    check_allocation("lookup_batch", (batch_size, seq_len, seq_len), torch.bool,
                     "use a smaller batch or shorter sequences")
    symbols = torch.randint(vocab_size, (batch_size, seq_len), generator=generator)
    start = torch.full((batch_size, 1), vocab_size)
    ignore = torch.full((batch_size, 1), IGNORE)
    return torch.cat([start, symbols], 1), torch.cat([ignore, lookup_targets(symbols)], 1)


def _scored_positions(logits: object, targets: object, logits_name: str = "logits",
                      targets_name: str = "targets") -> torch.Tensor:
    """The scored positions ``targets != IGNORE`` ``(B, n)``, after checking that ``logits``
    are floating ``(B, n, C)`` and ``targets`` integer ``(B, n)`` classes in ``0..C-1`` or
    IGNORE, with at least one scored position. Flattened, a ``(n, B)`` or ``(B * n,)``
    ``targets`` of the right size would pair each score with another position's answer."""
    require_float_tensor(logits_name, logits, dim=3)
    refuse_float8(logits_name, logits)  # argmax and cross_entropy have no float8 kernels
    if logits.shape[-1] == 0:
        raise ValueError(f"{logits_name} need C >= 1 classes, got shape {tuple(logits.shape)}")
    # float targets would be cut to classes (0.99 to class 0) without a word
    require_int_tensor(targets_name, targets)
    if logits.shape[:-1] != targets.shape:
        raise ValueError(f"{targets_name} must have the shape (B, n) = "
                         f"{tuple(logits.shape[:-1])} of {logits_name} {tuple(logits.shape)} "
                         f"without its classes, one class per position, got "
                         f"{tuple(targets.shape)} (batch first: transpose a (n, B) one)")
    require_same_device((logits_name, logits), (targets_name, targets))
    require_values(targets_name, targets)  # the checks below read them
    scored = targets != IGNORE
    if may_read_values(targets) and not bool(scored.any()):  # the mean of nothing: NaN
        raise ValueError(f"{targets_name} has no scored position (all are IGNORE = {IGNORE}): "
                         f"a loss or accuracy over no position is NaN; give it a batch with "
                         f"targets to score")
    classes = logits.shape[-1]
    if may_read_values(targets) and bool(((targets[scored] < 0)
                                          | (targets[scored] >= classes)).any()):
        raise ValueError(f"{targets_name} must lie in 0..{classes - 1} (or be IGNORE = "
                         f"{IGNORE}) for the {classes} classes of {logits_name}, got values "
                         f"from {int(targets[scored].min())} to {int(targets[scored].max())}")
    return scored


def token_accuracy(logits: torch.Tensor, targets: torch.Tensor) -> float:
    """The fraction of positions (targets other than ``IGNORE``) where ``argmax logits`` is right.

    ``logits``: ``(B, n, C)``; ``targets``: ``(B, n)``.

    ``logits`` floating, ``targets`` integer. Raises ``ValueError`` naming ``logits`` or
    ``targets`` for a wrong type, shape or device, targets outside the classes, no scored
    position, or ``logits`` that hold NaN or a largest score of +-inf shared by several
    classes at a position (a tie argmax would break by taking the first class).
    """
    scored = _scored_positions(logits, targets)
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
    in float32 at least: float16 and bfloat16 logits are widened.

    Raises ``ValueError`` naming ``logits`` or ``targets`` for a wrong type, shape (targets
    must have the logits' leading shape ``(B, n)``) or device, targets outside the classes,
    or no scored position (every target IGNORE: the mean would be NaN)."""
    _scored_positions(logits, targets)
    # the mean sums over every scored position: in float16 past 65,504 (inf), in bfloat16
    # with lost bits; float32 and float64 logits are used as they are
    wide = logits.to(torch.promote_types(logits.dtype, torch.float32))
    return F.cross_entropy(wide.flatten(0, 1), targets.flatten().long(), ignore_index=IGNORE)


def _batch(batches: Callable, step: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``batches(step)``, which must be a pair ``(tokens, targets)``."""
    batch = batches(step)
    if not isinstance(batch, tuple | list) or len(batch) != 2:
        raise ValueError(f"batches(step) must return a pair (tokens, targets), got "
                         f"{type(batch).__name__}"
                         f"{f' of length {len(batch)}' if isinstance(batch, tuple | list) else ''}")
    return batch[0], batch[1]


def _logits(out: object, forward_name: str) -> torch.Tensor:
    """``out``, what ``forward(tokens)`` returned, if it is a tensor of logits ``(B, n, C)``
    (torch's own errors, "'tuple' object has no attribute 'to'" or "1D target must have size
    1", named neither forward nor the fix)."""
    if isinstance(out, tuple | list):
        raise ValueError(f"{forward_name} must return the logits, a tensor (B, n, C), got a "
                         f"{type(out).__name__} of {len(out)}: for a model that returns "
                         f"(logits, weights), leave forward out (its default is "
                         f"model(tokens)[0]) or pass forward=lambda tokens: model(tokens)[0]")
    if not isinstance(out, torch.Tensor) or out.dim() != 3:
        got = (f"shape {tuple(out.shape)}" if isinstance(out, torch.Tensor)
               else type(out).__name__)
        raise ValueError(f"{forward_name} must return logits of shape (B, n, C), one score "
                         f"per class at every position of tokens (B, n), got {got}; for a "
                         f"model that returns the logits alone pass forward=model")
    return out


def _penalty(value: object) -> torch.Tensor | float:
    """``value``, what ``extra_loss()`` returned, if it is one number (a tensor of one element
    or a real): a vector added to the loss made ``loss`` a vector, and the finite-loss check
    said "Boolean value of Tensor ... is ambiguous"."""
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise ValueError(f"extra_loss must return a scalar penalty (a tensor of one "
                             f"element), got shape {tuple(value.shape)}; reduce it, e.g. "
                             f"with .sum() or .mean()")
        return value
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"extra_loss must return a scalar penalty (a tensor of one element "
                         f"or a number), got {type(value).__name__}")
    return value


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

    Raises ``ValueError`` naming ``batches`` (not a pair), ``forward`` (not logits ``(B, n,
    C)``, e.g. a ``(logits, weights)`` tuple), ``targets`` (not integer classes of the
    logits' leading shape ``(B, n)`` in ``0..C-1`` or ``IGNORE``, or all ``IGNORE``) or
    ``extra_loss`` (not one number); naming ``model`` when nothing is trainable (no parameter with
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
    require_gradients("training")
    require_callable("batches", batches)
    if forward is not None:
        require_callable("forward", forward)
    if extra_loss is not None:
        require_callable("extra_loss", extra_loss)
    # what the errors call the logits' maker: the caller's forward, or the default
    forward_name = "forward" if forward is not None else "model(tokens)[0] (the default forward)"
    forward = forward or (lambda tokens: model(tokens)[0])
    groups = param_groups or [{"params": [p for p in model.parameters() if p.requires_grad]}]
    # the groups' params as lists (a generator such as model.parameters() is read once)
    groups = [{**group, "params": [group["params"]] if isinstance(group["params"], torch.Tensor)
               else list(group["params"])} for group in groups]
    trainable = [p for group in groups for p in group["params"] if p.requires_grad]
    require_trainable(trainable)
    optimizer = torch.optim.Adam(groups, lr=lr)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=steps)
    start = time.perf_counter()
    with training_mode(model, trainable), put_back_if_raising(trainable, lr):
        for step in range(steps if stop_after is None else min(steps, stop_after)):
            tokens, targets = _batch(batches, step)
            logits = _logits(forward(tokens), forward_name)
            try:
                _scored_positions(logits, targets, forward_name + "'s logits")
            except ValueError as error:  # say where these targets came from
                raise ValueError(f"{error} (targets: the second item of batches({step}))"
                                 ) from None
            loss = cross_entropy(logits, targets)
            if extra_loss is not None:
                loss = loss + _penalty(extra_loss())
            require_finite_loss(loss, step, lr, "parameters or inputs")
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            schedule.step()
            if on_step is not None:
                on_step(step)
    return {"loss": loss.item(), "seconds": time.perf_counter() - start}
