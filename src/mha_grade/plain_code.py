"""Plain code: student code that by its syntax cannot reach Python's machinery.

The answer watch (mha.answer_watch) runs in the student's own process. Every way past it found
so far needed reflection: dunders, private names, frames, the garbage collector, ``sys``,
getattr by a string, code run from a string, the standard library's doors to them, torch's
compilers or ops registry, pickles. Plain code has none of these, so the watch's verdict on a
forbidden op is trusted only where every cell the student wrote is plain; elsewhere a human
grades the exercise (mha_grade.compare.leave_to_instructor). Plain code may still use the
allowed library surface: the modules of ``ALLOWED_MODULES`` (an allowlist: every module a
chain of attributes reaches is looked up in the grader's own import of the library, and one
outside the list is not plain, however the chain is spelt) minus the names of ``DOORS`` (a
denylist of the functions in those modules that load, compile or run code). The allowlist and
the doors, not the student's cleverness, are what a review has to keep sound: a module added
to ``ALLOWED_MODULES`` brings all its functions, so each must be read for functions that run
a string (numpy.testing's measure and runstring are why it is not there).

A module may only be named: as the receiver of an attribute (``np.exp``) or by a plain alias
(``t = torch.linalg``, followed to a fixed point across the cells); a module passed, stored,
returned or put in a container (``[np][0].testing``) is not plain, since the rule could not
follow it. Known limits: a chain through a property computed at run time is not followed.
"""

from __future__ import annotations

import ast
import functools
import importlib
import importlib.util
import inspect
import re
import string
import types
import unicodedata
import weakref
from collections import deque
from functools import cache

from mha_grade.flags import MAX_READ, MAX_TOTAL

# The modules plain code may import or reach by attributes: what the course's honest answers
# use (the chapters' solutions, tests/test_checks_variants.py) and a few harmless ones honest
# notebooks import. A module on the list brings all its public functions: adding one means
# reading them for a way to run a string, load a pickle, write a file or reach the
# interpreter, and putting those into DOORS below. A submodule is allowed only if listed
# (torch.nn is, torch.utils is not); mha's own modules are allowed but for the doors and
# private ones (see _allowed_name).
ALLOWED_MODULES = frozenset({
    "torch", "torch.nn", "torch.nn.functional", "torch.nn.init", "torch.nn.parameter",
    "torch.func", "torch.special", "torch.linalg", "torch.fft", "torch.random",
    "torch.distributions", "torch.autograd", "torch.autograd.functional", "torch.optim",
    "torch.optim.lr_scheduler", "torch.testing",
    "numpy", "numpy.linalg", "numpy.random", "numpy.fft",
    "matplotlib", "matplotlib.pyplot", "matplotlib.cm", "matplotlib.colors",
    "matplotlib.style",  # plt.style.use: applies only style rcParams (backend is blacklisted)
    "math", "itertools", "functools", "collections", "random", "time",
    "typing",  # type hints; get_type_hints, which evaluates strings, is a door
    "copy",  # copies existing objects by their own reduce methods; no dunder can be defined
    "dataclasses",  # builds __init__ from identifiers only; make_dataclass is a door anyway
    "warnings",  # filters only: showwarning cannot be replaced (module attributes stay read-only)
    "mha", "mha.checks",
})
CHECKS_MODULE = re.compile(r"mha\.checks\.ch\d\d")
# Names the instructor's cells bind to modules (a student's cell uses them without an import)
CONVENTIONAL = {"torch": "torch", "np": "numpy", "numpy": "numpy", "F": "torch.nn.functional",
                "nn": "torch.nn", "plt": "matplotlib.pyplot", "matplotlib": "matplotlib",
                "math": "math", "mha": "mha", "time": "time", "random": "random"}

# Builtins that reach names by a string, run code from a string, or read files and memory:
# referenced at all (an alias ``g = getattr`` is as good as a call)
BANNED_BUILTINS = frozenset({
    "getattr", "setattr", "delattr", "vars", "globals", "locals", "dir",  # names by a string
    "eval", "exec", "compile", "__import__", "help",  # code or modules by a string (help: pydoc)
    "breakpoint", "open", "memoryview",  # a debugger, files, raw memory (input() is allowed:
    # the grading process's stdin is /dev/null, so it reads nothing: instructor 46)
    # IPython's shell, which runs strings (.ex, .ev, .run_cell, .run_line_magic, .system);
    # IPython's display(x) only shows x and stays plain
    "get_ipython",
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
     "while_loop", "scan", "associative_scan", "import_ir_module",
     "import_ir_module_from_buffer"),
    # a call that returns a module the allowlist does not follow (torch.cuda, torch.cpu)
    ("get_device_module",),
    # a string naming a tensor type, imported by its module's name (attack 53)
    ("set_default_tensor_type",),
    # torch's internals and its distributed, packaged or downloaded code
    ("utils", "overrides", "distributed", "hub", "package", "futures"),
    # matplotlib's backends (a GUI backend runs its own event loop and threads), and its
    # settings, one of which imports a backend by module name ('module://X': attack 43, then
    # attack 44 with the key and the name computed, or set through update, rc or rc_context);
    # plt.rcParams['a.name'] with a literal name is allowed (_a_literal_setting)
    ("use", "switch_backend", "rcParams", "rc", "rc_context", "rc_file", "rcdefaults",
     "rc_file_defaults", "rc_params", "rc_params_from_file", "RcParams", "rcParamsDefault",
     "rcParamsOrig",
     # the backend registry imports a module by a computed name and returns it (attack 52:
     # "module:" + "//builtins", then its exec); bar_label formats with a format string of
     # the caller's, whose fields read attributes (a frame's, attack 52)
     "backend_registry", "load_backend_module", "resolve_backend", "resolve_gui_or_backend",
     "bar_label"),
    # class factories that make dunders from computed names (as type with three arguments):
    # Enum's functional API (attack 52: a __del__ run by the collector in a later cell)
    ("Enum", "IntEnum", "Flag", "IntFlag", "StrEnum", "EnumMeta", "EnumType"),
    # the builtins that are doors, reached as an attribute (of a module a call returned, which
    # the rule does not follow: attack 52's builtins.exec)
    ("exec", "getattr", "setattr", "delattr", "globals", "locals", "vars", "breakpoint"),
    # the course's machinery: the checks' runner and the watch itself
    ("exercises", "answer_watch"),
    # functions that run a string: numpy.testing's (its module is not allowed either), IPython's
    # shell, typing's evaluation of string annotations (and what calls it: a singledispatch
    # function's register reads the annotations of what it registers, with typing; attack 51
    # ran code hidden in one), dataclasses' class factory
    ("runstring", "get_ipython", "get_type_hints", "evaluate_forward_ref",
     "ForwardRef", "singledispatch", "singledispatchmethod", "make_dataclass"),
    # functions that read and set attributes by names given as strings (a computed
    # "__code__": attack 55 swapped the code of mha.exercises' functions with them)
    ("update_wrapper", "wraps"),
    # writers of arbitrary bytes or text to a file (a .py file in the working folder is then
    # importable: matplotlib imports a backend named 'module://file'), and a pytest run
    # (numpy.test loads plugins by name)
    ("savetxt", "tofile", "from_file", "memmap", "test",
     # pathlib's Path, which matplotlib and mha re-export: files written and read (attack 54)
     "Path"),
)
DOOR_NAMES = frozenset(name for group in DOORS for name in group)
# Doors that are attributes of a module (sys.modules, numpy.test, torch.load, torch.ops, ...)
# and also everyday names of a student's own objects: ``net.modules()``, ``self.test``,
# ``data.load()`` (attack 53 found such honest notebooks left to the instructor). On an object
# the student's cells bind (an assignment, an argument, ``self``) these are not doors; on a
# module, or on anything else (a library call's result), they are. An owned name holds no
# module a plain alias put there: a module bound in a class body is not plain (attack 54:
# ``class A: m = np``, then ``A.m.load``); a library call's result may be one, but no allowed
# call found returns a module, and the calls that do are doors themselves.
MODULE_DOORS = frozenset({
    "modules", "test", "load", "loads", "ops", "scan", "associative_scan", "cond",
    "while_loop", "code", "types", "lib", "classes", "library", "json", "utils", "Path",
    "compiler", "export", "package", "futures", "overrides", "distributed", "hub", "fx",
    "serialization", "onnx", "profiler", "monitoring"}) & DOOR_NAMES
# Formats in which savefig writes the figure's raw pixel buffer: bytes the caller chooses, to
# any file name (attack 53: a .py file), as savetxt and tofile (doors) would
RAW_IMAGE_FORMATS = frozenset({"raw", "rgba"})
SAVERS = frozenset({"savefig", "print_figure", "imsave"})
# Modules of the first group as bare names: the instructor's own cells may bind them (chapter
# 1's setup cell imports sys), and a student's cell may then use them without an import
MODULE_NAMES = (frozenset(DOORS[0]) | {"pickle", "marshal"}) - {"code", "modules",
                                                                "resolve_name"}

# Attributes of frames, tracebacks, generators, coroutines, code objects and closures' cells
FRAME_ATTRIBUTE = re.compile(r"^(f_|tb_|gi_|cr_|ag_|co_)|^cell_contents$")
DUNDER = re.compile(r"__\w+__")
# Dunders honest code reads, each harmless: a name's string and a docstring (read only: never
# stored, so the watch's names of ops cannot be changed)
READABLE_DUNDERS = frozenset({"__name__", "__doc__"})
# The one magic line allowed, exactly as written: it picks the inline backend, which the
# grading kernel uses anyway (any other magic runs IPython's machinery)
MATPLOTLIB_INLINE = re.compile(r"(?m)^%matplotlib inline[ \t]*$")
# Cells that are not Python as written, read through IPython's transforms to learn whether
# they run at all (their cost grows with the square of the lines): at most this many, this long
MAX_TRANSFORMED_CELLS, MAX_TRANSFORMED_LINES, MAX_TRANSFORMED_CHARACTERS = 20, 50, 4000


def why_not_plain(sources: list[str]) -> list[str]:
    """Why the student's code cells ``sources`` (each code cell of the notebook, in order,
    with the instructor's own cells given as "") are not plain: one short reason per finding,
    "the builtin getattr (code cell N, line L)", N counting the notebook's code cells from 1.
    [] when plain."""
    reasons: list[tuple[int, str]] = []
    trees: list[tuple[int, ast.AST]] = []
    total, transforms = 0, MAX_TRANSFORMED_CELLS
    for number, raw in enumerate(sources, start=1):
        if not raw.strip():
            continue
        # Parsed as written: Python's parser reads identifiers NFKC-normalised (a fullwidth
        # 'ｇetattr' is getattr) and nothing else (a fullwidth quote inside a string stays a
        # character of the string; the whole text normalised would read different strings).
        # Measured by the normalised length too (one character can normalise to 18).
        text = raw[:MAX_READ + 1]
        size = max(len(text), len(unicodedata.normalize("NFKC", text)))
        total += size
        if size > MAX_READ or total > MAX_TOTAL:
            reasons.append((number, f"a cell too large to read (code cell {number})"))
            continue
        cleaned = MATPLOTLIB_INLINE.sub("", text)
        try:
            tree = ast.parse(cleaned)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            # not Python as written: it runs only if IPython's transforms make it Python (a
            # magic, a shell line, a prompt), else it raises SyntaxError and runs nothing, and
            # a typo in a student's cell must not send a correct answer to the instructor
            # (instructor 46). The transforms re-read the whole cell once per line they
            # rewrite (attack 44: a 63 KB cell of '%a' lines took 285 s), so only short cells,
            # and few of them, are asked (50 lines: 0.04 s)
            transforms -= 1
            # lines as IPython splits them (\r, \x0c, \u2028 too: attack 45), and characters
            if transforms < 0 or len(cleaned) > MAX_TRANSFORMED_CHARACTERS or \
                    len(cleaned.splitlines()) > MAX_TRANSFORMED_LINES:
                reasons.append((number, f"a magic, a shell line or a syntax error (code cell "
                                        f"{number})"))
            elif _runs_in_ipython(cleaned):
                reasons.append((number, f"a cell IPython rewrites before it runs (a prompt, a "
                                        f"magic or an escape) (code cell {number})"))
            continue
        # read what runs: the grader's IPython first strips prompts ("In [1]: ", "...: ") from
        # every line, inside strings too, and turns magics into calls, so a cell it rewrites
        # runs other code than Python reads here (attack 43: "In [1]: F.softmax = torch.exp"
        # is an annotation to Python, a module attribute write once IPython ran it)
        if _significant_lines(_ipython_transform(cleaned)) != _significant_lines(cleaned):
            reasons.append((number, f"a cell IPython rewrites before it runs (a prompt, a "
                                    f"magic or an escape) (code cell {number})"))
            continue
        trees.append((number, tree))
    walked = {number: _walk(tree) for number, tree in trees}  # one walk per cell: 10,000
    all_trees = [nodes for nodes, _ in walked.values()]  # assignments take a tenth of a second
    try:
        owned = _own_objects(all_trees)
        modules = _module_names(all_trees)
    except RecursionError:
        owned, modules = set(), {}
        reasons.append((0, "code too deeply nested to read"))
    for number, _ in trees:
        try:
            found = _findings(*walked[number], owned, modules)
        except RecursionError:
            found = [(1, "code too deeply nested to read")]
        reasons += [(number, f"{what} (code cell {number}, line {line})") for line, what in found]
    # one line per finding, in the cells' order (two _C on one line are one finding)
    return list(dict.fromkeys(text for _, text in sorted(reasons, key=lambda r: r[0])))


@functools.cache
def _ipython_transformer():
    from IPython.core.inputtransformer2 import TransformerManager

    return TransformerManager()


def _ipython_transform(text: str) -> str:
    """``text`` as the grader's IPython shell runs it (its input transforms, not the code)."""
    try:
        return _ipython_transformer().transform_cell(text)
    except Exception:  # noqa: BLE001 (a cell IPython cannot transform is not run as read)
        return "\0"


def _runs_in_ipython(text: str) -> bool:
    """Whether ``text``, which is not Python, runs in the grader's IPython shell: its input
    transforms make Python of it. Else it raises SyntaxError before any line runs."""
    transformed = _ipython_transform(text)
    try:
        ast.parse(transformed)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    return True


def _significant_lines(text: str) -> list[str]:
    """The lines of ``text`` without trailing spaces or blank lines around them (IPython drops
    those, which changes nothing that runs)."""
    lines = [line.rstrip() for line in text.splitlines()]
    while lines and not lines[0]:
        lines.pop(0)
    while lines and not lines[-1]:
        lines.pop()
    return lines


def _walk(tree: ast.AST) -> tuple[list[ast.AST], dict[int, ast.AST]]:
    """The nodes of ``tree`` but contexts and operators (shared singletons, which name
    nothing), and each node's parent by the child's id."""
    nodes, parents = [tree], {}
    for node in nodes:  # grows as it is read: breadth first, as ast.walk
        for child in ast.iter_child_nodes(node):
            if not isinstance(child, SINGLETONS):
                parents[id(child)] = node
                nodes.append(child)
    return nodes, parents


SINGLETONS = (ast.expr_context, ast.operator, ast.boolop, ast.unaryop, ast.cmpop)


def _findings(tree: list[ast.AST], parents: dict[int, ast.AST], owned: set[str],
              modules: dict[str, set[types.ModuleType]]) -> list[tuple[int, str]]:
    """(line, what) for each rule a cell (its nodes ``tree``, their ``parents``) breaks
    (``owned``: the names the student's cells
    bind to objects of their own, whose attributes they may set; ``modules``: the names bound
    to modules, with the modules)."""
    found: list[tuple[int, str]] = []
    uses_of_type = _allowed_type_calls(tree, parents)
    allowed_dunders = _allowed_dunders(tree)
    values: dict[int, list[object]] = {}
    for node in tree:
        line = getattr(node, "lineno", 1)
        for name, kind in _identifiers(node):
            if DUNDER.search(name) and id(node) not in allowed_dunders:
                found.append((line, f"the dunder {kind} {name}"))
        if isinstance(node, ast.Name):
            if node.id in BANNED_BUILTINS:
                found.append((line, f"the builtin {node.id}"))
            elif node.id == "type" and id(node) not in uses_of_type:
                found.append((line, "type other than type(x) (three arguments make a class)"))
            elif node.id in MODULE_NAMES:
                found.append((line, f"the module {node.id}"))
        elif isinstance(node, ast.Attribute) and not DUNDER.search(node.attr):
            receiver = _value(node.value, modules, values)
            parent = parents.get(id(node))
            style = bool(receiver) and all(r is _load("matplotlib.style") for r in receiver)
            own = node.attr in MODULE_DOORS and _root(node.value) in owned and not any(
                isinstance(r, types.ModuleType) for r in receiver)
            why = "" if style and node.attr == "use" or own or node.attr == "rcParams" and \
                _a_literal_setting(node, parent) or node.attr == "bar_label" and \
                _literal_format_only(parent, node) else _attribute(node.attr)
            if why:
                found.append((line, why))
            else:
                found += [(line, f"the module {m.__name__} (outside the allowed modules)")
                          for m in _value(node, modules, values)
                          if isinstance(m, types.ModuleType) and not _allowed_module(m)]
        elif isinstance(node, ast.MatchClass):
            found += [(line, why) for name in node.kwd_attrs if (why := _attribute(name))]
        elif isinstance(node, ast.Import | ast.ImportFrom):
            found += [(line, why) for why in _import(node)]
            if _in_class_body(node, parents):  # class A: import numpy as m
                found.append((line, "an import in a class body (a module as a class's "
                                    "attribute, which the rule does not follow)"))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if DUNDER.search(node.value):
                found.append((line, "a string that names a dunder"))
            # matplotlib imports a backend by module name ("module://X", set through
            # rcParams["backend"], whose subscript store is no attribute write: attack 43)
            if "module://" in node.value or node.value.strip() == "backend":
                found.append((line, "a matplotlib backend chosen by name"))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr in ("format", "format_map"):
            found += [(line, why) for why in _format(node.func.value)]
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute | ast.Name) and (
                getattr(node.func, "attr", None) or getattr(node.func, "id", None)) in SAVERS:
            found += [(line, why) for keyword in node.keywords if keyword.arg == "format"
                      and (why := _image_format(keyword.value))]
            found += [(line, f"{arg.value!r}, a raw pixel buffer written to a file")
                      for arg in node.args if isinstance(arg, ast.Constant)
                      and isinstance(arg.value, str) and arg.value.lower() in RAW_IMAGE_FORMATS]
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
            found += [(line, why) for v in _value(node, modules, values)
                      if (why := _runs_code_unseen(v))]
        if isinstance(node, ast.Name | ast.Attribute) and isinstance(node.ctx, ast.Load) \
                and any(isinstance(v, types.ModuleType)
                        for v in _value(node, modules, values)) \
                and not _names_a_module(node, parents.get(id(node)), _in_class_body(
                    parents.get(id(node)), parents)):
            found.append((line, f"a module used as a value ({ast.unparse(node)[:60]}): only "
                                "its attributes or a plain alias are followed"))
        if isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign | ast.Delete):
            targets = node.targets if isinstance(node, ast.Assign | ast.Delete) \
                else [node.target]
            found += [(line, f"an attribute of a module changed ({ast.unparse(t)[:60]})")
                      for t in _stored(targets) if isinstance(t, ast.Attribute)
                      and _root(t) not in owned]
    return found


# what runs a callable when an object is freed: inside whichever kernel frees it, where the
# answer watch's dispatch mode is suspended (attack 48: torch.optim.lr_scheduler.ref)
WEAK_HOOKS = (weakref.ref, weakref.proxy, weakref.finalize, weakref.WeakMethod)


def _runs_code_unseen(value: object) -> str:
    """Why an attribute of a library, reached by name, is not plain: a metaclass (like
    ``type``, it makes a class with any dunder: ``typing.ABCMeta``, attack 48), or a weak
    reference's maker (its callback runs where the object is freed); "" for anything else."""
    if isinstance(value, type) and issubclass(value, type):
        return f"the metaclass {value.__name__} (it makes classes, with any dunder)"
    if any(value is hook for hook in WEAK_HOOKS):
        return "a weak reference (its callback runs wherever the object is freed)"
    return ""


def _allowed_dunders(tree: list[ast.AST]) -> set[int]:
    """The nodes of ``tree`` whose dunder is allowed, each harmless: ``def __init__`` directly
    in a class (it only runs when the class is called, as any method would), the call
    ``super().__init__(...)`` (calls the parent's initialiser; the method object is never
    bound, so none of its dunders can be read), a read of ``__name__`` or ``__doc__`` (a
    string), and ``from __future__ import annotations`` (annotations become strings that only
    typing.get_type_hints, a door, evaluates)."""
    allowed = set()
    for node in tree:
        if isinstance(node, ast.ClassDef):
            allowed |= {id(f) for f in node.body
                        if isinstance(f, ast.FunctionDef) and f.name == "__init__"}
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr == "__init__" and isinstance(node.func.value, ast.Call) \
                and isinstance(node.func.value.func, ast.Name) \
                and node.func.value.func.id == "super" and not node.func.value.args \
                and not node.func.value.keywords:
            allowed.add(id(node.func))
        elif isinstance(node, ast.Attribute | ast.Name) and isinstance(node.ctx, ast.Load) \
                and (node.attr if isinstance(node, ast.Attribute) else node.id) \
                in READABLE_DUNDERS:
            allowed.add(id(node))
        elif isinstance(node, ast.ImportFrom) and node.module == "__future__" \
                and not node.level and [a.name for a in node.names] == ["annotations"] \
                and not node.names[0].asname:
            allowed.add(id(node))
    return allowed


# settings that name code to run: a backend's module, figure hooks ("module:function", called
# by plt.figure: attack 52), the animation writers' programs
CODE_SETTINGS = ("backend", "backend_fallback", "figure.hooks")


def _a_literal_setting(node: ast.AST, parent: ast.AST | None) -> bool:
    """Whether ``node`` (``plt.rcParams``) is read or set at one setting named by a literal
    string that names no code: ``plt.rcParams['figure.figsize'] = (8, 4)``."""
    if not (isinstance(parent, ast.Subscript) and parent.value is node
            and isinstance(parent.slice, ast.Constant) and isinstance(parent.slice.value, str)):
        return False
    key = parent.slice.value.strip()
    return key not in CODE_SETTINGS and not key.startswith("animation.")


def _in_class_body(node: ast.AST, parents: dict[int, ast.AST]) -> bool:
    """Whether statement ``node`` runs in a class body: a ``ClassDef`` before any function or
    lambda on the way up (under an ``if``, ``try``, ``with`` or loop of the body too: attack
    55)."""
    parent = parents.get(id(node))
    while parent is not None and not isinstance(parent, ast.FunctionDef | ast.AsyncFunctionDef
                                                | ast.Lambda | ast.Module):
        if isinstance(parent, ast.ClassDef):
            return True
        parent = parents.get(id(parent))
    return False


def _names_a_module(node: ast.AST, parent: ast.AST | None, in_class_body: bool = False) -> bool:
    """Whether expression ``node``, whose value is a module, only names it where the rule
    follows it: as an attribute's receiver, or as the value of a plain alias, not one in a
    class body (``class A: m = np`` makes ``A.m`` a module on a name the rule takes for the
    student's own object: attack 54)."""
    if isinstance(parent, ast.Attribute):
        return parent.value is node
    if in_class_body:
        return False
    if isinstance(parent, ast.Assign):
        return parent.value is node and all(isinstance(t, ast.Name) for t in parent.targets)
    if isinstance(parent, ast.AnnAssign):
        return parent.value is node and isinstance(parent.target, ast.Name)
    return False  # a walrus is a value too: ``[(t := np)][0]``


def _value(node: ast.AST, modules: dict[str, set[types.ModuleType]],
           values: dict[int, list[object]]) -> list[object]:
    """What a chain of attributes from a name bound to a module can be, looked up in the
    grader's own import of the library ([] when it does not start at such a name)."""
    if id(node) in values:
        return values[id(node)]
    found: list[object] = []
    if isinstance(node, ast.Name):
        found = list(modules.get(node.id, ()))
    elif isinstance(node, ast.Attribute) and not node.attr.startswith("_"):
        for receiver in _value(node.value, modules, values):
            step = _step(receiver, node.attr)
            if step is not MISSING and not any(step is f for f in found):
                found.append(step)
    values[id(node)] = found
    return found


MISSING = object()
_STEPS: dict[tuple[int, str], object] = {}


def _step(receiver: object, name: str) -> object:
    """``receiver.name`` as the grader's own import of the library has it, without running
    the student's code: a module's attribute (a submodule the rule does not allow is not
    imported: it stands as an empty module of its name), another object's static attribute;
    MISSING where there is none."""
    key = (id(receiver), name)
    if key not in _STEPS:
        _STEPS[key] = _lookup(receiver, name)
    return _STEPS[key]


def _lookup(receiver: object, name: str) -> object:
    if not isinstance(receiver, types.ModuleType):
        try:
            return inspect.getattr_static(receiver, name, MISSING)
        except Exception:  # noqa: BLE001 (an odd object of the library: nothing followed)
            return MISSING
    if name in vars(receiver):
        return vars(receiver)[name]
    dotted = f"{receiver.__name__}.{name}"
    try:
        submodule = hasattr(receiver, "__path__") and importlib.util.find_spec(dotted)
    except (ImportError, ValueError):
        submodule = None
    if submodule:
        return _load(dotted) if _allowed_name(dotted) else types.ModuleType(dotted)
    try:
        return getattr(receiver, name)  # a module's own __getattr__ (lazy names)
    except Exception:  # noqa: BLE001 (no such attribute: the student's code would raise)
        return MISSING


@cache
def _load(dotted: str) -> types.ModuleType:
    """The grader's own import of allowed module ``dotted`` (an empty module of its name where
    the grader cannot import it: then only the names of DOORS guard its attributes)."""
    try:
        return importlib.import_module(dotted)
    except Exception:  # noqa: BLE001 (not installed where the grader runs)
        return types.ModuleType(dotted)


def _allowed_name(dotted: str) -> bool:
    """Whether module ``dotted`` is allowed: listed in ``ALLOWED_MODULES``, a chapter's checks,
    or one of mha's own public modules but its doors (mha.exercises, mha.answer_watch)."""
    parts = dotted.split(".")
    return dotted in ALLOWED_MODULES or bool(CHECKS_MODULE.fullmatch(dotted)) or (
        parts[0] == "mha" and not any(_attribute(p) for p in parts[1:]))


def _allowed_module(module: types.ModuleType) -> bool:
    return _allowed_name(str(getattr(module, "__name__", "")))


def _module_names(trees: list[list[ast.AST]]) -> dict[str, set[types.ModuleType]]:
    """The names the cells (and the instructor's, by convention: ``np``, ``F``) bind to
    modules, with the modules: by imports, and by plain aliases (``t = torch.linalg``)
    followed across the cells with a worklist (each name is visited once per module it
    gains: linear in the cells' size)."""
    names: dict[str, set[types.ModuleType]] = {}
    queue: deque[tuple[str, types.ModuleType]] = deque()

    def bind(name: str, value: object) -> None:
        if isinstance(value, types.ModuleType) and value not in names.setdefault(name, set()):
            names[name].add(value)
            queue.append((name, value))

    aliases: dict[str, list[tuple[str, list[str]]]] = {}
    for tree in trees:
        for node in tree:
            if isinstance(node, ast.Name) and node.id in CONVENTIONAL:
                bind(node.id, _load(CONVENTIONAL[node.id]))
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    dotted = alias.asname and alias.name or alias.name.split(".")[0]
                    if _allowed_name(dotted):
                        bind(alias.asname or dotted, _load(dotted))
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module \
                    and _allowed_name(node.module):
                for alias in node.names:
                    if alias.name != "*" and not alias.name.startswith("_"):
                        bind(alias.asname or alias.name, _step(_load(node.module), alias.name))
            elif isinstance(node, ast.Assign | ast.AnnAssign | ast.NamedExpr) \
                    and node.value is not None and (path := _path(node.value)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                aliases.setdefault(path[0], []).extend(
                    (t.id, path[1:]) for t in targets if isinstance(t, ast.Name))
    while queue:
        name, module = queue.popleft()
        for target, attributes in aliases.get(name, ()):
            value: object = module
            for attribute in attributes:
                if attribute.startswith("_") or value is MISSING:
                    value = MISSING
                    break
                value = _step(value, attribute)
            bind(target, value)
    return names


def _path(node: ast.AST) -> list[str] | None:
    """``["torch", "nn", "functional"]`` of ``torch.nn.functional``; None for other
    expressions."""
    attributes = []
    while isinstance(node, ast.Attribute):
        attributes.append(node.attr)
        node = node.value
    return [node.id, *reversed(attributes)] if isinstance(node, ast.Name) else None


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
    imported name that is private, a door or a module outside the list."""
    if isinstance(node, ast.ImportFrom):
        if node.level:
            return ["a relative import"]
        if node.module == "__future__" and [(a.name, a.asname) for a in node.names] \
                == [("annotations", None)]:
            return []
        why = _import_of(node.module or "")
        if why:
            return [why]
        if any(alias.name == "*" for alias in node.names):
            return ["a star import (it binds names no one reads)"]
        found = []
        for alias in node.names:
            why = _attribute(alias.name)
            value = MISSING if why else _step(_load(node.module), alias.name)
            if isinstance(value, types.ModuleType) and not _allowed_module(value):
                why = f"an import of {value.__name__} (outside the allowed modules)"
            why = why or _runs_code_unseen(value)
            found += [why] if why else []
        return found
    return [why for alias in node.names if (why := _import_of(alias.name))]


def _import_of(dotted: str) -> str:
    """Why importing module ``dotted`` is not plain, or "": it and each module on its way must
    be allowed (``import torch.utils.data`` imports torch.utils)."""
    parts = dotted.split(".")
    if all(_allowed_name(".".join(parts[:i])) for i in range(1, len(parts) + 1)):
        return ""
    return f"an import of {dotted} (outside the allowed modules)"


def _own_objects(trees: list[list[ast.AST]]) -> set[str]:
    """The names the student's cells bind to objects of their own (an assignment, an argument,
    a loop variable, a function or a class), whose attributes plain code may set (``self.w =
    ...``, ``model.weight = ...``). Not theirs: a name bound by an import (``torch``, ``F`` of
    ``import torch.nn.functional as F``), or assigned from such a name by a plain chain of
    attributes (``c = mha.checks.ch01``), across the cells; nor a name only the instructor's
    cells bind (chapter 1's ``torch``). A worklist over the graph of such assignments: each
    name is visited once (linear in the cells' size)."""
    bound: set[str] = set()
    modules: set[str] = set()
    chains: list[tuple[str, str | None]] = []
    for tree in trees:
        for node in tree:
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
                    and isinstance(node.value, ast.Name | ast.Attribute):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                chains += [(t.id, _root(node.value)) for t in targets if isinstance(t, ast.Name)]
    # a chain from a module, or from a name the student's cells do not bind at all
    follows: dict[str | None, list[str]] = {}
    for name, root in chains:
        follows.setdefault(root, []).append(name)
        if root not in bound:
            modules.add(name)
    queue = deque(modules)
    while queue:
        for name in follows.pop(queue.popleft(), ()):
            if name not in modules:
                modules.add(name)
                queue.append(name)
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


# where the class ``type(x)`` gives may go: compared, an attribute of it read, shown
READS_OF_A_TYPE = (ast.Compare, ast.Attribute, ast.FormattedValue, ast.Expr)
SHOWN_BY = frozenset({"print", "str", "repr", "isinstance", "issubclass"})


def _allowed_type_calls(tree: list[ast.AST], parents: dict[int, ast.AST]) -> set[int]:
    """The ``type`` names of ``tree`` called as ``type(x)``: one argument, and a result that is
    only read (compared, an attribute of it, printed): ``type(int)`` is ``type`` itself, which
    bound or called makes a class with any dunder (attack 47: ``T = type(int)``, then
    ``T('C', (), {'_' * 2 + 'del' + '_' * 2: f})``)."""
    allowed = set()
    for node in tree:
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id == "type" and len(node.args) == 1 and not node.keywords
                and not isinstance(node.args[0], ast.Starred)):
            continue
        parent = parents.get(id(node))
        if isinstance(parent, READS_OF_A_TYPE) and not (
                isinstance(parent, ast.Attribute) and parent.value is not node) or \
                isinstance(parent, ast.Call) and parent.func is not node and \
                isinstance(parent.func, ast.Name) and parent.func.id in SHOWN_BY:
            allowed.add(id(node.func))
    return allowed


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


def _literal_format_only(call: ast.AST | None, func: ast.AST) -> bool:
    """Whether ``func`` (``ax.bar_label``) is called with no ``fmt``, or a literal one whose
    fields read no door: its format string reads attributes of the values (attack 52)."""
    if not (isinstance(call, ast.Call) and call.func is func):
        return False
    fmt = [k.value for k in call.keywords if k.arg == "fmt"]
    if any(k.arg is None for k in call.keywords):  # **options: a fmt the rule cannot read
        return False
    return all(isinstance(f, ast.Constant) and isinstance(f.value, str)
               and not _format_fields(f.value) for f in fmt)


def _image_format(value: ast.AST) -> str:
    """Why a ``format=`` keyword (savefig's) is not plain: a raw pixel buffer, or a format the
    rule cannot read."""
    if not (isinstance(value, ast.Constant) and isinstance(value.value, str)):
        return "format= given a value the rule cannot read"
    if value.value.lower() in RAW_IMAGE_FORMATS:
        return f"format={value.value!r}, a raw pixel buffer written to a file"
    return ""

