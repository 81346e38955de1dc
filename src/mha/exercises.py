"""Feedback for exercises: a check says right or wrong and why, and never shows the solution.

A chapter's checks live in ``mha.checks.chNN``. Each is a function made with ``exercise_check``:
it takes the student's answer (usually a function), raises ``Wrong`` with a helpful message when
the answer is wrong, and returns nothing when it is right. Calling a check never stops the
notebook: it prints one line, the verdict.

A check never touches the student's answer directly. It talks to it through a *channel*: calling
``answer(x)`` sends ``x`` as plain data (numbers, nested lists, tensors as dtype + shape + a flat
list of values; JSON, never pickle) and gets plain data back, decoded here into ordinary
``torch.Tensor``/``tuple``/``list``/``dict`` values; an object that is not plain data (a module
the student built) comes back as a ``Ref`` whose attributes and calls go through the channel in
the same way. In a notebook the channel is in-process (:class:`LocalChannel`). Under grading
(mha_grade) the answer lives in a sandboxed process and the channel is a pipe to it: the
check, its reference and its verdict run in the grader's own process, and nothing the student's
code does (patching ``torch``, ``sys.stdout`` or this module, returning a tensor subclass) can
reach them. The same check code runs in both places.

Either way the answer works on copies: arguments cross as plain data, and nothing the answer does
to them is read back into the check's values (a check computes its reference from its own
copies, before it calls the answer). A check that wants to see an in-place change asks for it
with ``call_seeing_inputs`` and gets the changed arguments as new values.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib
import io
import json
import math
import numbers
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import torch


class Wrong(Exception):
    """Raised by a check when the answer is wrong; the message says what was expected."""


class ProtocolError(Exception):
    """Data from the other side of a channel is not plain data of the expected form."""


class AnswerRaised(Exception):  # noqa: N818 (it reports what the answer raised)
    """The student's answer raised an exception (on the other side of the channel)."""

    def __init__(self, types: list[str], message: str):
        super().__init__(message)
        self.types = types
        self.name = types[0].rsplit(".", 1)[-1] if types else "Exception"
        self.message = message


@dataclass(frozen=True)
class PartResult:
    """The verdict on one part of a check (see ``exercise_check``)."""

    name: str
    points: float
    max_points: float
    hidden: bool  # a grading-only part: never run in a student's notebook
    status: str  # "correct", "wrong", "not done", "error"
    message: str


@dataclass(frozen=True)
class Result:
    exercise: str
    points: float  # an int when whole; parts may give quarters
    max_points: float
    status: str  # "correct", "wrong", "not done", "error"
    message: str
    parts: tuple[PartResult, ...] = ()  # the parts that ran, when the check has several
    not_run: float = 0  # points of hidden parts that a notebook does not run
    # what the answer's calls were seen to enter, among the check's reference names (and
    # mha.answer_watch.SWITCHED_OFF): for the instructor's flags, no effect on the points
    entered: tuple[str, ...] = ()

    def _ipython_display_(self) -> None:
        """The check has printed its verdict already: a notebook shows nothing more."""


# ---------------------------------------------------------------------------------------------
# Hidden inputs: under grading, checks draw their random inputs from a seed the grader picks.

_GRADING_SEED: int | None = None


def seed(default: int) -> int:
    """The seed of a check's random inputs: ``default`` in a notebook, a hidden one in grading."""
    if _GRADING_SEED is None:
        return default
    digest = hashlib.sha256(f"{_GRADING_SEED}:{default}".encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 2


@contextlib.contextmanager
def seed_of_call(call: str) -> Iterator[None]:
    """Within it, the grading seed of one call of a check (``call``: the check and the call's
    number in the notebook): every call under grading draws other inputs, so an answer that
    records the inputs of one call and has a cell outside the watched call compute their
    results (with what the exercise forbids) has nothing to look up at the next (attack 50:
    1.2 full marks, torch.softmax in a top-level cell). Nothing changes outside grading."""
    global _GRADING_SEED
    base = _GRADING_SEED
    if base is not None:
        digest = hashlib.sha256(f"{base}:call:{call}".encode()).digest()
        _GRADING_SEED = int.from_bytes(digest[:8], "little") >> 2
    try:
        yield
    finally:
        _GRADING_SEED = base


def set_grading_seed(value: int | None) -> None:
    """Called by the grader (in its own process) once per grading run."""
    global _GRADING_SEED
    _GRADING_SEED = value


def grading() -> bool:
    """True in the grader's process (it has set a seed): hidden parts of checks run there only.

    A student's notebook never has a grading seed, so its checks skip the hidden parts and say
    how many points they are worth. (The checks' source is public: "hidden" means that no
    notebook runs them or shows their messages, and their inputs come from the hidden seed.)
    """
    return _GRADING_SEED is not None


# ---------------------------------------------------------------------------------------------
# Plain data: what crosses a channel.

MAX_ELEMENTS = 4_000_000  # numbers in one message
MAX_DEPTH = 32
MAX_STRING = 10_000
DTYPES = {name: getattr(torch, name) for name in (
    "float16", "bfloat16", "float32", "float64", "complex64", "complex128", "uint8", "int8",
    "int16", "int32", "int64", "bool")}


def type_names(value: object) -> list[str]:
    return [f"{c.__module__}.{c.__qualname__}" for c in type(value).__mro__]


def encode(value: object, table: list | None = None, _depth: int = 0, _count: list | None = None):
    """``value`` as JSON-able plain data; objects that are not data go into ``table`` as refs."""
    count = [0] if _count is None else _count
    if _depth > MAX_DEPTH:
        raise ProtocolError("nested too deeply")
    if value is None or isinstance(value, bool):
        return None if value is None else bool(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, numbers.Integral):  # numpy's integers (np.int64): a number is a number
        return int(value)
    if isinstance(value, numbers.Real) and not isinstance(value, torch.Tensor):
        return float(value)  # numpy's float32 and the like
    if isinstance(value, str):
        return str(value)[:MAX_STRING]
    if isinstance(value, Ref):  # an object on the answer's side, sent back to it
        return {"ref": value._ref, "types": []}
    if isinstance(value, torch.Tensor):
        with torch._C.DisableTorchFunctionSubclass():  # the data, not what a subclass says
            tensor = torch.Tensor.detach(value).as_subclass(torch.Tensor).cpu()
            name = str(tensor.dtype).removeprefix("torch.")
            if name not in DTYPES:
                raise ProtocolError(f"a tensor of dtype {name}")
            count[0] += tensor.numel()
            if count[0] > MAX_ELEMENTS:
                raise ProtocolError("too many numbers")
            flat = tensor.reshape(-1)
            if tensor.is_complex():
                flat = torch.view_as_real(flat).reshape(-1)
            if name == "bfloat16" or name == "float16":
                flat = flat.double()
            return {"tensor": name, "shape": list(tensor.shape), "data": flat.tolist()}
    if isinstance(value, tuple | list):
        count[0] += len(value)
        items = [encode(v, table, _depth + 1, count) for v in value]
        return {"tuple": items} if isinstance(value, tuple) else items
    if isinstance(value, dict):
        count[0] += len(value)
        return {"dict": [[encode(k, table, _depth + 1, count), encode(v, table, _depth + 1, count)]
                         for k, v in value.items()]}
    if table is None:
        raise ProtocolError(f"cannot send a {type(value).__name__}")
    table.append(value)
    return {"ref": len(table) - 1, "types": type_names(value)[:20]}


def decode(plain: object, make_ref: Callable[[int, list[str]], object], _depth: int = 0):
    """Plain data back to values; strict: anything of another form raises ``ProtocolError``."""
    if _depth > MAX_DEPTH:
        raise ProtocolError("nested too deeply")
    if plain is None or type(plain) in (bool, int, float):
        return plain
    if type(plain) is str:
        return plain[:MAX_STRING]
    if type(plain) is list:
        return [decode(p, make_ref, _depth + 1) for p in plain]
    if type(plain) is not dict or len(plain) not in (1, 2, 3):
        raise ProtocolError("unexpected data")
    if set(plain) == {"tuple"} and type(plain["tuple"]) is list:
        return tuple(decode(p, make_ref, _depth + 1) for p in plain["tuple"])
    if set(plain) == {"dict"} and type(plain["dict"]) is list:
        out = {}
        for pair in plain["dict"]:
            if type(pair) is not list or len(pair) != 2:
                raise ProtocolError("unexpected dict entry")
            key = decode(pair[0], make_ref, _depth + 1)
            if not isinstance(key, str | int | float | bool | tuple | type(None)):
                raise ProtocolError("unexpected dict key")
            out[key] = decode(pair[1], make_ref, _depth + 1)
        return out
    if set(plain) == {"tensor", "shape", "data"}:
        return _tensor(plain)
    if (set(plain) == {"ref", "types"} and type(plain["ref"]) is int
            and type(plain["types"]) is list):
        types = [t[:200] for t in plain["types"][:20] if type(t) is str]
        return make_ref(plain["ref"], types)
    raise ProtocolError("unexpected data")


def _tensor(plain: dict) -> torch.Tensor:
    name, shape, data = plain["tensor"], plain["shape"], plain["data"]
    if name not in DTYPES or type(shape) is not list or type(data) is not list:
        raise ProtocolError("unexpected tensor")
    if len(shape) > 16 or not all(type(s) is int and 0 <= s <= MAX_ELEMENTS for s in shape):
        raise ProtocolError("unexpected tensor shape")
    dtype = DTYPES[name]
    numel = math.prod(shape)
    if numel > MAX_ELEMENTS or len(data) != numel * (2 if dtype.is_complex else 1):
        raise ProtocolError("tensor data does not match its shape")
    if dtype == torch.bool:
        if not all(type(x) is bool for x in data):
            raise ProtocolError("unexpected bool data")
        return torch.tensor(data, dtype=torch.bool).reshape(shape)
    if dtype.is_floating_point or dtype.is_complex:
        if not all(type(x) in (int, float) for x in data):
            raise ProtocolError("unexpected float data")
        flat = torch.tensor(data, dtype=torch.float64)
        if dtype.is_complex:
            flat = torch.view_as_complex(flat.reshape(-1, 2)).to(dtype)
        return flat.to(dtype).reshape(shape)
    if not all(type(x) is int and -2**63 <= x < 2**63 for x in data):
        raise ProtocolError("unexpected integer data")
    return torch.tensor(data, dtype=torch.int64).to(dtype).reshape(shape)


def dumps(message: dict) -> bytes:
    return json.dumps(message, allow_nan=True, separators=(",", ":")).encode() + b"\n"


def loads(line: bytes) -> dict:
    try:
        message = json.loads(line)
    except (ValueError, RecursionError) as error:
        raise ProtocolError("not JSON") from error
    if type(message) is not dict:
        raise ProtocolError("not a message")
    return message


# ---------------------------------------------------------------------------------------------
# The answer's side: what the sandbox (or the notebook itself) does with a request.

def _local_value(plain, table: list):
    def resolve(ref: int, _types):
        if not 0 <= ref < len(table):
            raise ProtocolError("unknown ref")
        return table[ref]

    return decode(plain, resolve)


def _serve(request: dict, table: list) -> dict:
    try:
        op = request.get("op")
        if op == "build":  # an object the check needs on the answer's side, made by mha.checks
            module, _, name = str(request.get("function", "")).partition(":")
            if not module.startswith("mha.checks.") or not name.isidentifier():
                raise ProtocolError("builds come from mha.checks only")
            function = getattr(importlib.import_module(module), name)
            args = _local_value(request.get("args", []), table)
            return {"value": encode(function(*args), table)}
        target = table[int(request.get("target", -1))] if 0 <= int(
            request.get("target", -1)) < len(table) else None
        if target is None:
            raise ProtocolError("unknown target")
        if op == "call":
            args = _local_value(request.get("args", []), table)
            kwargs = _local_value(request.get("kwargs", {"dict": []}), table)
            if type(args) is not list or type(kwargs) is not dict:
                raise ProtocolError("unexpected arguments")
            result = target(*args, **{str(k): v for k, v in kwargs.items()})
            # the arguments after the call too: a check may ask what the answer did to its
            # copies (``call_seeing_inputs``); they never flow back into the check's own values
            return {"value": encode(result, table), "args": encode(args, table)}
        if op == "getattr":
            return {"value": encode(getattr(target, str(request.get("name"))), table)}
        if op == "convert":
            kind = request.get("kind")
            functions = {"float": float, "int": int, "bool": bool, "len": len, "repr": repr,
                         "list": list}
            if kind not in functions:
                raise ProtocolError("unknown conversion")
            value = functions[kind](target)
            return {"value": encode(value[:200] if kind == "repr" else value, table)}
        if op == "getitem":
            return {"value": encode(target[_local_value(request.get("key"), table)], table)}
        raise ProtocolError("unknown request")
    except Exception as error:  # the answer raised: say what, in a few words
        return {"raised": {"types": type_names(error)[:20], "message": str(error)[:300]}}


def _bound_serve():
    """``serve``, with the watch's ``observe`` and this module's ``_serve`` bound now, at import:
    an answer that rebinds ``mha.answer_watch.observe`` (outside attack, round 7: reached by
    ``pkgutil.resolve_name``) changes nothing the grader's runner, which took ``serve`` before
    any student code, then does."""
    import builtins as b

    from mha.answer_watch import MAX_NAMES, observe

    serve_plain = _serve
    # the builtins it calls, as locals: a cell that replaces ``builtins.sorted`` by a filter
    # changes nothing it says (outside attack, round 41, F4)
    sorted, list, tuple, str, type, dict = b.sorted, b.list, b.tuple, b.str, b.type, b.dict

    def serve(request: dict, table: list) -> dict:
        """Carry out one request on the answer's side; the reply is plain data.

        A request may name what to watch for while the answer's code runs (``"watch"``: the
        check's reference names and forbidden torch ops, see ``mha.answer_watch``); the reply
        then says what the answer entered (``"entered"``), also when it raised, and what it
        watched for (``"watched"``: the check counts a reply without them as a watch switched
        off)."""
        watch = request.get("watch") if request.get("op") != "build" else None
        if type(watch) is not dict:
            return serve_plain(request, table)

        def names(key: str) -> tuple[str, ...]:
            listed = watch.get(key)
            return tuple(str(n)[:200] for n in listed[:MAX_NAMES]) if type(listed) is list \
                else ()

        references, ops = names("references"), names("ops")
        reply, entered = observe(lambda: serve_plain(request, table), references, ops)
        if type(reply) is not dict:  # _serve's ``except Exception`` missed (a replaced
            # builtins.Exception): the answer's error, whose ``__or__`` may be its own
            reply = {"raised": {"types": ["builtins.RuntimeError"], "message": "no reply"}}
        return reply | {"entered": sorted(entered)[:MAX_NAMES],
                        "watched": {"references": list(references), "ops": list(ops)}}

    return serve


serve = _bound_serve()


# ---------------------------------------------------------------------------------------------
# The check's side.

class Channel:
    """The check's end of a channel: ``request`` sends plain data and returns the reply."""

    # what the check asks the answer's side to watch for (``mha.answer_watch``), and what the
    # answer's side said its calls entered, among those names (set by ``evaluate``)
    watch: dict | None = None
    entered: set | None = None

    def request(self, message: dict) -> dict:
        raise NotImplementedError

    def ask(self, message: dict):
        if self.watch is not None and message.get("op") != "build":
            message = message | {"watch": self.watch}
        reply = self.request(message)
        if type(reply) is not dict:
            raise ProtocolError("not a reply")
        if self.entered is not None and "watch" in message:
            if type(reply.get("entered")) is list and _watched_all(reply, self.watch):
                self.entered.update(_known(reply["entered"], self.watch))
            elif "raised" not in reply:  # a value computed unwatched (outside attack, round 7:
                # the request stripped of its watch); an error (a timeout) earns nothing anyway
                from mha.answer_watch import SWITCHED_OFF

                self.entered.add(SWITCHED_OFF)
        if "raised" in reply:
            raised = reply["raised"]
            if type(raised) is not dict:
                raise ProtocolError("unexpected error report")
            types = [t[:200] for t in raised.get("types", [])[:20] if type(t) is str]
            message = raised.get("message", "")
            raise AnswerRaised(types, _clean(message if type(message) is str else ""))
        if "value" not in reply:
            raise ProtocolError("a reply without a value")
        return reply

    def value(self, plain):
        return decode(plain, self.ref)

    def ref(self, ref: int, types: list[str]) -> Ref:
        return _ref_class(types[0] if types else "object")(self, ref, types)


def _watched_all(reply: dict, watch: dict | None) -> bool:
    """Whether the reply says its side watched for all that ``watch`` asked (a request stripped
    of its watch, or of its ops, on the way comes back without them)."""
    from mha.answer_watch import MAX_NAMES

    watched = reply.get("watched")
    if type(watched) is not dict:
        return False
    return all(watched.get(key) == [str(n)[:200] for n in (watch or {}).get(key, [])[:MAX_NAMES]]
               for key in ("references", "ops"))


def _known(names: list, watch: dict | None) -> set[str]:
    """The names the answer's side reported that are among those watched for (it may send
    anything: only these mean something)."""
    from mha.answer_watch import ESCAPED, LEFT_TORCH, SWITCHED_OFF, TAMPERED, op_matches

    watch = watch or {}
    words, references = watch.get("ops", []), watch.get("references", [])
    return {n for n in names[:64] if type(n) is str and (
        any(n == r or n.startswith(f"{r}.") for r in references)
        or n in (SWITCHED_OFF, ESCAPED, TAMPERED) or n == LEFT_TORCH and words
        or n.startswith("torch op ") and op_matches(n.removeprefix("torch op "), words))}


def _clean(text: str, limit: int = 300) -> str:
    """One line of printable text, at most ``limit`` characters."""
    return " ".join("".join(c if c.isprintable() else " " for c in text).split())[:limit]


class LocalChannel(Channel):
    """In the notebook: the answer is in this process; data still goes through JSON."""

    def __init__(self, answer: object):
        self.table = [answer]

    def request(self, message: dict) -> dict:
        return loads(dumps(serve(loads(dumps(message)), self.table)))

    def answer(self) -> Ref:
        return self.ref(0, type_names(self.table[0]))


class Ref:
    """An object on the answer's side: attributes, calls and conversions go through the channel.

    ``type(ref).__name__`` is the remote class's name (so messages read as before), and
    ``is_instance(ref, cls)`` compares the remote class names, which a student controls: a check
    never gives points for a type, only for the values it then computes.
    """

    __slots__ = ("_channel", "_ref", "_types")

    def __init__(self, channel: Channel, ref: int, types: list[str]):
        object.__setattr__(self, "_channel", channel)
        object.__setattr__(self, "_ref", ref)
        object.__setattr__(self, "_types", types)

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        reply = self._channel.ask({"op": "getattr", "target": self._ref, "name": name})
        return self._channel.value(reply["value"])

    def __call__(self, *args, **kwargs):
        return _call(self, args, kwargs)[0]

    def _convert(self, kind: str):
        return self._channel.value(self._channel.ask(
            {"op": "convert", "target": self._ref, "kind": kind})["value"])

    def __float__(self):
        value = self._convert("float")
        if type(value) is not float:
            raise ProtocolError("float() gave no float")
        return value

    def __int__(self):
        value = self._convert("int")
        if type(value) is not int:
            raise ProtocolError("int() gave no int")
        return value

    def __bool__(self):
        return bool(self._convert("bool") is True)

    def __len__(self):
        value = self._convert("len")
        if type(value) is not int or value < 0:
            raise ProtocolError("len() gave no length")
        return value

    def __iter__(self):
        value = self._convert("list")
        if type(value) is not list:
            raise ProtocolError("list() gave no list")
        return iter(value)

    def __getitem__(self, key):
        return self._channel.value(self._channel.ask(
            {"op": "getitem", "target": self._ref, "key": encode(key)})["value"])

    def __repr__(self):
        return f"<{type(self).__name__}>"


@functools.lru_cache(maxsize=256)
def _ref_class(qualified: str) -> type:
    name = "".join(c for c in qualified.rsplit(".", 1)[-1] if c.isalnum() or c == "_")[:60]
    return type(name or "object", (Ref,), {"__slots__": ()})


def _call(ref: Ref, args: tuple, kwargs: dict) -> tuple[object, object]:
    """Call ``ref`` on copies of ``args``: (what it returned, its arguments after the call).

    The arguments are sent as plain data, so the answer receives copies that it alone holds: what
    it does to them (``zero_()``, ``fill_()``, clearing a list) never reaches the check's own
    values, from which the check computes its reference.
    """
    channel = object.__getattribute__(ref, "_channel")
    reply = channel.ask({"op": "call", "target": object.__getattribute__(ref, "_ref"),
                         "args": encode(list(args)), "kwargs": encode(kwargs)})
    after = channel.value(reply["args"]) if "args" in reply else None
    return channel.value(reply["value"]), after


def call_seeing_inputs(answer: Ref, *args, **kwargs) -> tuple[object, object]:
    """``answer(*args, **kwargs)`` and the list of its arguments as the answer left them.

    For a check that tells a student their function changed its input in place: the arguments
    come back as new values (``None`` if the answer's side did not send them), never written
    into the check's own.
    """
    return _call(answer, args, kwargs)


def is_instance(value: object, cls: type) -> bool:
    """``isinstance`` that also answers for a ``Ref`` (by its remote class names)."""
    if isinstance(value, Ref):
        return f"{cls.__module__}.{cls.__qualname__}" in value._types
    return isinstance(value, cls)


class Built:
    """An object a check makes on the answer's side with a function of ``mha.checks``."""

    def __init__(self, function: Callable, *args):
        self.function = f"{function.__module__}:{function.__name__}"
        self.args = args


def build(answer: Ref, built: Built) -> Ref:
    """Make ``built`` on ``answer``'s side of the channel; returns a ``Ref`` to pass to it."""
    channel = answer._channel
    value = channel.value(channel.ask({"op": "build", "function": built.function,
                                       "args": encode(list(built.args))})["value"])
    if not isinstance(value, Ref):
        raise ProtocolError("a build gave no object")
    return value


# ---------------------------------------------------------------------------------------------
# Checks

def _run(checker: Callable, answer: Ref) -> tuple[str, str]:
    """Run one checker on ``answer``: (status, message)."""
    try:
        checker(answer)
    except Wrong as wrong:
        return "wrong", str(wrong)
    except AnswerRaised as raised:
        if "builtins.NotImplementedError" in raised.types:
            return "not done", "not done yet: the answer still raises NotImplementedError"
        return "error", f"your answer raised {raised.name}: {raised.message}"
    except ProtocolError as error:
        return "error", f"your answer gave something the check cannot read ({error})"
    except Exception as error:  # the check could not use what the answer gave
        return "error", f"your answer raised {type(error).__name__}: {_clean(str(error), 200)}"
    return "correct", "correct"


def _written_name(op: str) -> str:
    """A function the student can have called for torch's op ``op``: ``torch.special.erfcx`` for
    ``special_erfcx``, else ``torch.op`` if it exists, else ``torch.nn.functional.op`` (softplus,
    elu), else "torch's op operation" (an op such as safe_softmax that no public function is
    named after: review 41a)."""
    import torch.nn.functional
    import torch.special

    if op == "complex":  # any op whose result is complex (mha.answer_watch)
        return "complex numbers (with them cos and sin are exponentials)"
    if "scaled_dot_product" in op:  # a fused kernel: _scaled_dot_product_flash_attention_...
        return "torch.nn.functional.scaled_dot_product_attention"
    if any(word in op.split("_") for word in ("rnn", "lstm", "gru")):  # mkldnn_rnn_layer...
        return "a recurrent layer (torch.nn.LSTM, GRU or RNN)"
    if op.startswith("special_") and hasattr(torch.special, op.removeprefix("special_")):
        return f"torch.special.{op.removeprefix('special_')}"
    if hasattr(torch, op):
        return f"torch.{op}"
    if hasattr(torch.nn.functional, op):
        return f"torch.nn.functional.{op}"
    return f"torch's {op} operation"


def _watched_run(checker: Callable, part: Callable, answer: Ref) -> tuple[str, str, set[str]]:
    """``_run(part, answer)`` with the answer's calls watched for what ``checker`` names (its
    ``watch``: reference names, forbidden torch ops): (status, message, what was entered). A
    forbidden op, or a watch the answer switched off, makes the part wrong: the exercise's rule
    is part of what it asks."""
    from mha.answer_watch import ESCAPED, LEFT_TORCH, SWITCHED_OFF, TAMPERED

    watch = getattr(checker, "watch", None)
    channel = object.__getattribute__(answer, "_channel")
    channel.watch, channel.entered = watch, set()
    try:
        status, message = _run(part, answer)
        entered = set(channel.entered)
    finally:
        channel.watch, channel.entered = None, None
    broke = sorted(e.removeprefix("torch op ") for e in entered if e.startswith("torch op "))
    # as the student wrote it: aten._softmax is torch.softmax, pow.Scalar is torch.pow (or **)
    written = sorted({_written_name(op.split('.')[0].lstrip('_')) for op in broke},
                     key=lambda name: (name.startswith("torch's"), name))  # functions first
    if watch and watch.get("ops") and status != "not done" and (
            broke or {SWITCHED_OFF, ESCAPED, TAMPERED, LEFT_TORCH} & entered):
        status, message = "wrong", (
            f"the exercise forbids what your answer ran: {', '.join(written)[:200]} (or a function "
            f"that calls it)" if broke
            else "the exercise forbids some operations, and your answer ran work in another "
                 "thread or process, where they cannot be seen" if ESCAPED in entered
            else "the exercise forbids some operations, and your answer took tensors out of "
                 "torch into NumPy (numpy.exp(t), t.numpy(), scipy) or ran Python on each "
                 "element (t.apply_(f)), where they cannot be seen" if LEFT_TORCH in entered
            else "the exercise forbids some operations, and your answer read frames or the "
                 "object graph, ran code from a string or compiled code (torch.compile, "
                 "torch.jit), which hides them" if TAMPERED in entered
            else "the exercise forbids some operations, and your answer switched off the "
                 "watch on them")
    return status, message, {e for e in entered if not e.startswith("torch op ")}


PHASES = ("all", "shown", "hidden")


def evaluate(checker: Callable, exercise: str, points: float, answer: Ref,
             phase: str = "all") -> Result:
    """Run ``checker`` on ``answer`` (a ``Ref``) and turn what happens into a ``Result``.

    A checker made by ``exercise_check`` with several parts (a ``Checker``) is run part by
    part: each part's points count when that part passes, so one edge case wrong costs that
    part only, and the message names the parts that failed. Hidden parts run only under
    grading (``grading()``); in a notebook the message says what they are worth. Every call of
    the answer is watched (``mha.answer_watch``) for the check's references, which the result
    lists (``entered``), and for the torch ops its exercise forbids, which make a part wrong.

    ``phase`` lets the grader run the hidden parts apart, after the notebook's last cell
    (mha_grade.run_notebook): ``"shown"`` runs the parts that are not hidden, ``"hidden"`` the
    hidden ones only (``with_hidden`` then joins the two results); ``"all"`` runs both.
    """
    if phase not in PHASES:
        raise ValueError(f"phase must be one of {PHASES}, got {phase!r}")
    parts = getattr(checker, "parts", None)
    if not parts:
        if phase == "hidden":
            return Result(exercise, 0, 0, "correct", "correct")  # nothing hidden to run
        status, message, entered = _watched_run(checker, checker, answer)
        return Result(exercise, points if status == "correct" else 0, points, status, message,
                      entered=tuple(sorted(entered)))
    ran = [part for part in parts if (grading() or not part.hidden)
           and (phase == "all" or part.hidden == (phase == "hidden"))]
    results, entered = [], set()
    for part in ran:
        status, message, seen = _watched_run(checker, part.run, answer)
        entered |= seen
        results.append(PartResult(part.name, part.points if status == "correct" else 0,
                                  part.points, part.hidden, status, message))
    not_run = 0 if grading() else tidy(sum(p.points for p in parts if p.hidden))
    return _joined(exercise, parts, results, not_run, entered)


def with_hidden(shown: Result | None, hidden: Result) -> Result:
    """The verdict of a check whose parts ran in two phases: ``shown``'s parts and then
    ``hidden``'s, as one result (``shown`` is None when no shown phase ran)."""
    if shown is None:
        return hidden
    if not hidden.parts:
        return shown
    results = [*(shown.parts or [PartResult("the check's cases", shown.points,
                                            shown.max_points, False, shown.status,
                                            shown.message)]), *hidden.parts]
    return _joined(shown.exercise, None, results, 0, {*shown.entered, *hidden.entered})


def _joined(exercise: str, parts: list | None, results: list[PartResult], not_run: float,
            entered: set[str]) -> Result:
    """One result from its parts' verdicts (and the points of hidden parts not run here)."""
    if not results:
        return Result(exercise, 0, 0, "correct", "correct", (), not_run, tuple(sorted(entered)))
    statuses = [r.status for r in results]
    status = next((s for s in statuses if s not in ("correct", "not done")),
                  "not done" if "not done" in statuses else "correct")
    if len(results) == 1 or len(set(statuses)) == 1 and status in ("correct", "not done"):
        message = results[0].message  # nothing to tell apart
    else:
        message = "; ".join(_part_line(r) for r in results)
    if not_run:
        count = sum(1 for p in parts or () if p.hidden)
        message += (f" (grading also runs {count} hidden part{'s' * (count > 1)}, worth "
                    f"{not_run:g} point{'s' * (not_run != 1)}, on cases not shown here)")
    return Result(exercise, tidy(sum(r.points for r in results)),
                  tidy(sum(r.max_points for r in results)), status, message, tuple(results),
                  not_run, tuple(sorted(entered)))


def _part_line(part: PartResult) -> str:
    label = f"hidden part '{part.name}'" if part.hidden else f"part '{part.name}'"
    return f"{label} [{part.points:g}/{part.max_points:g}]: {part.message}"


def tidy(points: float) -> float:
    """Points as an int when whole (``1``, not ``1.0``), else the float (quarters are exact)."""
    return int(points) if points == int(points) else float(points)


def _checked_points(points: float) -> float:
    if isinstance(points, bool) or not isinstance(points, int | float) or points <= 0 or (
            points * 4 != int(points * 4)):
        raise TypeError(f"a check's points are whole or quarters (0.25, 0.5, 1, 2): {points!r}")
    return tidy(points)


@dataclass(frozen=True)
class Part:
    """One part of a check: its own cases, points and verdict."""

    name: str  # what it tries, for messages ("a row with no key allowed")
    points: float
    hidden: bool  # True: grading-only, never run in a notebook
    run: Callable[[object], None]  # raises Wrong, like a whole checker


class Checker:
    """A check's parts in order; calling it runs the parts this place runs (all of them under
    grading, the visible ones in a notebook) and raises the first ``Wrong``."""

    def __init__(self, parts: list[Part]):
        self.parts = parts

    def __call__(self, answer: object) -> None:
        for part in self.parts:
            if grading() or not part.hidden:
                part.run(answer)


def exercise_check(exercise: str, points: float = 1, *, part: str = "",
                   reference_names: tuple[str, ...] = (),
                   forbidden_ops: tuple[str, ...] = ()) -> Callable:
    """Turn ``checker(answer)`` into a check that prints its verdict and returns it.

    ``reference_names`` lists the callables of ``mha`` whose result the check compares with (see
    ``mha.checks``); it becomes the check's ``reference_names`` attribute. ``forbidden_ops``
    lists words of the torch operations the exercise forbids (``("softmax",)``: every op whose
    name holds it between underscores, ``_softmax`` and ``_log_softmax``; ``"pow.Scalar"``: that
    overload only). A check that forbids ops also counts wrong an answer whose tensors leave
    torch for NumPy or for Python per element (``t.apply_(f)``), where its ops cannot be seen
    (``mha.answer_watch.LEFT_TORCH``). Each call
    of the answer is watched for both, and for the functions of the check's own module
    (``mha.answer_watch``): a reference entered is reported in the result, a forbidden op makes
    the part wrong.

    A check may have more parts, each with its own points: ``checker`` is the first (``part``
    names it, ``points`` are its points), and ``@check.part(name, points, hidden=...)``
    adds the next. The check's ``max_points`` is their sum. A hidden part runs only under
    grading: a student's notebook neither runs it nor shows its messages, and says that more
    cases are graded. Points are whole or quarters (exact in binary, so sums are exact).
    """
    if isinstance(reference_names, str) or not all(
            isinstance(n, str) and n.startswith("mha.") for n in reference_names):
        raise TypeError("reference_names must be a tuple of dotted names starting with 'mha.'")
    if isinstance(forbidden_ops, str) or not all(
            isinstance(w, str) and all(p.isidentifier() for p in w.split(".", 1))
            for w in forbidden_ops):
        raise TypeError("forbidden_ops must be a tuple of words of torch op names ('softmax') "
                        "or of overloads ('pow.Scalar')")
    first_points = _checked_points(points)

    def wrap(checker: Callable[[object], None]) -> Callable[[object], Result]:
        parts = [Part(part or "the check's cases", first_points, False, checker)]
        # what the answer's side watches for: the references, and the check's own module, whose
        # helpers compute the expected values
        watch = {"references": [*reference_names, checker.__module__],
                 "ops": list(forbidden_ops)}

        @functools.wraps(checker)
        def check(answer: object) -> Result:
            # The answer's own prints are caught and shown indented above the verdict, so the
            # verdict is the only line of the check that starts with a mark.
            printed = io.StringIO()
            with contextlib.redirect_stdout(printed):
                result = evaluate(check.checker, exercise, check.max_points,
                                  LocalChannel(answer).answer())
            _echo(printed.getvalue())
            _report(result)
            return result

        def add_part(name: str, points: float, *, hidden: bool = False) -> Callable:
            """Decorator: ``run(answer)`` becomes the check's next part."""
            if not name:
                raise TypeError("a part needs a name: messages say which part failed")

            def register(run: Callable[[object], None]) -> Callable[[object], None]:
                parts.append(Part(name, _checked_points(points), hidden, run))
                check.max_points = tidy(sum(p.points for p in parts))
                check.checker = Checker(list(parts))
                check.checker.watch = watch
                return run

            return register

        check.exercise = exercise
        check.max_points = first_points
        check.reference_names = tuple(reference_names)
        check.forbidden_ops = tuple(forbidden_ops)
        # one part: the function itself, as before; more parts: a Checker (see add_part)
        check.checker = checker
        checker.watch = watch
        check.part = add_part
        return check

    return wrap


def _echo(printed: str, max_lines: int = 20) -> None:
    """Show what the answer printed, indented, and at most ``max_lines`` lines of it."""
    lines = printed.splitlines()
    for line in lines[:max_lines]:
        print(f"    {line[:200]}")
    if len(lines) > max_lines:
        print(f"    ... ({len(lines) - max_lines} more lines printed by your answer)")


def _report(result: Result) -> None:
    print(verdict_line(result))


def verdict_line(result: Result) -> str:
    mark = "✓" if result.status == "correct" else "✗"
    message = " ".join(result.message.split())[:700]  # one line, whatever the answer raised
    return (f"{mark} Exercise {result.exercise} [{result.points:g}/{result.max_points:g}]: "
            f"{message}")


def finite_number(what: str, got: object) -> float:
    """``got`` as a float if it is one finite real number, else ``Wrong`` saying what it is.

    A number is a Python ``int`` or ``float`` or a real tensor of one element; ``True`` and
    ``"0.5"`` are not numbers here. NaN and inf are never right where a finite number is
    expected, and every comparison with NaN is False: a check that only asks ``abs(got -
    expected) > tol`` would pass it. So a check reads a scalar answer through this first.
    """
    if isinstance(got, torch.Tensor):
        if got.numel() != 1:
            raise Wrong(f"{what}: expected one number, got a tensor of shape {tuple(got.shape)}")
        if got.dtype == torch.bool or got.is_complex():
            raise Wrong(f"{what}: expected a real number, got a tensor of dtype {got.dtype}")
        got = got.item()
    if isinstance(got, bool) or not isinstance(got, int | float):
        raise Wrong(f"{what}: expected a number, got {type(got).__name__}")
    try:
        value = float(got)
    except OverflowError:
        value = math.inf
    if not math.isfinite(value):
        raise Wrong(f"{what}: expected a finite number, got {value}")
    return value


def within(got: float, expected: float, tol: float) -> bool:
    """``|got - expected| <= tol``, written so that NaN on either side is never within."""
    return abs(got - expected) <= tol


def expect_close(what: str, got: object, expected: torch.Tensor, atol: float = 1e-5,
                 rtol: float = 1e-4,
                 mistakes: Sequence[tuple[str, torch.Tensor]] = ()) -> None:
    """Raise ``Wrong`` unless ``got`` is a tensor of ``expected``'s shape and values.

    The message says how the values are wrong, never what they should be: a graded case's
    expected values are not feedback. ``mistakes`` holds ``(description, tensor)`` pairs, what a
    common mistake gives on the same input; when ``got`` matches one, its description is the
    message.
    """
    if not isinstance(got, torch.Tensor):
        raise Wrong(f"{what}: expected a torch.Tensor, got {type(got).__name__}")
    if got.shape != expected.shape:
        raise Wrong(f"{what}: expected shape {tuple(expected.shape)}, got {tuple(got.shape)}")
    # .double() would drop a complex result's imaginary part, and read True as 1.0
    if got.is_complex() != expected.is_complex() or (
            got.dtype == torch.bool) != (expected.dtype == torch.bool):
        raise Wrong(f"{what}: expected a tensor of dtype {expected.dtype}, got {got.dtype}")
    got64, expected64 = got.detach().double(), expected.detach().double()
    if torch.allclose(got64, expected64, atol=atol, rtol=rtol):
        return
    if not torch.isfinite(got64).all():
        raise Wrong(f"{what}: your result contains inf or nan")
    for description, wrong in mistakes:
        if wrong.shape == got.shape and torch.allclose(got64, wrong.detach().double(),
                                                       atol=atol, rtol=rtol):
            raise Wrong(f"{what}: {description}")
    raise Wrong(f"{what}: {how_it_differs(got64, expected64, atol, rtol)}")


def how_it_differs(got: torch.Tensor, expected: torch.Tensor, atol: float, rtol: float) -> str:
    """What is wrong with ``got`` (float64, ``expected``'s shape), without ``expected``'s values."""

    def close(a, b):
        return torch.allclose(a, b, atol=atol, rtol=rtol)

    if got.numel() >= 2:
        if close(-got, expected):
            return "your values have the wrong sign"
        norm = expected.square().sum()
        if norm > 0:
            factor = ((got * expected).sum() / norm).item()
            if close(got, factor * expected) and abs(factor) > 1e-12:
                return f"your values are {_factor(factor)}"
        if got.dim() >= 2 and got.shape[-1] == got.shape[-2] and close(
                got.transpose(-2, -1), expected):
            return "your values are the expected ones transposed (in the last two dimensions)"
        if close(got.flatten().sort().values, expected.flatten().sort().values):
            return "your values are the right ones, in the wrong places"
    wrong = (~torch.isclose(got, expected, atol=atol, rtol=rtol)).sum().item()
    worst = (got - expected).abs().max().item()
    order = f"1e{math.floor(math.log10(worst) + 0.5):+03d}"
    if got.numel() == 1:
        return f"the value differs from the expected one (by something of order {order})"
    return (f"{wrong} of {got.numel()} values differ from the expected ones (the largest "
            f"difference is of order {order})")


def _factor(factor: float) -> str:
    """``factor`` in words when it is a simple one (2, 1/8, sqrt(3)), else only its direction."""
    size = abs(factor)
    sign = "of the wrong sign and " if factor < 0 else ""
    direction, size = ("too large", size) if size > 1 else ("too small", 1 / size)
    for k in range(2, 1025):
        for name, value in ((str(k), float(k)), (f"sqrt({k})", math.sqrt(k))):
            if abs(size - value) < 1e-6 * value:
                return f"{sign}{direction} by a factor of {name}"
    return f"{sign}{direction} by one constant factor throughout: a scale is missing or extra"
