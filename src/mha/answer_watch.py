"""What a student's answer entered while it ran: the course's own reference, a forbidden op.

A check names, for its exercise, the callables of ``mha`` that compute what the answer must
compute (``reference_names``) and the torch operations the exercise forbids (``forbidden_ops``,
e.g. ``("softmax",)`` for "without calling torch.softmax"). On the answer's side of the channel
(``mha.exercises.serve``: the notebook's own process, or the grading sandbox) each call of the
answer runs under :func:`observe`, which records

- every function of those references that the call *enters* (``sys.setprofile``: the code
  object that runs, however it was reached: an alias, ``getattr``, a copy of the function, the
  reference handed to the check as the answer, a subclass calling the method), and the private
  helpers of the check's own module (``mha.checks.chNN``), which compute the check's expected
  values;
- every torch operation the call dispatches whose name holds a forbidden word (a
  ``TorchDispatchMode``: ``torch.softmax``, ``F.softmax``, ``Tensor.softmax``, ``nn.Softmax``,
  ``F.log_softmax`` all reach ``aten._softmax`` or ``aten._log_softmax`` there).

Both hooks see the calling thread only: work handed to another thread or process (a
``threading.Thread``, ``os.fork``, ``subprocess``, ``torch.jit.fork``) is not observed, so a
call that starts one is reported (``ESCAPED``: an outside attack ran the forbidden softmax in a
thread), and a check that forbids ops counts it wrong.

What it cannot prove: the answer runs in the same process and may switch the observation off
(``sys.setprofile(None)``, popping the dispatch mode) or rebuild a reference from its source
text; a switched-off hook is reported when the call returns (``SWITCHED_OFF``) unless the answer
also restores it. So an observation is evidence that a reference ran; its absence is no proof
that the answer is the student's own.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import re
import sys
import types

import torch
from torch.utils._python_dispatch import TorchDispatchMode

SWITCHED_OFF = "the observation of its calls was switched off"
ESCAPED = "it started a thread or a process, whose work is not observed"


def _escapes() -> set[int]:
    """The builtins that start work in another thread or process (by identity: a ``c_call``
    event of the profile hook names the builtin it calls)."""
    import _thread
    import os

    try:
        import _posixsubprocess  # what subprocess forks and execs with (POSIX)
    except ImportError:
        _posixsubprocess = None
    names = [(_thread, "start_new_thread"), (_thread, "start_joinable_thread"),
             (os, "fork"), (os, "forkpty"), (os, "posix_spawn"), (os, "posix_spawnp"),
             (os, "system"), (_posixsubprocess, "fork_exec"), (torch._C, "fork"),
             (torch._C, "_awaitable")]
    return {id(f) for module, name in names if (f := getattr(module, name, None)) is not None}


_ESCAPES = _escapes()
MAX_NAMES = 64  # names a check may ask to watch; a reply names no more than these


def resolve(name: str) -> object:
    """What ``name`` reaches from ``import mha``: attributes first, as a student writes
    ``mha.attention(...)``, else a module path then attributes (``mha.checks.ch06._partial``)."""
    parts = name.split(".")
    if parts[0] != "mha":
        raise ValueError(f"a reference name starts with 'mha.', got {name!r}")
    target: object = importlib.import_module("mha")
    try:
        for part in parts[1:]:
            target = getattr(target, part)
        return target
    except AttributeError:
        pass
    for cut in range(len(parts), 0, -1):
        try:
            target = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for part in parts[cut:]:
            target = getattr(target, part)
        return target
    raise ImportError(f"no such name in mha: {name!r}")


def _codes_of(thing: object, seen: set[int]) -> list[types.CodeType]:
    """The code objects that run when ``thing`` runs: a function's (and the functions nested in
    it), a class's methods and properties, a module's own functions and classes."""
    if id(thing) in seen:
        return []
    seen.add(id(thing))
    if isinstance(thing, types.ModuleType):
        return [code for value in vars(thing).values()
                if getattr(value, "__module__", None) == thing.__name__
                or getattr(inspect.unwrap(value), "__module__", None) == thing.__name__
                if callable(value) for code in _codes_of(value, seen)]
    if isinstance(thing, type):
        members = [getattr(m, "fget", None) or getattr(m, "__func__", None) or m
                   for m in vars(thing).values()]
        return [code for m in members if callable(m) for code in _codes_of(m, seen)]
    function = inspect.unwrap(thing) if callable(thing) else thing
    codes = []
    for candidate in dict.fromkeys([function, thing], None) if function is not thing else [thing]:
        code = getattr(candidate, "__code__", None)
        if isinstance(code, types.CodeType):
            codes.extend(_nested(code))
        checker = getattr(candidate, "checker", None)  # a check: its checker and its parts
        if checker is not None and checker is not candidate:
            codes.extend(_codes_of(checker, seen))
        for part in getattr(candidate, "parts", ()) or ():
            codes.extend(_codes_of(getattr(part, "run", None), seen))
    return codes


def _nested(code: types.CodeType) -> list[types.CodeType]:
    return [code, *(inner for const in code.co_consts if isinstance(const, types.CodeType)
                    for inner in _nested(const))]


@functools.lru_cache(maxsize=64)
def watched_codes(names: tuple[str, ...]) -> dict[types.CodeType, str]:
    """Each code object that ``names`` run, with the name it belongs to (a name that does not
    resolve is skipped: the answer's side may hold another version of mha)."""
    codes: dict[types.CodeType, str] = {}
    for name in names[:MAX_NAMES]:
        try:
            target = resolve(name)
        except (ImportError, AttributeError, ValueError):
            continue
        module = isinstance(target, types.ModuleType)
        for code in _codes_of(target, set()):  # a module's: named by function
            codes.setdefault(code, f"{name}.{code.co_name}" if module else name)
    return codes


def op_matches(name: str, words: tuple[str, ...] | list[str]) -> bool:
    """Whether the torch op ``name`` holds one of ``words`` as a whole word between underscores:
    ``softmax`` matches ``_softmax`` and ``_log_softmax``, ``exp`` matches ``exp_`` but not
    ``expand``."""
    return any(re.search(rf"(?:^|_){re.escape(word)}(?:$|_)", name) for word in words)


class _Ops(TorchDispatchMode):
    """Records the torch operations whose name contains a forbidden word."""

    def __init__(self, words: tuple[str, ...], found: set[str]):
        super().__init__()
        self.words, self.found = words, found

    def __torch_dispatch__(self, func, types_, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        if op_matches(name, self.words):
            self.found.add(f"torch op {name}")
        return func(*args, **(kwargs or {}))


def observe(call, references: tuple[str, ...], forbidden_ops: tuple[str, ...]):
    """``call()`` watched for ``references`` and ``forbidden_ops``: (what it returned, or the
    exception it raised; the set of what it entered: reference names, ``"torch op NAME"``)."""
    found: set[str] = set()
    codes = watched_codes(tuple(references))
    escapes = _ESCAPES
    previous = sys.getprofile()

    def hook(frame, event, arg):
        if event == "call":
            name = codes.get(frame.f_code)
            if name is not None:
                found.add(name)
        elif event == "c_call" and id(arg) in escapes:
            found.add(ESCAPED)

    mode = _Ops(tuple(forbidden_ops), found) if forbidden_ops else None
    depth = torch._C._len_torch_dispatch_stack()
    outcome: object = None
    try:
        if mode is not None:
            mode.__enter__()
        sys.setprofile(hook)
        try:
            outcome = call()
        except Exception as error:  # the answer's own error: reported, with what it entered
            outcome = error
    finally:
        if sys.getprofile() is not hook:
            found.add(SWITCHED_OFF)
        sys.setprofile(previous)
        if mode is not None:
            if torch._C._len_torch_dispatch_stack() != depth + 1:
                found.add(SWITCHED_OFF)
            else:
                mode.__exit__(None, None, None)
    return outcome, found
