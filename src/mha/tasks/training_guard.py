"""What every training loop of the course checks (the look-up task's and the shared ``train``):
something to train, no float16 parameter, a finite loss at every step and finite parameters at
the end; a call that raises puts the parameters, their gradients and the modules' modes back as
they were. And what every evaluation
of a model does: it runs in eval mode and gives the modes back (``evaluating``)."""

from __future__ import annotations

import contextlib
import threading
import weakref
from collections.abc import Iterator

import torch


def require_trainable(trainable: list[torch.Tensor]) -> None:
    """Raise ``ValueError`` naming ``model`` when ``trainable`` (its parameters that train) is
    empty or holds float16: Adam's ``eps = 1e-8`` is 0 in float16, so one step makes NaN."""
    if not trainable:  # autograd would say "element 0 of tensors does not require grad"
        raise ValueError("model has no trainable parameter (every requires_grad is False): "
                         "unfreeze what should learn, e.g. model.requires_grad_(True)")
    if any(p.dtype == torch.float16 for p in trainable):
        raise ValueError("model has float16 parameters: Adam's eps (1e-8) is 0 in float16, so "
                         "one step makes them NaN; train in float32 (model.float()) or "
                         "bfloat16 (model.to(torch.bfloat16)), and convert afterwards")


def require_finite_loss(loss: torch.Tensor, step: int, lr: float, suspects: str,
                        what: str = "model") -> None:
    """Raise ``ValueError`` naming ``what`` (the caller's argument, ``model``, or the model a
    function builds itself) when ``loss`` is NaN or inf (``suspects``: what else may hold NaN,
    e.g. "parameters or inputs")."""
    if not torch.isfinite(loss.detach()):
        raise ValueError(f"the loss of {what} is {loss.item()} at step {step}: training "
                         f"diverged (try a smaller lr than {lr}), or {what}'s {suspects} hold "
                         f"NaN or inf")


@contextlib.contextmanager
def put_back_if_raising(trainable: list[torch.Tensor], lr: float,
                        what: str = "model") -> Iterator[None]:
    """Run a training loop; after it, the parameters must be finite (the last step's update is
    seen by no loss; ``what`` names their model in the error). Whatever raises inside, the
    parameters are put back as they were."""
    with torch.no_grad():
        before = [p.detach().clone() for p in trainable]
    try:
        yield
        with torch.no_grad():
            if not all(bool(torch.isfinite(p).all()) for p in trainable):
                raise ValueError(f"{what}'s parameters hold NaN or inf after the last step: "
                                 f"training diverged (try a smaller lr than {lr})")
    except BaseException:
        with torch.no_grad():
            for p, saved in zip(trainable, before, strict=True):
                p.copy_(saved)
        raise


@contextlib.contextmanager
def training_mode(model: torch.nn.Module, trainable: list[torch.Tensor]) -> Iterator[None]:
    """``model`` in training mode for the block, then in eval mode: left in training mode, it
    kept its dropout on for whatever measured it next. If the block raises, every submodule's
    mode and the parameters' ``.grad`` are put back as they were (``zero_grad`` sets them to
    None, so the old tensors stay untouched); :func:`put_back_if_raising` puts back the values."""
    modes = [(module, module.training) for module in model.modules()]
    grads = [(p, p.grad) for p in trainable]
    model.train()
    try:
        yield
    except BaseException:
        for module, mode in modes:
            module.training = mode
        for p, grad in grads:
            p.grad = grad
        raise
    model.eval()


# models that an evaluating block (generate, bits_per_byte, relative_error, ...) holds in
# eval mode: {model: [calls, modes]}
_EVALUATING: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_EVALUATING_LOCK = threading.Lock()


@contextlib.contextmanager
def evaluating(model: torch.nn.Module) -> Iterator[None]:
    """``model`` (every submodule) in eval mode for the block: dropout off, Hard Concrete gates
    deterministic (a measure taken in the mode a training left the model in changed from call
    to call). The modes it had come back when the last overlapping block (in any thread)
    ends, even if it raises. Saving and putting back per call lost the mode with two threads:
    the second call saved the first's eval mode and put it back last."""
    with _EVALUATING_LOCK:
        entry = _EVALUATING.get(model)
        if entry is None:
            entry = _EVALUATING[model] = [0, [(m, m.training) for m in model.modules()]]
            model.eval()
        entry[0] += 1
    try:
        yield
    finally:
        with _EVALUATING_LOCK:
            entry[0] -= 1
            if entry[0] == 0:
                del _EVALUATING[model]
                for module, mode in entry[1]:
                    module.training = mode
