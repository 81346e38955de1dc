"""Plain code: student code that by its syntax cannot reach Python's machinery.

The answer watch (mha.answer_watch) runs in the student's own process. Every way past it found
so far needed reflection: dunders, private names, frames, the garbage collector, ``sys``,
getattr by a string, code run from a string, the standard library's doors to them, torch's
compilers or ops registry, pickles. Plain code has none of these, so the watch's verdict on a
forbidden op is trusted only where every cell the student wrote is plain; elsewhere a human
grades the exercise (mha_grade.compare.leave_to_instructor). Plain code may still use the
allowed library surface (the modules of ``ALLOWED_MODULES`` minus the names of ``DOORS``):
that list, not the student's cleverness, is what a review has to keep sound.
"""

from __future__ import annotations

import ast
import re
import string
import unicodedata

from mha_grade.flags import MAX_READ, MAX_TOTAL

# The modules plain code may import: what the course's honest answers use (the chapters'
# solutions, tests/test_checks_variants.py). torch and numpy include their public submodules
# (torch.nn.functional), each part of the path checked like an attribute below; mha is the
# package itself and its checks, whose calls the notebooks are asked to make.
ALLOWED_MODULES = ("torch", "numpy", "math", "matplotlib", "matplotlib.pyplot", "mha",
                   "mha.checks", "itertools", "functools", "collections", "random", "time")
WITH_SUBMODULES = ("torch", "numpy")
CHECKS_MODULE = re.compile(r"mha\.checks\.ch\d\d")

# Builtins that reach names by a string, run code from a string, or read files and memory:
# referenced at all (an alias ``g = getattr`` is as good as a call)
BANNED_BUILTINS = frozenset({
    "getattr", "setattr", "delattr", "vars", "globals", "locals", "dir",  # names by a string
    "eval", "exec", "compile", "__import__", "help",  # code or modules by a string (help: pydoc)
    "breakpoint", "open", "input", "memoryview",  # a debugger, files, the terminal, raw memory
})

# Attribute names that are doors out of the allowed surface, by group (each name also as an
# imported name: ``from torch import jit``)
DOORS = (
    # the interpreter and the process: modules that torch, numpy or mha hold as attributes
    ("sys", "os", "gc", "builtins", "inspect", "importlib", "ctypes", "ctypeslib", "types",
     "threading", "subprocess", "multiprocessing", "signal", "code", "runpy", "pkgutil",
     "timeit", "resolve_name", "json", "modules"),
    # the profile hook and its kin, wherever a module exposes them
    ("setprofile", "getprofile", "settrace", "gettrace", "monitoring", "profiler"),
    # pickles and native code: load runs arbitrary code (torch.load, numpy.load), and so do
    # numpy's compilers and doctest runner
    ("pickle", "marshal", "load", "loads", "load_library", "classes", "serialization",
     "f2py", "distutils", "rundocs", "lib"),  # numpy.lib: its file readers read pickles
    # torch's ops registry and its compilers, whose code runs where the watch is suspended or
    # without entering the function it compiled; cond and while_loop compile their branches
    ("library", "ops", "jit", "fx", "compile", "compiler", "export", "onnx", "cond",
     "while_loop", "scan", "associative_scan"),
    # torch's internals and its distributed, packaged or downloaded code
    ("utils", "overrides", "distributed", "hub", "package", "futures"),
    # matplotlib's backends (a GUI backend runs its own event loop and threads)
    ("use", "switch_backend"),
    # the course's machinery: the checks' runner and the watch itself
    ("exercises", "answer_watch"),
)
DOOR_NAMES = frozenset(name for group in DOORS for name in group)
# Modules of the first group as bare names: the instructor's own cells may bind them (chapter
# 1's setup cell imports sys), and a student's cell may then use them without an import
MODULE_NAMES = (frozenset(DOORS[0]) | {"pickle", "marshal"}) - {"code", "modules",
                                                                "resolve_name"}

# Attributes of frames, tracebacks, generators, coroutines, code objects and closures' cells
FRAME_ATTRIBUTE = re.compile(r"^(f_|tb_|gi_|cr_|ag_|co_)|^cell_contents$")
DUNDER = re.compile(r"__\w+__")


def why_not_plain(sources: list[str]) -> list[str]:
    """Why the student's code cells ``sources`` (each code cell of the notebook, in order,
    with the instructor's own cells given as "") are not plain: one short reason per finding,
    "the builtin getattr (code cell N, line L)", N counting the notebook's code cells from 1.
    [] when plain."""
    reasons: list[tuple[int, str]] = []
    trees: list[tuple[int, ast.AST]] = []
    total = 0
    for number, raw in enumerate(sources, start=1):
        if not raw.strip():
            continue
        # Python reads identifiers NFKC-normalised (a fullwidth 'ｇetattr' is getattr)
        text = unicodedata.normalize("NFKC", raw[:MAX_READ + 1])
        total += len(text)
        if len(text) > MAX_READ or total > MAX_TOTAL:
            reasons.append((number, f"a cell too large to read (code cell {number})"))
            continue
        try:
            trees.append((number, ast.parse(text)))
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            # IPython magics and shell lines (% and !) are not Python
            reasons.append((number, f"a magic, a shell line or a syntax error (code cell "
                                    f"{number})"))
    owned = _own_objects([tree for _, tree in trees])
    for number, tree in trees:
        try:
            found = _findings(tree, owned)
        except RecursionError:
            found = [(1, "code too deeply nested to read")]
        reasons += [(number, f"{what} (code cell {number}, line {line})") for line, what in found]
    # one line per finding, in the cells' order (two _C on one line are one finding)
    return list(dict.fromkeys(text for _, text in sorted(reasons, key=lambda r: r[0])))


def _findings(tree: ast.AST, owned: set[str]) -> list[tuple[int, str]]:
    """(line, what) for each rule ``tree`` breaks (``owned``: the names the student's cells
    bind to objects of their own, whose attributes they may set)."""
    found: list[tuple[int, str]] = []
    uses_of_type = _allowed_type_calls(tree)
    for node in ast.walk(tree):
        line = getattr(node, "lineno", 1)
        for name, kind in _identifiers(node):
            if DUNDER.search(name):
                found.append((line, f"the dunder {kind} {name}"))
        if isinstance(node, ast.Name):
            if node.id in BANNED_BUILTINS:
                found.append((line, f"the builtin {node.id}"))
            elif node.id == "type" and id(node) not in uses_of_type:
                found.append((line, "type other than type(x) (three arguments make a class)"))
            elif node.id in MODULE_NAMES:
                found.append((line, f"the module {node.id}"))
        elif isinstance(node, ast.Attribute) and not DUNDER.search(node.attr):
            why = _attribute(node.attr)
            if why:
                found.append((line, why))
        elif isinstance(node, ast.MatchClass):
            found += [(line, why) for name in node.kwd_attrs if (why := _attribute(name))]
        elif isinstance(node, ast.Import | ast.ImportFrom):
            found += [(line, why) for why in _import(node)]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if DUNDER.search(node.value):
                found.append((line, "a string that names a dunder"))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr in ("format", "format_map"):
            found += [(line, why) for why in _format(node.func.value)]
        if isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign | ast.Delete):
            targets = node.targets if isinstance(node, ast.Assign | ast.Delete) \
                else [node.target]
            found += [(line, f"an attribute of a module changed ({ast.unparse(t)[:60]})")
                      for t in _stored(targets) if isinstance(t, ast.Attribute)
                      and _root(t) not in owned]
    return found


def _identifiers(node: ast.AST) -> list[tuple[str, str]]:
    """The identifiers ``node`` itself spells, each with what it is."""
    if isinstance(node, ast.Name):
        return [(node.id, "name")]
    if isinstance(node, ast.Attribute):
        return [(node.attr, "attribute")]
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return [(node.name, "definition")]
    if isinstance(node, ast.arg):
        return [(node.arg, "argument")]
    if isinstance(node, ast.keyword) and node.arg:
        return [(node.arg, "keyword")]
    if isinstance(node, ast.alias):
        return [(part, "import") for part in (node.name, node.asname or "")]
    if isinstance(node, ast.ImportFrom):
        return [(node.module or "", "import")]
    if isinstance(node, ast.MatchClass):
        return [(name, "match attribute") for name in node.kwd_attrs]
    if isinstance(node, ast.MatchAs | ast.MatchStar) and node.name:
        return [(node.name, "name")]
    if isinstance(node, ast.MatchMapping) and node.rest:
        return [(node.rest, "name")]
    if isinstance(node, ast.ExceptHandler) and node.name:
        return [(node.name, "name")]
    if isinstance(node, ast.Global | ast.Nonlocal):
        return [(name, "name") for name in node.names]
    return []


def _attribute(name: str) -> str:
    """Why reading attribute ``name`` is not plain, or ""."""
    if name.startswith("_"):
        return f"the private attribute {name}"
    if FRAME_ATTRIBUTE.search(name):
        return f"the frame or code attribute {name}"
    if name in DOOR_NAMES:
        return f"{name}, a door out of the allowed library surface"
    return ""


def _import(node: ast.Import | ast.ImportFrom) -> list[str]:
    """Why an import is not plain: a module outside ``ALLOWED_MODULES``, a star, or an
    imported name that is private or a door."""
    if isinstance(node, ast.ImportFrom):
        if node.level:
            return ["a relative import"]
        why = _module(node.module or "")
        if why:
            return [why]
        if any(alias.name == "*" for alias in node.names):
            return ["a star import (it binds names no one reads)"]
        return [why for alias in node.names if (why := _attribute(alias.name))]
    return [why for alias in node.names if (why := _module(alias.name))]


def _module(dotted: str) -> str:
    """Why importing module ``dotted`` is not plain, or ""."""
    parts = dotted.split(".")
    if dotted in ALLOWED_MODULES or CHECKS_MODULE.fullmatch(dotted):
        return ""
    if parts[0] in WITH_SUBMODULES and not any(_attribute(p) for p in parts[1:]):
        return ""
    return f"an import of {dotted} (outside the allowed modules)"


def _own_objects(trees: list[ast.AST]) -> set[str]:
    """The names the student's cells bind to objects of their own (an assignment, an argument,
    a loop variable, a function or a class), whose attributes plain code may set (``self.w =
    ...``, ``model.weight = ...``). Not theirs: a name bound by an import (``torch``, ``F`` of
    ``import torch.nn.functional as F``), or assigned from such a name by a plain chain of
    attributes (``c = mha.checks.ch01``), to a fixed point across the cells; nor a name only
    the instructor's cells bind (chapter 1's ``torch``)."""
    bound: set[str] = set()
    modules: set[str] = set()
    chains: list[tuple[str, ast.AST]] = []
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                bound.add(node.id)
            elif isinstance(node, ast.arg):
                bound.add(node.arg)
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                bound.add(node.name)
            elif isinstance(node, ast.Import):
                modules |= {a.asname or a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom):
                modules |= {a.asname or a.name for a in node.names}
            if isinstance(node, ast.Assign | ast.AnnAssign | ast.NamedExpr) \
                    and node.value is not None:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                chains += [(t.id, node.value) for t in targets if isinstance(t, ast.Name)]
    grew = True
    while grew:
        grew = False
        for name, value in chains:
            # a chain from a module, or from a name the student's cells do not bind at all
            if name not in modules and isinstance(value, ast.Name | ast.Attribute) \
                    and (_root(value) in modules or _root(value) not in bound):
                modules.add(name)
                grew = True
    return bound - modules


def _stored(targets: list[ast.AST]) -> list[ast.AST]:
    """The places an assignment stores into, tuples unpacked: ``a.b`` and ``c[0]`` of
    ``a.b, c[0] = ...`` (not the index expressions, which are only read)."""
    found = []
    for target in targets:
        if isinstance(target, ast.Tuple | ast.List):
            found += _stored(target.elts)
        elif isinstance(target, ast.Starred):
            found += _stored([target.value])
        else:
            found.append(target)
    return found


def _root(node: ast.AST) -> str | None:
    """The name an expression of attributes and subscripts starts from: ``torch`` of
    ``torch.nn.functional.softmax``."""
    while isinstance(node, ast.Attribute | ast.Subscript | ast.Starred):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _allowed_type_calls(tree: ast.AST) -> set[int]:
    """The ``type`` names of ``tree`` called as ``type(x)``: one argument, which only reads."""
    return {id(node.func) for node in ast.walk(tree)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id == "type" and len(node.args) == 1 and not node.keywords
            and not isinstance(node.args[0], ast.Starred)}


def _format(receiver: ast.AST) -> list[str]:
    """Why ``receiver.format(...)`` is not plain: a format string reads attributes and items of
    its arguments (``"{0.f_back}"``), so only a literal is read, and its fields are checked as
    attributes."""
    if not (isinstance(receiver, ast.Constant) and isinstance(receiver.value, str)):
        return ["format or format_map on something other than a string literal"]
    return _format_fields(receiver.value)


def _format_fields(text: str) -> list[str]:
    """Why the fields of format string ``text`` are not plain (a field's format spec may hold
    fields of its own: ``"{0:{1.x}}"``)."""
    try:
        parsed = list(string.Formatter().parse(text))
    except ValueError:
        return []  # str.format raises the same ValueError: nothing is read
    found = []
    for _, field, spec, _ in parsed:
        for part in re.split(r"[.\[\]]", field or "")[1:]:
            if part and _attribute(part):
                found.append(f"a format string that reads {part}")
        found += _format_fields(spec or "")
    return found
