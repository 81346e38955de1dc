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
  ``F.log_softmax`` all reach ``aten._softmax`` or ``aten._log_softmax`` there), or whose
  overload a forbidden ``op.overload`` names (``pow.Scalar``: ``math.e ** s``, a power whose
  exponent is a tensor, where ``s ** 2`` is ``pow.Tensor_Scalar``); and every entry into one
  of torch's Python decompositions (``torch/_refs``, ``_decomp``, ``_prims``) whose function's
  name holds a forbidden word (``torch._refs.softmax``, built from exp, sum and div);
- every torch op the call dispatches, as torch's profiler records it below the dispatch modes
  (the op's name, matched as above): an op run where the mode is suspended or switched off
  (a weak reference's callback or an object's ``__del__`` made of builtins, run by a kernel
  freeing a storage, which no Python frame tells the profile hook: attack 48; a Python kernel
  registered for an op; the mode switched off and on from builtins) is recorded all the same.
  A profiler already on, or switched off or on during the call, is the watch switched off;
- while ops are watched, a tensor that leaves torch for NumPy (``Tensor.numpy``,
  ``Tensor.__array__``, which ``numpy.exp(t)``, ``np.asarray(t)`` and scipy's functions reach,
  ``Tensor.__dlpack__``) or whose elements are handed to Python one by one (``Tensor.apply_``,
  ``map_``, ``map2_``): what NumPy or Python computes dispatches no torch op, so a check that
  forbids ops counts it wrong (``LEFT_TORCH``), as it counts work in another thread. A method
  called by a builtin (``map(torch.Tensor.numpy, ...)``, ``functools.partial``,
  ``operator.methodcaller``) makes no event: that exit is not seen.

A reference is recognised by the content of its code (bytecode, constants, global names),
not by identity or line numbers: a copy of a function, or of a whole module whose code objects
were re-created with moved line numbers (an outside attack), is still the reference.

Both hooks see the calling thread only: work handed to another thread or process is not
observed, so a call that starts one (``threading``, ``_thread`` under any of its names,
``os.fork``, ``subprocess``, ``torch.jit.fork``), is reported (``ESCAPED``), and a check that
forbids ops counts it wrong. Under grading, so is a call that runs while a Python thread is
alive that was not alive before the student's first cell (a worker started before the check,
fed through a queue: an outside attack): the grader's runner takes the threads alive then as
the course's (:func:`allow_threads_alive_now`). So is a call that runs while another process
of the runner's user is alive that was not alive then (a helper forked by an earlier cell, fed
through a pipe: outside attack, round 41), where every such process is the submission's: the
sandbox's own PID namespace, or a user of its own (:func:`allow_processes_alive_now`). In a
student's own notebook neither is: the kernel, a progress bar or torch start threads of their
own there, and an honest answer beside them must not read as wrong.

An answer that switches the observation off is reported (``SWITCHED_OFF``), and a check that
forbids ops counts it wrong: the profile hook removed or replaced (``sys.setprofile(None)``),
seen when the call returns; a call, during the watched call, of what switches a watch off
(``sys.setprofile``, ``sys.settrace``, ``threading.setprofile`` and the like; and, from code
outside torch, ``torch._C._pop_torch_dispatch_stack``, ``_push_on_torch_dispatch_stack`` and
torch's other setters of dispatch modes and keys), even when the answer switches it back on
before it returns; and, while ops are watched, on every event of the profile hook,
the dispatch mode popped or another pushed (``_pop_mode``), or torch's Python dispatch keys
excluded (``torch._C._DisableTorchDispatch``, ``_ExcludeDispatchKeyGuard``: outside attacks
that hid ``torch.softmax`` from the mode), or a tensor subclass with its own
``__torch_dispatch__``, whose Python code runs where the mode is suspended.

An answer that reaches past the watch is reported too (``TAMPERED``; counted as a switched-off
watch): during the watched call, a call from the answer's own code (not torch's, the standard
library's or an installed package's, which do so for their own work) of what hands out frames
or any object (``sys._getframe``, ``sys._current_frames``, ``gc.get_objects``,
``get_referrers``, ``get_referents``: the way to the grader's runner and this module: outside
attack, round 7) or runs code built from a string (``exec``, ``eval``, ``compile``); any call
of the standard library's doors to them (``inspect.currentframe``, ``inspect.stack``,
``traceback.walk_stack``, ``timeit``, ``runpy``, ``code.InteractiveInterpreter``), but by an
installed module's own code as it is first imported (sympy's does, on an answer's first
``mha.attention`` call); and any
entry into torch's compilers (``torch.compile``, a function it compiled, dynamo's eval-frame
callback, ``torch.export``, ``torch.jit.script`` and ``trace``; not ``torch.vmap``, which only
asks an export helper whether an export is under way), whose compiled code runs a reference's
bytecode without entering it.

What the watch is: evidence of what ran, seen in the student's own process, hardened against
the attacks above. :func:`observe` and everything it uses are bound when this module is imported
(no name of this module, ``sys`` or ``torch`` is looked up when it runs), ``mha.exercises.serve``
binds ``observe``, and the grader's runner binds its request path, before any student code runs;
the grader counts a reply that did not watch what it asked as a watch switched off. The builtins
they call are bound too (``sorted``, ``set``, ``id``, ``any``...: a cell replaced
``builtins.sorted`` by a filter that dropped the record), and the runner encodes its replies
with a JSON encoder bound then (a cell replaced ``json._default_encoder`` by one that emptied
``"entered"``). These four ways past the watch (round 41) are closed; the watch stays evidence,
not proof. So the grader lets its verdict on a forbidden op decide points only where the code the
student wrote is plain (``mha_grade.plain_code``: no dunders, private names, frames, getattr by a
string, code from strings, or imports beyond a short list of modules): every way past the watch
found so far needs one of these. Where a notebook's code is not plain, an exercise that forbids
ops gets no automatic points: the instructor grades it by hand, told why (issue 35).

A call from the answer's own code of what hands out the watch itself is reported as
``TAMPERED`` too, and raises :class:`WatchNotReadable` instead of handing it out:
``sys.getprofile`` (whose hook's closure holds the record), ``sys.gettrace``,
``threading.getprofile``, and torch's getters of its dispatch modes (``_get_dispatch_stack_at``,
``_len_torch_dispatch_stack``, ``_get_current_dispatch_mode(_stack)``,
``_disable_current_modes``: the mode holds the ops' record; outside attack, round 41, which
cleared both).

What it cannot prove: the answer runs in the same process and may still undo all this (edit the
code or closure cells of these functions, reached from a cell rather than during the call, or a
frame reached through an exception's ``tb_frame``, which no call reveals, and from it the
record itself: the text flags name these); a getter of the hook called by a builtin
(``itertools.starmap(sys.getprofile, [()])``) makes no event, so the hook and its record are
handed out unseen; it may re-implement a reference by editing its bytecode (the
"rebuild" limit: any change to the code, a constant or a global name makes it another function),
or run work in a C thread that holds no Python frame. Nor does it see what an
answer computes with Python's own numbers (``math.exp`` over ``t.tolist()``), or builds from
allowed ops (an exponential from sums and products). So an observation is evidence
that a reference ran; its absence is no proof that the answer is the student's own.
"""

from __future__ import annotations

import _thread
import contextlib
import functools
import gc
import importlib
import inspect
import os
import sys
import sysconfig
import threading
import types

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from mha._old_paths import MOVED

SWITCHED_OFF = "the observation of its calls was switched off"
ESCAPED = "it started a thread or a process, whose work is not observed"
LEFT_TORCH = ("its tensors left torch for NumPy or for Python run per element (Tensor.apply_), "
              "whose operations are not observed")
# frames or the object graph read (the way to the watch and the grader's runner), code run from
# a string, or a function compiled so that torch runs it without entering its code
TAMPERED = ("it reached past the watch (frames, the object graph, code run from a string, or "
            "torch.compile / torch.jit)")


def _escapes() -> set[int]:
    """The builtins that start work in another thread or process (by identity: a ``c_call``
    event of the profile hook names the builtin it calls)."""
    try:
        import _posixsubprocess  # what subprocess forks and execs with (POSIX)
    except ImportError:
        _posixsubprocess = None
    names = [(_thread, "start_new_thread"), (_thread, "start_new"),
             (_thread, "start_joinable_thread"),
             (os, "fork"), (os, "forkpty"), (os, "posix_spawn"), (os, "posix_spawnp"),
             (os, "system"), (_posixsubprocess, "fork_exec"), (torch._C, "fork"),
             (torch._C, "_awaitable")]
    return {id(f) for module, name in names if (f := getattr(module, name, None)) is not None}


_ESCAPES = _escapes()


# Tensor's methods that run a Python callable on each element (``t.apply_(math.exp)``): what it
# computes dispatches no torch op, as NumPy's does not (review 41a)
_PER_ELEMENT = frozenset({"apply_", "map_", "map2_"})


def _exits() -> tuple[set[int], set[int]]:
    """How a tensor leaves torch for another array library: the Python methods of ``Tensor``
    that NumPy and DLPack call (their code, by identity: a ``call`` event) and torch's builtin
    that makes a DLPack capsule (a ``c_call``). ``Tensor.numpy`` is a method of every tensor:
    the hook knows it by name and owner (see :func:`_leaves_torch`)."""
    codes = {id(getattr(torch.Tensor, name).__code__) for name in ("__array__", "__dlpack__")
             if isinstance(getattr(getattr(torch.Tensor, name, None), "__code__", None),
                           types.CodeType)}
    builtins = {id(f) for f in (getattr(torch._C, "_to_dlpack", None),
                                getattr(torch._C, "_to_dlpack_versioned", None),
                                # called unbound: torch.Tensor.numpy(t), Tensor.apply_(t, f)
                                *(getattr(torch._C.TensorBase, name, None)
                                  for name in _PER_ELEMENT | {"numpy"}))
                if f is not None}
    return codes, builtins


_EXIT_CODES, _EXIT_BUILTINS = _exits()
_BUILTIN_METHOD = type(torch.zeros(0).numpy)  # a method of a C type bound to its object


def _leaves_torch(arg: object) -> bool:
    """Whether a ``c_call`` of ``arg`` takes a tensor out of torch: ``t.numpy()``, or hands its
    elements to Python (``t.apply_(f)``, ``map_``, ``map2_``), however it was named (the profile
    hook reports a method of a C type bound to its object). Called from a builtin (``map``,
    ``functools.partial``, ``operator.methodcaller``) it makes no ``c_call``: not seen."""
    return id(arg) in _EXIT_BUILTINS or type(arg) is _BUILTIN_METHOD \
        and (arg.__name__ == "numpy" or arg.__name__ in _PER_ELEMENT) \
        and isinstance(arg.__self__, torch.Tensor)


def _switches() -> tuple[set[int], set[int], set[int]]:
    """What switches a watch off when called during the watched call, by identity: builtins
    that replace the profile hook (a ``c_call`` from any frame but :func:`observe`'s own), the
    builtins of torch that pop, push or set dispatch modes and keys (a ``c_call`` from code
    outside torch: torch's own code pops and pushes modes around its work), and the Python
    functions of ``threading`` that set hooks (their code's ``call``)."""
    hooks = [(sys, "setprofile"), (sys, "settrace"), (sys, "_setprofileallthreads"),
             (sys, "_settraceallthreads"),
             # the profiler that records every op the call dispatches (see observe)
             *((torch._C._autograd, name) for name in (
                 "_enable_profiler_legacy", "_disable_profiler_legacy", "_enable_profiler",
                 "_disable_profiler", "_prepare_profiler", "_enable_record_function"))]
    modes = [(torch._C, name) for name in (
        "_pop_torch_dispatch_stack", "_push_on_torch_dispatch_stack", "_set_dispatch_mode",
        "_unset_dispatch_mode", "_dispatch_tls_set_dispatch_key_excluded",
        "_dispatch_tls_set_dispatch_key_included")]
    python = [getattr(threading, name, None) for name in (
        "setprofile", "settrace", "setprofile_all_threads", "settrace_all_threads")]
    return ({id(f) for module, name in hooks if (f := getattr(module, name, None)) is not None},
            {id(f) for module, name in modes if (f := getattr(module, name, None)) is not None},
            {id(f.__code__) for f in python if isinstance(getattr(f, "__code__", None),
                                                          types.CodeType)})


_HOOK_SWITCHES, _MODE_SWITCHES, _PYTHON_SWITCHES = _switches()


def _peeks() -> tuple[set[int], set[types.CodeType]]:
    """What hands out the watch itself when called during the watched call (outside attack,
    round 41: the answer cleared the record through the profile hook's closure, or the dispatch
    mode's ``found``): the getters of the profile and trace hooks and of torch's dispatch modes
    (builtins by identity; Python functions by their code, from code outside torch)."""
    from torch.utils import _python_dispatch as dispatch

    builtin = [(sys, "getprofile"), (sys, "gettrace"), (torch._C, "_get_dispatch_stack_at"),
               (torch._C, "_len_torch_dispatch_stack"), (torch._C, "_get_dispatch_mode")]
    python = [getattr(module, name, None) for module, names in (
        (threading, ("getprofile", "gettrace")),
        (dispatch, ("_get_current_dispatch_mode", "_get_current_dispatch_mode_stack",
                    "_disable_current_modes", "_pop_mode", "_pop_mode_temporarily")))
        for name in names]
    return ({id(f) for module, name in builtin if (f := getattr(module, name, None)) is not None},
            {code for f in python if f is not None
             for code in _nested(inspect.unwrap(f).__code__)})


class WatchNotReadable(RuntimeError):
    """Raised in the answer that asks for the watch's hook or dispatch mode during the call."""


def _tampers() -> tuple[set[int], set[types.CodeType], tuple[str, ...]]:
    """What reaches the watch's own machinery, or hides code from it, when called during the
    watched call: builtins that hand out frames or any object (the runner and this module are
    one ``f_back`` or ``gc.get_objects()`` away: outside attack, round 7) or run code built from
    a string (by identity: a ``c_call`` names the builtin); the Python functions that do the same
    (``inspect.currentframe``, ``timeit``, ``runpy``, ``code.Interactive*``) or compile code
    torch then runs without entering it (``torch.compile``, ``torch.jit.script``): their code
    objects; and the files of torch's compilers (dynamo's eval-frame callback, export)."""
    import builtins
    import code as interactive
    import gc
    import logging
    import runpy
    import timeit
    import traceback

    builtin = [(sys, "_getframe"), (sys, "_current_frames"), (sys, "_getframemodulename"),
               (gc, "get_objects"), (gc, "get_referrers"), (gc, "get_referents"),
               (builtins, "exec"), (builtins, "eval"), (builtins, "compile")]
    python = [inspect.currentframe, inspect.stack, inspect.trace, logging.currentframe,
              traceback.walk_stack, traceback.walk_tb, timeit.Timer.__init__,
              timeit.timeit, timeit.repeat, runpy.run_path, runpy.run_module,
              interactive.InteractiveInterpreter.runsource,
              interactive.InteractiveInterpreter.runcode, interactive.interact,
              torch.compile, torch.jit.script, torch.jit.trace, torch.jit.trace_module]
    torch_dir = os.path.dirname(torch.__file__) + os.sep
    files = tuple(torch_dir + f for f in (
        "_dynamo" + os.sep + "convert_frame.py", "_dynamo" + os.sep + "symbolic_convert.py",
        "export" + os.sep, "_export" + os.sep))
    return ({id(f) for module, name in builtin if (f := getattr(module, name, None)) is not None},
            {code for f in python for code in _nested(inspect.unwrap(f).__code__)}, files)


# not a compiler: helpers that every torch.vmap / torch.func.vmap call enters (functorch's
# predispatch asks _export/utils.py whether an export is under way: review 41a, an honest vmap
# answer got 0 as tampering); torch.export.export itself enters torch/export/ first
_NOT_COMPILERS = (os.path.join(os.path.dirname(torch.__file__), "_export", "utils.py"),)
# torch's Python decompositions of its ops, built from smaller ops (``torch._refs.softmax``,
# ``torch._decomp.decompositions._softmax`` compute a softmax from exp, sum and div): entering
# one whose name is a forbidden op counts as that op (review 41a)
_DECOMPOSITIONS = tuple(os.path.join(os.path.dirname(torch.__file__), d) + os.sep
                        for d in ("_refs", "_decomp", "_prims"))


# the eval-frame wrapper every function torch.compile returns runs (its cached graph included);
# torch's own code enters other parts of torch._dynamo (optimizers' "disable" wrappers)
_COMPILED_CALL = ("compile_wrapper", os.path.join(os.path.dirname(torch.__file__), "_dynamo",
                                                  "eval_frame.py"))
# installed code calls frame and exec builtins for its own work (an optimizer's first step
# imports torch._dynamo; ``typing.Optional[...]`` reads a frame in typing_extensions): only calls
# from elsewhere (the answer's own code) count; the standard library's doors to them (inspect,
# timeit, runpy, code) count by their own code
_STANDARD_LIBRARY = os.path.dirname(os.__file__) + os.sep
# the libraries' files: torch's, the installed packages', and this package's (mha's code asks
# for a frame of its own only to warn about an old module path at the caller's line)
_LIBRARY_FILES = tuple(dict.fromkeys([
    os.path.dirname(torch.__file__) + os.sep,
    *(sysconfig.get_paths()[key] + os.sep for key in ("purelib", "platlib")),
    os.path.dirname(__file__) + os.sep]))
_OWN_FILES = tuple(dict.fromkeys([*_LIBRARY_FILES, _STANDARD_LIBRARY, "<frozen "]))
# the files a student cannot write (the sandbox binds them read-only): an installed module's own
# code, run as it is first imported, reads frames for itself (sympy's multipledispatch calls
# inspect.currentframe, which torch.broadcast_shapes imports on its first call: review 45, F3)
_INSTALLED_FILES = tuple(f for f in _OWN_FILES if f != "<frozen ")


MAX_NAMES = 64  # names a check may ask to watch; a reply names no more than these


def resolve(name: str) -> object:
    """What ``name`` reaches from ``import mha``: attributes first, as a student writes
    ``mha.attention(...)``, else a module path then attributes (``mha.checks.ch06._partial``)."""
    parts = name.split(".")
    if parts[0] != "mha":
        raise ValueError(f"a reference name starts with 'mha.', got {name!r}")
    if len(parts) > 2 and parts[1] in MOVED:  # an old module path: read at its new one, unwarned
        parts = [*MOVED[parts[1]].split("."), *parts[2:]]
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


def _content():
    # bound at import, itself included: the profile hook calls it (round 41, F4)
    tuple_, isinstance_, type_, code_type = tuple, isinstance, type, types.CodeType

    def content(code: types.CodeType) -> tuple:
        """What ``code`` computes, without its names and line numbers: the bytecode, the
        constants (nested code by its content) and the global and attribute names it reads."""
        return (code.co_code, code.co_names,
                tuple_(content(c) if isinstance_(c, code_type) else (type_(c), c)
                       for c in code.co_consts))

    return content


content = _content()


def _nested(code: types.CodeType) -> list[types.CodeType]:
    return [code, *(inner for const in code.co_consts if isinstance(const, types.CodeType)
                    for inner in _nested(const))]


@functools.lru_cache(maxsize=64)
def watched_codes(names: tuple[str, ...]) -> dict[bytes, list[tuple[tuple, str]]]:
    """The code that ``names`` run, by its bytecode (a bytes object caches its hash, so the
    profile hook's look-up is cheap): each code's :func:`content` and the name it belongs to. A
    name that does not resolve is skipped: the answer's side may hold another version of mha."""
    codes: dict[bytes, list[tuple[tuple, str]]] = {}
    for name in names[:MAX_NAMES]:
        try:
            target = resolve(name)
        except (ImportError, AttributeError, ValueError):
            continue
        module = isinstance(target, types.ModuleType)
        for code in _codes_of(target, set()):  # a module's: named by function
            twins = codes.setdefault(code.co_code, [])
            key = content(code)
            if all(key != known for known, _ in twins):
                twins.append((key, f"{name}.{code.co_name}" if module else name))
    return codes


def op_matches(name: str, words: tuple[str, ...] | list[str], *, _any=any, _len=len,
               _range=range) -> bool:
    """Whether the torch op ``name`` holds one of ``words`` as a whole word between underscores:
    ``softmax`` matches ``_softmax`` and ``_log_softmax``, ``exp`` matches ``exp_`` but not
    ``expand``. A word with a dot names one overload, whole: ``pow.Scalar`` matches the name
    ``pow.Scalar`` only (the mode reports an overload so named), not ``pow`` nor
    ``pow.Tensor_Scalar``."""
    # what it calls, bound at import (the dispatch mode calls it: round 41, F4), and no module
    # that looks up a builtin (re.escape reads ``str``, which a cell may have replaced)
    parts = name.split("_")

    def whole(word: str) -> bool:
        pieces = word.split("_")
        size = _len(pieces)
        return _any(parts[i:i + size] == pieces for i in _range(_len(parts) - size + 1))

    return _any(name == word if "." in word else "." not in name and whole(word)
                for word in words)


_PLAIN_DISPATCH = torch.Tensor.__torch_dispatch__  # torch's "no dispatch of its own"


class _Ops(TorchDispatchMode):
    """Records the torch operations whose name contains a forbidden word, and a tensor subclass
    with its own ``__torch_dispatch__`` (its Python code runs while this mode is suspended)."""

    def __init__(self, words: tuple[str, ...], found: set[str]):
        super().__init__()
        self.words, self.found = words, found
        # the word "complex" forbids complex numbers, by the op's result: with them cos, sin,
        # tan and sinc are exponentials (Euler's formula, cos(i s) + sin(i s) / i = e^s:
        # attack 44), and a product by 1j makes them under an op named "mul"
        self.complex = "complex" in words
        # by op: the name to report, or None (allowed): the profile hook sees fewer calls
        self.forbidden: dict[object, str | None] = {}
        self.dispatching = False  # torch suspends the mode while it runs: see observe's hook

    def _verdict(self, func, _matches=op_matches) -> str | None:
        name = func.overloadpacket.__name__
        overload = f"{name}.{func._overloadname}"
        return (name if _matches(name, self.words)
                else overload if _matches(overload, self.words) else None)

    # what it calls, bound at import, as defaults (round 41, F4)
    def __torch_dispatch__(self, func, types_, args=(), kwargs=None, *, _any=any,
                           _getattr=getattr, _plain=_PLAIN_DISPATCH, _switched=SWITCHED_OFF,
                           _isinstance=isinstance, _tensor=torch.Tensor, _many=(tuple, list)):
        self.dispatching = True
        try:
            forbidden = self.forbidden.get(func, self)  # no name of builtins looked up
            if forbidden is self:
                forbidden = self.forbidden[func] = self._verdict(func)
            if forbidden is not None:
                self.found.add(f"torch op {forbidden}")
            if _any(_getattr(t, "__torch_dispatch__", None) is not _plain for t in types_):
                self.found.add(_switched)
            out = func(*args, **(kwargs or {}))
            if self.complex and _any(_isinstance(t, _tensor) and t.is_complex()
                                     for t in (out if _isinstance(out, _many) else (out,))):
                self.found.add("torch op complex")
            return out
        finally:
            self.dispatching = False


_DISPATCH_CODE = inspect.unwrap(_Ops.__torch_dispatch__).__code__  # torch wraps it
# torch's profiler on the CPU, recording ops' names only (no shapes, memory or stacks)
_RECORD_CONFIG = torch.autograd.profiler_legacy.profile().config()
_TORCH_FILES = os.path.dirname(torch.__file__) + os.sep
_PYTHON_KEYS = (torch._C.DispatchKey.Python, torch._C.DispatchKey.PythonTLSSnapshot)


@functools.cache
def _warm_up_dispatch() -> None:
    """Dispatch one op through a mode: its first dispatch in a process imports modules (it takes
    seconds), which no answer's call should pay, nor the hook see as foreign code."""
    with _Ops((), set()):
        torch.zeros(1).add(1)


def _bound():
    """:func:`observe` and :func:`allow_threads_alive_now`, with everything they use bound now,
    at import, before any student code runs: no name of this module, ``sys`` or ``torch`` is
    looked up when they run, so an answer that rebinds one (``answer_watch.content = ...``,
    ``sys.setprofile = ...``) changes nothing they do (outside attack, round 7, replaced
    ``observe`` itself: ``mha.exercises.serve`` binds it at import too)."""
    # the builtins they call, as locals: a cell that replaces ``builtins.sorted``, ``set`` or
    # ``id`` changes nothing they do (outside attack, round 41, F4)
    import builtins as b
    (id, set, frozenset, tuple, bool, any, str, open, Exception, OSError) = (
        b.id, b.set, b.frozenset, b.tuple, b.bool, b.any, b.str, b.open, b.Exception, b.OSError)
    escapes, threads_started = _ESCAPES, _thread._count
    hook_switches, mode_switches, python_switches = _HOOK_SWITCHES, _MODE_SWITCHES, \
        _PYTHON_SWITCHES
    tamper_calls, tamper_codes, compiler_files = _tampers()
    not_compilers, decompositions, matches = _NOT_COMPILERS, _DECOMPOSITIONS, op_matches
    compiled_name, compiled_file = _COMPILED_CALL
    own_files, installed_files = _OWN_FILES, _INSTALLED_FILES
    gc_enabled, gc_disable, gc_enable = gc.isenabled, gc.disable, gc.enable
    import_call = sys.modules["_frozen_importlib"]._call_with_frames_removed.__code__
    set_profile, get_profile, current_frames = sys.setprofile, sys.getprofile, \
        sys._current_frames
    get_ident = threading.get_ident
    codes_of, content_of, ops = watched_codes, content, _Ops
    warm_up = _warm_up_dispatch
    stack_depth = torch._C._len_torch_dispatch_stack
    excluded = torch._C._dispatch_tls_is_dispatch_key_excluded
    python_key, snapshot_key = _PYTHON_KEYS
    dispatch_code, torch_files = _DISPATCH_CODE, _TORCH_FILES
    standard_library, library_files = _STANDARD_LIBRARY, _LIBRARY_FILES
    record_ops, recorded_ops, recording = (torch._C._autograd._enable_profiler_legacy,
                                           torch._C._autograd._disable_profiler_legacy,
                                           torch._C._autograd._profiler_enabled)
    record_config = _RECORD_CONFIG
    # the hook calls it: a copy that reads a private snapshot of this module's names and the
    # builtins, taken now (a cell that replaces ``builtins.type`` changes nothing it does)
    exit_codes, leaves_torch = _EXIT_CODES, types.FunctionType(
        _leaves_torch.__code__, {**vars(b), **globals()}, "_leaves_torch")
    switched, escaped, tampered, left_torch = SWITCHED_OFF, ESCAPED, TAMPERED, LEFT_TORCH
    infinity = b.float("inf")
    peek_calls, peek_codes = _peeks()
    not_readable, context_file = WatchNotReadable, contextlib.__file__
    list_dir, get_pid, stat_of, get_uid = os.listdir, os.getpid, os.stat, os.geteuid
    # None until the grader's runner sets them: threads beside an answer are not watched
    baseline: dict[str, object] = {"threads": None, "count": None, "processes": None}

    def allow_threads_alive_now() -> None:
        """Report every Python thread alive beside an answer from now on, except those alive
        now, which are the course's own: the grader's runner calls it once its shell has
        started, before any student code runs."""
        baseline["threads"] = frozenset(current_frames())
        baseline["count"] = threads_started()  # started by _thread, whatever name called it

    def processes() -> frozenset[str]:
        """The processes of this PID namespace (the sandbox's ``/proc``), by pid."""
        try:
            return frozenset(name for name in list_dir("/proc") if name.isdigit())
        except OSError:
            return frozenset()

    def working(pid: str) -> bool:
        """Whether process ``pid`` is there, the answer's (its user's: without a PID namespace
        of its own, Gradescope's, the answer runs as a user of its own) and not a zombie, which
        does no work."""
        try:
            if stat_of(f"/proc/{pid}").st_uid != get_uid():
                return False
            with open(f"/proc/{pid}/stat", "rb") as status:
                state = status.read().rpartition(b")")[2].split()[:1]
        except OSError:  # gone
            return False
        return state != [b"Z"] and state != [b"X"]

    def allow_processes_alive_now() -> None:
        """Report every process of the sandbox alive beside an answer from now on, except those
        alive now: the grader's runner calls it before any student code runs, where every other
        process of its user is the answer's (the sandbox's own PID namespace, or a user of its
        own): a helper process forked by a cell before the check, fed through a pipe, did the
        answer's work unseen (outside attack, round 41)."""
        baseline["processes"] = processes()

    def forget_threads() -> None:
        """Watch no thread or process beside an answer again (as in a student's notebook): for
        tests."""
        baseline["threads"] = baseline["count"] = baseline["processes"] = None

    def strangers() -> bool:
        """Whether a Python thread runs beside the caller that was not there before any student
        code (see the module's docstring)."""
        known, alive = baseline["threads"], baseline["processes"]
        return known is not None and bool(set(current_frames()) - known - {get_ident()}) or \
            alive is not None and any(working(pid) for pid in
                                      processes() - alive - {str(get_pid())})

    def observe(call, references: tuple[str, ...], forbidden_ops: tuple[str, ...]):
        """``call()`` watched for ``references`` and ``forbidden_ops``: (what it returned, or
        the exception it raised; the set of what it entered: reference names, ``"torch op
        NAME"``, :data:`SWITCHED_OFF`, :data:`ESCAPED`, :data:`TAMPERED`)."""
        found: set[str] = set()
        codes = codes_of(tuple(references))
        started = baseline["count"]
        started_before = started if started is not None else infinity
        previous = get_profile()
        mode = ops(tuple(forbidden_ops), found) if forbidden_ops else None
        if mode is not None:
            warm_up()
        depth = stack_depth()

        def switched_off() -> bool:
            """Whether the ops' watch is off: our mode not on top of the stack, or torch's
            Python dispatch keys excluded."""
            return stack_depth() != depth + 1 or excluded(python_key) or excluded(snapshot_key)

        def foreign_caller(frame) -> bool:
            """Whether the answer's own code called ``frame`` (through ``with``: contextlib)."""
            caller = frame.f_back
            while caller is not None and caller.f_code.co_filename == context_file:
                caller = caller.f_back
            return caller is not None and not caller.f_code.co_filename.startswith(own_files)

        def torch_context(frame) -> bool:
            """Whether ``frame`` is contextlib's, or a named tuple's (its code is made from a
            string), run by torch's own code (a ``with`` statement, ``forward_ad``'s result)."""
            caller = frame
            while caller is not None and caller.f_code.co_filename in (context_file, "<string>"):
                caller = caller.f_back
            return caller is not frame and caller is not None and \
                caller.f_code.co_filename.startswith(torch_files)

        def library_asked(frame) -> bool:
            """Whether ``frame``, a door of the standard library, was called by a library's
            own code (torch's, an installed package's, mha's) through the standard library
            only, which hands no frame to the answer: ``torch.manual_seed`` keeps the stack of
            its call (traceback.format_stack: attack 49), matplotlib logs a warning (logging
            finds its caller's frame) and pyparsing reads its caller's line (attack 50):
            honest answers read as reaching past the watch."""
            if not frame.f_code.co_filename.startswith(standard_library):
                return False  # torch.compile and torch.jit: never a library's business here
            caller = frame.f_back
            while caller is not None and caller.f_code.co_filename.startswith(standard_library):
                caller = caller.f_back
            return caller is not None and caller.f_code.co_filename.startswith(library_files)

        def importing(frame) -> bool:
            """Whether ``frame`` was called by an installed module's own code as the import
            system runs it (every caller up to the import is installed code), not by the
            answer's."""
            caller = frame.f_back
            while caller is not None and caller.f_code.co_filename.startswith(installed_files):
                caller = caller.f_back
            return caller is not None and caller is not frame.f_back and \
                caller.f_code is import_call

        def hook(frame, event, arg):
            if event != "call" and event != "c_call":  # an op starts with a call (or none)
                return
            code = frame.f_code
            # while the mode handles an op torch suspends it: code of the answer's own running
            # then (a finalizer the garbage collector calls, a generator's finally: attack 47)
            # runs ops unseen
            if mode is not None and mode.dispatching and event == "call" and \
                    not code.co_filename.startswith(own_files):
                found.add(switched)
            # torch itself suspends the mode while it dispatches an op to it, running only its
            # own Python code and the mode's, and switches the modes off to print a tensor
            # (torch._tensor_str, through contextlib and a named tuple: an honest print(t) read
            # as switched off, attack 48); the profiler still records every op run meanwhile
            if mode is not None and not mode.dispatching and switched_off() \
                    and code is not dispatch_code and not code.co_filename.startswith(torch_files) \
                    and not torch_context(frame):
                found.add(switched)
            if event == "c_call":  # a switch called, even if switched back on before the end
                if id(arg) in hook_switches and code is not observe_code or id(arg) in \
                        mode_switches and not code.co_filename.startswith(torch_files):
                    found.add(switched)
                elif id(arg) in tamper_calls and not code.co_filename.startswith(own_files):
                    found.add(tampered)
                elif id(arg) in peek_calls and not code.co_filename.startswith(own_files):
                    found.add(tampered)  # and the hook or the mode is not handed out
                    raise not_readable("the answer watch's hooks are not readable during a call")
                if id(arg) in escapes or threads_started() > started_before:
                    found.add(escaped)
                if mode is not None and leaves_torch(arg):
                    found.add(left_torch)
                return
            if code in peek_codes and foreign_caller(frame):
                found.add(tampered)
                raise not_readable("the answer watch's dispatch mode is not readable during a call")
            if id(code) in python_switches:
                found.add(switched)
            elif mode is not None and id(code) in exit_codes:
                found.add(left_torch)
            elif mode is not None and code.co_filename.startswith(decompositions):
                if matches(code.co_name, mode.words):
                    found.add(f"torch op {code.co_name}")
            elif code in tamper_codes and not importing(frame) and not library_asked(frame) or \
                    code.co_filename.startswith(compiler_files) and \
                    code.co_filename not in not_compilers or (
                    code.co_name == compiled_name and code.co_filename == compiled_file):
                found.add(tampered)
            twins = codes.get(code.co_code)
            if twins is not None:
                key = content_of(code)
                found.update(name for known, name in twins if known == key)

        if strangers():
            found.add(escaped)  # a worker started before the call may do its work
        outcome: object = None
        # no collection of cycles during the call: a finalizer it runs (a generator's finally
        # in a cycle) runs wherever an allocation triggers it, inside the hook or the mode's
        # dispatch too, where neither sees its ops (attack 47); one freed by its last reference
        # runs in the answer's own code, watched
        collecting = gc_enabled()
        gc_disable()
        # every op the call dispatches, recorded by torch's profiler below the dispatch
        # modes: an op run where the mode is suspended (a weak reference's callback, or an
        # object's __del__, made of builtins, run by a kernel that frees a storage: attack 48)
        # is recorded all the same
        profiled = mode is not None
        if profiled:
            if recording():  # another profiler on: the ops cannot be recorded
                found.add(switched)
                profiled = False
            else:
                record_ops(record_config)
        try:
            if mode is not None:
                mode.__enter__()
            set_profile(hook)
            try:
                outcome = call()
            except Exception as error:  # the answer's own error: reported, with what it entered
                outcome = error
        finally:
            if strangers():
                found.add(escaped)
            if get_profile() is not hook:
                found.add(switched)
            set_profile(previous)
            if collecting:
                gc_enable()
            if mode is not None:
                if switched_off():
                    found.add(switched)
                if stack_depth() == depth + 1:
                    mode.__exit__(None, None, None)
            if profiled:
                if recording():
                    names = {event.name() for events in recorded_ops() for event in events}
                    if not any(f.startswith("torch op ") for f in found):  # the mode's names
                        found.update(f"torch op {op}" for op in
                                     {name.rpartition("::")[2] for name in names}
                                     if op and matches(op, mode.words))
                else:
                    found.add(switched)
        return outcome, found

    observe_code = observe.__code__  # its own sys.setprofile(previous) switches nothing off
    return observe, allow_threads_alive_now, allow_processes_alive_now, forget_threads


observe, allow_threads_alive_now, allow_processes_alive_now, _forget_threads = _bound()
