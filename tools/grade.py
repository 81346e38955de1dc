"""Grade submitted notebooks in a sandbox, with verdicts computed outside it.

    python tools/grade.py SUBMISSIONS [--jobs 2] [--timeout 300] [--cell-timeout 120]
                          [--out FOLDER] [--seed N] [--no-sandbox]

Every ``*.ipynb`` under SUBMISSIONS (any depth, e.g. one folder per student) is matched to its
chapter by file name (``.../01_attention_recap.ipynb``, ``alice_01_attention_recap.ipynb``) or,
failing that, by the exercise labels it contains. For each submission:

1. its cells are read (the submission's own check cells are dropped) and, where each of the
   instructor's check cells belongs, a *capture* of the answer the check is called with;
2. the cells run in a bubblewrap sandbox (tools/sandbox.py, tools/run_notebook.py): no network,
   no view of this machine's files, processes or environment, limits on memory, processes, disk
   and time;
3. at each capture the grader runs the chapter's check **in its own process**: the check draws
   its inputs from a seed picked for this grading run (unknown to students), sends them to the
   sandbox as plain data, gets the student's function's results back as plain data (JSON, parsed
   strictly) and compares them with its own reference. Nothing the submission prints or patches
   is read as a verdict.

Each submission is graded by one of ``--jobs`` grading processes (``grade.py --worker``), so
that one sandbox's messages are parsed beside no other's. Ctrl-C or SIGTERM stops every grading
process and sandbox within seconds and keeps the ``.part`` files for ``--resume``.

Output (in SUBMISSIONS, or ``--out``), written a notebook at a time as results come in and
replaced atomically at the end, never through a symbolic link, with names escaped for a
terminal and a spreadsheet: ``grades.csv`` (``notebook,exercise,points,max_points``; exercises
graded by hand have empty points) and ``grading_log.csv`` (status, the check's message, which is
feedback a student may read, seconds, errors, flags for code that deserves a human look, and the
problem with the whole notebook if any: skipped files, duplicates, chapter mismatches, limits).
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import csv
import dataclasses
import io
import json
import os
import queue
import re
import secrets
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import unicodedata
from dataclasses import asdict, dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import sandbox  # noqa: E402
from exercise_format import (  # noqa: E402
    LABEL,
    CheckInfo,
    Exercise,
    FormatError,
    chapter_notebooks,
    check_info,
    parse,
    source,
)
from student_edition import stub_regions, student_edition  # noqa: E402

from mha.exercises import (  # noqa: E402
    Channel,
    ProtocolError,
    Result,
    dumps,
    evaluate,
    loads,
    set_grading_seed,
)

ROOT = Path(__file__).resolve().parent.parent

MAX_NOTEBOOK_BYTES = 20 * 2**20  # a larger submission is not graded
MAX_CELLS = 2000
# One line from the sandbox. The largest an honest chapter sends is 0.66 MB (chapter 2; the
# others 0.02 MB or less, measured on every chapter's solutions in November 2026); a longer line
# stops that notebook, and so do more than MAX_JUNK_LINES lines that are no message. Each
# submission's lines are parsed by its own grading process (see Workers), so a flood costs its
# neighbours nothing but the CPU time any busy notebook takes.
MAX_MESSAGE_BYTES = 4 * 2**20
MAX_JUNK_LINES = 16  # lines that are no message: the runner sends none, so this is on purpose
MAX_ERRORS_COUNTED = 10_000
# The per-cell limit is kept in the sandbox (SIGALRM: the cell is interrupted, the notebook goes
# on) and, as a backstop, here: a step that sends nothing for this much longer is stopped.
CELL_GRACE = 10.0
OUTPUT_NAMES = {f"{stem}{end}" for stem in ("grades", "grading_log", "grades.previous",
                                             "grading_log.previous")
                for end in (".csv", ".csv.part")}
GRADES_HEADER = ["notebook", "exercise", "points", "max_points"]
LOG_HEADER = ["notebook", "exercise", "status", "message", "seconds", "errors", "flags",
              "problem"]

# Code that reaches for the machine or the grading machinery instead of solving the exercise.
# None of it can change a grade (the verdicts are computed outside the sandbox); a flag tells
# the instructor that someone tried. Only cells that differ from every cell of the instructor's
# notebook are read, so the setup cell and the chapter's own code never raise a flag.
SUSPICIOUS = {
    "reads /proc or secrets": re.compile(r"/proc\b|\benviron\b|\.ssh\b|getenv"),
    "processes": re.compile(r"\bsubprocess\b|\bfork\w*|\bos\.system\b|\bpty\b|start_new_"
                            r"session|\bsetsid\b|\bexec[lv]p?e?\b|\bspawn\w*|\bpopen\b|"
                            r"\bsystem\s*\(|\bkill(pg)?\b|\bmultiprocessing\b|\bdaemon\b"),
    "shell escapes": re.compile(r"(?m)^\s*!|%%?(bash|sh|script|system|sx)\b|get_ipython\b"),
    "network": re.compile(r"\bsocket\b|\burllib\b|\brequests\.|\bhttp\.client\b"),
    "low-level": re.compile(r"\bctypes\b|\bcffi\b|\bptrace\b|\bsys\.settrace\b"),
    "patches the grading": re.compile(r"\bmha\.(exercises|checks)\b|"
                                      r"from\s+mha\s+import[^\n]*\b(exercises|checks)\b|"
                                      r"__torch_function__|\bsys\.modules\b|"
                                      r"\btorch\.\w+\s*=[^=]|\bsys\.std(out|err)\s*=[^=]"),
    "writes startup or package files": re.compile(r"\.ipython|profile_default|__file__|"
                                                  r"site-packages|\.pth\b"),
    "fake verdict": re.compile(r"Exercise \d+\.\d+ \[|✓"),
    "touches the grader's files": re.compile(r"/autograder\b|\bgrades\.csv|\bgrading_log\b|"
                                             r"\bresults\.json|\.csv\.part\b"),
    "obfuscation": re.compile(r"\bgetattr\([^)]*(\+|['\"])|\bexec\(|\beval\(|__import__|"
                              r"\bcompile\(|\bimportlib\b|\bvars\(|\bglobals\(|"
                              r"\b__dict__\b|\bimport_module\b"),
}


@dataclass
class Assignment:
    """A chapter notebook, the instructor's version, with the exercises it grades."""

    name: str  # file stem, "01_attention_recap"
    chapter: str  # "01"
    nb: dict
    exercises: list[Exercise]
    info: dict[int, CheckInfo]  # check cell index -> what that check grades
    captures: dict[int, str]  # check cell index -> the expression its check is called with
    checkers: dict[int, object]  # check cell index -> the check function (mha.checks)
    cells: set[str] = field(default_factory=set)  # every code cell's source
    # exercise -> the dotted names of the mha callables its checks compare with ("mha.attention")
    references: dict[str, tuple[str, ...]] = field(default_factory=dict)
    given: set[str] = field(default_factory=set)  # mha names the student edition's code uses

    def max_points(self, exercise: Exercise) -> int | None:
        if not exercise.checks:  # a derivation or an experiment: graded by hand
            return None
        return sum(self.info[i].max_points for i in exercise.checks)


def capture_expression(text: str) -> str:
    """The argument of the ``mha.checks.X.Y(...)`` call in a check cell's source."""
    for node in ast.walk(ast.parse(text)):
        if (isinstance(node, ast.Call) and len(node.args) == 1 and not node.keywords
                and ast.unparse(node.func).startswith("mha.checks.")):
            return ast.unparse(node.args[0])
    raise FormatError(f"no mha.checks call with one argument in {text!r}")


def load_assignment(path: Path) -> Assignment:
    import importlib

    nb = json.loads(path.read_text(encoding="utf-8"))
    exercises = parse(nb)
    info, captures, checkers, references = {}, {}, {}, {}
    for exercise in exercises:
        for index, (module, check) in zip(exercise.checks, exercise.calls, strict=True):
            function = getattr(importlib.import_module(f"mha.checks.{module}"), check)
            named = (getattr(function, "reference_names", ()) or
                     getattr(getattr(function, "checker", None), "reference_names", ()))
            references[exercise.name] = tuple(dict.fromkeys(
                [*references.get(exercise.name, ()), *(n for n in named if isinstance(n, str))]))
            info[index] = check_info(module, check)
            if info[index].exercise != exercise.name:
                raise FormatError(f"{path.name} cell {index}: the check of {exercise.label} "
                                  f"grades exercise {info[index].exercise}, not {exercise.name}")
            captures[index] = capture_expression(source(nb["cells"][index]))
            checkers[index] = getattr(importlib.import_module(f"mha.checks.{module}"),
                                      check).checker
    cells = {source(c) for c in nb["cells"] if c.get("cell_type") == "code"}
    # what the student edition's own code already calls is no sign of anything
    given = mha_names([source(c) for c in student_edition(nb)["cells"]
                       if c.get("cell_type") == "code"])
    references = {k: tuple(r for r in v if r not in given) for k, v in references.items()}
    return Assignment(path.stem, path.stem[:2], nb, exercises, info, captures, checkers, cells,
                      {k: v for k, v in references.items() if v}, given)


@dataclass
class Outcome:
    """What grading one submission found, per exercise name."""

    notebook: str
    assignment: Assignment | None
    points: dict[str, int] = field(default_factory=dict)
    status: dict[str, str] = field(default_factory=dict)
    message: dict[str, str] = field(default_factory=dict)
    stubs: dict[str, str] = field(default_factory=dict)  # --with-stubs: exercise -> status
    seconds: float = 0.0
    problem: str = ""  # what went wrong with the whole notebook, or a warning about it
    errors: int = 0  # cells that ended in an error
    flags: list[str] = field(default_factory=list)


# ---------------------------------------------------------------------------------------------
# Names a student chose, shown to the instructor: in a terminal and in a spreadsheet

BIDI = set("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
FORMULA_START = ("=", "+", "-", "@", "\t", "\r", "'")  # OWASP's list, and the quote itself


def display(name: str) -> str:
    """``name`` with every character a terminal could act on escaped (one to one, so names stay
    apart): control characters, bidi overrides, other invisible format characters, and the bytes
    of a file name that is not UTF-8 (``os`` hands them over as lone surrogates) as ``\\xNN``;
    the backslash itself doubled."""
    out = []
    for char in name:
        code = ord(char)
        if 0xDC80 <= code <= 0xDCFF:  # an undecodable byte, kept by surrogateescape
            out.append(f"\\x{code - 0xDC00:02x}")
        elif char == "\\":
            out.append("\\\\")
        elif char in BIDI or unicodedata.category(char) in ("Cc", "Cf", "Cs", "Co", "Cn",
                                                            "Zl", "Zp"):
            out.append(f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}")
        else:
            out.append(char)
    return "".join(out)


def terminal(text: str) -> str:
    """A line for the terminal: whatever ``display`` missed (messages, problems) made inert."""
    return "".join(c if c.isprintable() and c not in BIDI else f"\\u{ord(c):04x}"
                   for c in text)


def cell(value: object) -> object:
    """A CSV field a spreadsheet shows as text, never runs as a formula (OWASP's CSV injection
    advice: a field starting with = + - @ tab or CR gets a leading quote; so does one starting
    with a quote, so that the change is one to one)."""
    if isinstance(value, str) and value.startswith(FORMULA_START):
        return "'" + value
    return value


def read_regular(path: Path, limit: int) -> bytes:
    """The bytes of a regular file, never following a symbolic link and never blocking on a FIFO
    that replaced it after it was found; ``ValueError`` otherwise, or if larger than ``limit``."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as error:
        raise ValueError(f"cannot be read ({error.strerror})") from None
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ValueError("not a regular file: not read")
        if info.st_size > limit:
            raise ValueError(f"larger than {limit // 2**20} MB: not graded")
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise ValueError(f"larger than {limit // 2**20} MB: not graded")
    return data


# ---------------------------------------------------------------------------------------------
# Reading a submission (in the grader's process: only json.loads and checks of the structure)

def read_notebook(data: bytes) -> dict:
    """The submission as ``{"cells": [...]}`` of well-formed cells; ``ValueError`` if it is none."""
    try:
        nb = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise ValueError("not a notebook: the file is not JSON") from None
    if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list):
        raise ValueError("not a notebook: no list of cells")
    if len(nb["cells"]) > MAX_CELLS:
        raise ValueError(f"more than {MAX_CELLS} cells")
    cells, odd_tags = [], 0
    for cell in nb["cells"]:
        if not isinstance(cell, dict):
            continue  # a malformed cell is dropped (and counted below)
        text = cell.get("source", "")
        if isinstance(text, list) and all(isinstance(t, str) for t in text):
            text = "".join(text)
        metadata = cell.get("metadata")
        cell_tags = metadata.get("tags") if isinstance(metadata, dict) else None
        if not isinstance(cell_tags, list) or not all(isinstance(t, str) for t in cell_tags):
            odd_tags += cell_tags is not None
            cell_tags = []
        kind = cell.get("cell_type")
        if not isinstance(text, str) or kind not in ("code", "markdown", "raw"):
            continue
        cells.append({"cell_type": kind, "source": text, "metadata": {"tags": cell_tags}})
    dropped = len(nb["cells"]) - len(cells)
    return {"cells": cells, "dropped": dropped, "odd_tags": odd_tags}


def labels(nb: dict) -> set[str]:
    return {m.group(2) for cell in nb["cells"] if cell["cell_type"] == "markdown"
            for m in LABEL.finditer(cell["source"])}


def by_name(relative: str, assignments: list[Assignment]) -> Assignment | None:
    stem = Path(relative).stem
    found = [a for a in assignments if a.name in stem]
    return max(found, key=lambda a: len(a.name)) if found else None


def chapter_of(relative: str, nb: dict, assignments: list[Assignment]
               ) -> tuple[Assignment | None, str]:
    """The chapter a notebook is graded as: the one its name holds, unless its exercise labels
    are all of one other chapter (or its name holds none); and a note when the two disagree."""
    named = by_name(relative, assignments)
    chapters = labels(nb)
    if named is None or (chapters and named.chapter not in chapters):
        candidates = [a for a in assignments if a.chapter in chapters]
        if len(candidates) == 1:
            found = candidates[0]
            return found, "" if named is None else (
                f"saved as chapter {named.chapter} ({named.name}) but its exercises are "
                f"chapter {found.chapter}'s: graded as {found.name}")
    return named, ""


def chapter_of_file(relative: str, path: Path | None, assignments: list[Assignment]
                    ) -> Assignment | None:
    """``chapter_of`` for a file (read, never run): by its name alone if it cannot be read."""
    if path is None:
        return None
    try:
        nb = read_notebook(read_regular(path, MAX_NOTEBOOK_BYTES))
    except (OSError, ValueError):
        return by_name(relative, assignments)
    return chapter_of(relative, nb, assignments)[0]


def flags(nb: dict, assignment: Assignment) -> list[str]:
    new = [c["source"] for c in nb["cells"]
           if c["cell_type"] == "code" and c["source"] not in assignment.cells]
    code = "\n".join(new)
    found = [name for name, pattern in SUSPICIOUS.items() if pattern.search(code)]
    used = mha_names(new)
    for exercise, references in assignment.references.items():
        called = [r for r in references if any(
            u == r or (u.split(".")[-1] == r.split(".")[-1]) for u in used - assignment.given)]
        if called:
            found.append(f"calls the reference of exercise {exercise} ({', '.join(called)})")
    return found


def mha_names(sources: list[str]) -> set[str]:
    """The dotted names of ``mha`` that some code uses: ``mha.attention(...)``, ``from mha import
    attention as a`` then ``a(...)``, ``import mha.layers as L`` then ``L.attention``. A cell that
    is not Python (IPython magics) is read line by line, as far as it parses."""
    used: set[str] = set()
    for text in sources:
        try:
            trees = [ast.parse(text)]
        except (SyntaxError, ValueError):
            trees = []
            for line in text.splitlines():
                try:
                    trees.append(ast.parse(line.strip()))
                except (SyntaxError, ValueError):
                    continue
        for tree in trees:
            aliases = {"mha": "mha"}
            for node in ast.walk(tree):
                if isinstance(node, ast.Import):
                    for name in node.names:
                        if name.name.split(".")[0] == "mha":
                            used.add(name.name)
                            if name.asname:
                                aliases[name.asname] = name.name
                elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] \
                        == "mha":
                    for name in node.names:
                        used.add(f"{node.module}.{name.name}")
                        aliases[name.asname or name.name] = f"{node.module}.{name.name}"
            for node in ast.walk(tree):
                if isinstance(node, ast.Attribute | ast.Name):
                    dotted = _dotted(node)
                    if dotted and dotted.split(".")[0] in aliases:
                        head, _, rest = dotted.partition(".")
                        used.add(".".join(filter(None, [aliases[head], rest])))
    return used


def _dotted(node: ast.AST) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return ".".join([node.id, *reversed(parts)])


def plan(nb: dict, assignment: Assignment, *, with_stubs: bool = False) -> list[dict]:
    """The steps the sandbox runs: the submission's code cells (its check cells dropped) and,
    after the student's last solution cell of each exercise, a capture per instructor check."""
    cells = [c for c in nb["cells"] if not (c["cell_type"] == "code" and "check" in
                                            c["metadata"]["tags"])]
    prompts: dict[str, int] = {}
    for position, cell in enumerate(cells):
        if cell["cell_type"] == "markdown":
            for m in LABEL.finditer(cell["source"]):
                prompts.setdefault(m.group(1), position)
    order = sorted(prompts.values())
    after: dict[int, list[int]] = {}
    at_end: list[int] = []
    for exercise in assignment.exercises:
        if not exercise.checks:
            continue
        start = prompts.get(exercise.label)
        if start is None:  # the prompt was deleted: capture at the end, where all is defined
            at_end.extend(exercise.checks)
            continue
        stop = next((p for p in order if p > start), len(cells))
        solutions = [p for p in range(start, stop) if cells[p]["cell_type"] == "code"
                     and "solution" in cells[p]["metadata"]["tags"]]
        after.setdefault(solutions[-1] if solutions else start, []).extend(exercise.checks)

    def captures(indices: list[int], prefix: str = "") -> list[dict]:
        return [{"capture": f"{prefix}{i}", "expr": assignment.captures[i]} for i in indices]

    steps: list[dict] = []
    for position, cell in enumerate(cells):
        if cell["cell_type"] == "code":
            steps.append({"source": cell["source"]})
        steps.extend(captures(after.get(position, [])))
    steps.extend(captures(at_end))
    if with_stubs:  # the student edition's stub of every checked exercise, in the same kernel
        for exercise in assignment.exercises:
            if exercise.checks:
                for index in exercise.marked:
                    steps.append({"source": stub_regions(source(assignment.nb["cells"][index]))})
                steps.extend(captures(exercise.checks, "stub:"))
    return steps


# ---------------------------------------------------------------------------------------------
# Talking to the sandbox

class Messages:
    """Lines from the sandbox's stdout, read by a thread, handed out with a deadline."""

    def __init__(self, stream):
        self.queue: queue.Queue = queue.Queue(maxsize=16)  # at most 16 lines held in memory
        self.too_long = False
        self.junk = 0
        self.thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self.thread.start()

    def _read(self, stream) -> None:
        try:
            while True:
                line = stream.readline(MAX_MESSAGE_BYTES)
                if not line.endswith(b"\n"):
                    self.too_long = len(line) >= MAX_MESSAGE_BYTES
                    break  # the end, or a line too long to be a message: the notebook stops
                self.queue.put(line)
        except (OSError, ValueError):
            pass
        self.queue.put(None)

    def next(self, deadline: float) -> dict | None:
        """The next message, ``None`` at the end or at the deadline; junk is skipped, up to
        ``MAX_JUNK_LINES`` lines, and then the end."""
        while self.junk <= MAX_JUNK_LINES:
            try:
                line = self.queue.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                return None
            if line is None:
                self.queue.put(None)
                return None
            try:
                return loads(line)
            except ProtocolError:
                self.junk += 1  # parsing junk is work: a flood ends at the loop's condition
        return None


class SandboxChannel(Channel):
    """The check's end of the pipe to one sandbox (see mha.exercises.Channel)."""

    def __init__(self, process, messages: Messages, deadline: float, call_limit: float):
        self.process, self.messages, self.deadline = process, messages, deadline
        self.call_limit = call_limit  # one call of the answer, kept from here

    def request(self, message: dict) -> dict:
        try:
            self.process.stdin.write(dumps(message))
            self.process.stdin.flush()
        except (OSError, ValueError):
            raise ProtocolError("the notebook stopped") from None
        reply = self.messages.next(min(self.deadline, time.monotonic() + self.call_limit))
        if reply is None:
            raise ProtocolError("no reply before the time limit, or the notebook stopped")
        return reply


class Sanitiser:
    """Feedback goes to students: no path of the grader's machine, no value of its environment."""

    def __init__(self, extra: list[str]):
        values = [v for k, v in os.environ.items() if len(v) >= 6 and v not in ("/usr/bin",)]
        paths = [str(ROOT), str(Path.home()), tempfile.gettempdir(), sys.prefix,
                 sys.base_prefix, *extra]
        self.secrets = sorted({s for s in values + paths if s and len(s) >= 4}, key=len,
                              reverse=True)

    def __call__(self, text: str) -> str:
        for secret in self.secrets:
            text = text.replace(secret, "<hidden>")
        return " ".join("".join(c if c.isprintable() else " " for c in text).split())[:500]


@dataclass
class Settings:
    timeout: float
    cell_timeout: float
    sandboxed: bool
    limits: sandbox.Limits
    with_stubs: bool = False
    user: sandbox.User | None = None  # run submissions as this user (the grader is root)


def grade_one(relative: str, path: Path, assignments: list[Assignment], prefix: sandbox.Prefix,
              settings: Settings, problem: str, clean: Sanitiser) -> Outcome:
    try:
        nb = read_notebook(read_regular(path, MAX_NOTEBOOK_BYTES))
    except (OSError, ValueError) as error:
        assignment = by_name(relative, assignments)
        outcome = Outcome(display(relative), assignment,
                          problem="; ".join(filter(None, [str(error), problem])))
        _not_graded(outcome, str(error))
        return outcome
    assignment, note = chapter_of(relative, nb, assignments)
    problem = "; ".join(filter(None, [problem, note]))
    outcome = Outcome(display(relative), assignment, problem=problem)
    if assignment is None:
        outcome.problem = "; ".join(filter(None, [
            "no chapter notebook matches its name or its exercise labels", problem]))
        return outcome
    if nb["dropped"]:
        outcome.problem = "; ".join(filter(None, [
            outcome.problem, f"{nb['dropped']} malformed cell(s) skipped"]))
    if nb["odd_tags"]:
        outcome.problem = "; ".join(filter(None, [
            outcome.problem, f"{nb['odd_tags']} cell(s) with malformed tags (tags ignored)"]))
    outcome.flags = flags(nb, assignment)
    steps = plan(nb, assignment, with_stubs=settings.with_stubs)
    graded_steps = len(plan(nb, assignment)) if settings.with_stubs else len(steps)
    checks = {str(i): i for i in assignment.info} | (
        {f"stub:{i}": i for i in assignment.info} if settings.with_stubs else {})
    results: dict[str, Result] = {}
    work = Path(tempfile.mkdtemp(prefix="mha-grade-one-"))
    plan_path = work / "plan.json"
    plan_path.write_text(json.dumps({"cells": steps, "cell_timeout": settings.cell_timeout}))
    plan_path.chmod(0o444)
    if settings.user is not None:
        work.chmod(0o711)  # the submission's user may reach its plan and home, list nothing
    start = time.monotonic()
    deadline = start + settings.timeout
    step_limit = settings.cell_timeout + CELL_GRACE
    unfinished = ""
    if settings.sandboxed:
        process, cgroup = sandbox.start(prefix, plan_path, settings.limits, settings.user)
    else:
        process, cgroup = sandbox.start_unsandboxed(prefix, plan_path, settings.limits, work,
                                                    settings.user)
    RUNNING.add(process, cgroup)
    # a watchdog: whatever blocks (a sandbox that stops reading its input), the deadline holds
    watchdog = threading.Timer(settings.timeout + 10, sandbox.stop, (process, cgroup))
    watchdog.daemon = True
    watchdog.start()
    try:
        messages = Messages(process.stdout)
        channel = SandboxChannel(process, messages, deadline, step_limit)
        finished = started = False
        while not finished:
            # every step says when it starts: one that runs past its limit (a cell that ignores
            # SIGALRM) is stopped here, from outside the sandbox. Starting (importing torch)
            # is no step: only the notebook's limit bounds it
            message = messages.next(min(deadline, time.monotonic() + step_limit)
                                    if started else deadline)
            if message is None:
                break
            started = True
            if "cell" in message:
                if type(message["cell"]) is int and message["cell"] >= graded_steps:
                    continue  # a stub cell added by --with-stubs
                outcome.errors = min(outcome.errors + 1, MAX_ERRORS_COUNTED)
            elif "ready" in message:
                key = message["ready"]
                if key in checks and key not in results:
                    index = checks[key]
                    info = assignment.info[index]
                    if "types" in message and isinstance(message["types"], list):
                        answer = channel.ref(0, [t for t in message["types"][:20]
                                                 if isinstance(t, str)])
                        result = evaluate(assignment.checkers[index], info.exercise,
                                          info.max_points, answer)
                    else:
                        result = Result(info.exercise, 0, info.max_points, "error",
                                        "the answer is not defined where its check runs")
                    results[key] = result
                try:
                    process.stdin.write(b'{"op":"done"}\n')
                    process.stdin.flush()
                except (OSError, ValueError):
                    break
            elif message.get("finished") is True:
                finished = True
        if not finished:
            if time.monotonic() >= deadline:
                unfinished = f"stopped after the time limit of {settings.timeout:.0f} s"
            elif messages.junk > MAX_JUNK_LINES:
                unfinished = (f"stopped: the notebook wrote more than {MAX_JUNK_LINES} lines "
                              "that are not messages on the grader's channel")
            elif messages.too_long:
                unfinished = (f"stopped: the notebook wrote a line of more than "
                              f"{MAX_MESSAGE_BYTES // 2**20} MB on the grader's channel")
            elif process.poll() is None:
                unfinished = (f"stopped: a cell ran past the cell limit of "
                              f"{settings.cell_timeout:.0f} s and did not let itself be "
                              "interrupted")
            else:
                unfinished = "the notebook stopped before its end (it crashed, exited or " \
                             "hit a limit)"
    except ProtocolError as error:  # pragma: no cover (each check catches its own)
        unfinished = f"the notebook broke the grading protocol ({error})"
    finally:
        outcome.seconds = time.monotonic() - start
        watchdog.cancel()
        sandbox.stop(process, cgroup)
        if settings.user is not None:  # one submission at a time per user: all of it goes
            left = sandbox.kill_user(settings.user)
            if left:
                outcome.problem = "; ".join(filter(None, [
                    outcome.problem, f"{left} process(es) it left running were killed"]))
        RUNNING.discard(process)
        shutil.rmtree(work, ignore_errors=True)
    if unfinished:
        outcome.problem = "; ".join(filter(None, [unfinished, outcome.problem]))
    for exercise in assignment.exercises:
        if not exercise.checks:
            outcome.status[exercise.name] = "by hand"
            continue
        got = [results.get(str(i)) for i in exercise.checks]
        outcome.points[exercise.name] = sum(r.points for r in got if r and
                                            r.status == "correct")
        statuses = [r.status if r else (unfinished or "no result") for r in got]
        outcome.status[exercise.name] = next((s for s in statuses if s != "correct"),
                                             "correct")
        outcome.message[exercise.name] = clean(" | ".join(
            r.message if r else "its check was not reached" for r in got))
        if settings.with_stubs:
            stubs = [results.get(f"stub:{i}") for i in exercise.checks]
            outcome.stubs[exercise.name] = ",".join(
                f"{r.status}:{r.points}" if r else "none" for r in stubs)
    return outcome


def _not_graded(outcome: Outcome, why: str) -> None:
    if outcome.assignment is None:
        return
    for exercise in outcome.assignment.exercises:
        if exercise.checks:
            outcome.points[exercise.name] = 0
            outcome.status[exercise.name] = "not graded"
            outcome.message[exercise.name] = why
        else:
            outcome.status[exercise.name] = "by hand"


# ---------------------------------------------------------------------------------------------
# Finding submissions, writing results

@dataclass
class Found:
    relative: str
    path: Path | None  # None: reported, not graded
    problem: str = ""


def _kind(entry: os.DirEntry) -> str:
    try:
        mode = entry.stat(follow_symlinks=False).st_mode
    except OSError:
        return "a file that vanished"
    return ("a FIFO" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode)
            else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "not a regular file")


TEMPORARY = re.compile(r"^\.+(grades|grading_log)\.")  # the Writer's, while it writes


def find_submissions(folder: Path, assignments: list[Assignment],
                     out: Path | None = None) -> list[Found]:
    """Every entry under ``folder``: a notebook to grade, or a row saying why it is not graded
    (symbolic links, hidden files and folders, FIFOs and other special files are reported,
    never followed, opened or searched). The grader's own outputs in ``out`` are left out."""
    found: list[Found] = []
    own = out.resolve() if out is not None else None
    stack = [folder]
    while stack:
        current = stack.pop()
        ours = own is not None and Path(current).resolve() == own
        try:
            entries = sorted(os.scandir(current), key=lambda e: e.name)
        except OSError as error:
            if current != folder:
                relative = Path(current).relative_to(folder).as_posix()
                found.append(Found(relative, None, f"a folder that cannot be read "
                                                   f"({error.strerror}): not graded"))
            continue
        for entry in entries:
            relative = Path(entry.path).relative_to(folder).as_posix()
            if ours and (entry.name in OUTPUT_NAMES or TEMPORARY.match(entry.name)):
                continue
            if entry.is_symlink():
                found.append(Found(relative, None, "a symbolic link: not followed, not graded"))
            elif entry.name.startswith("."):
                what = "folder" if entry.is_dir(follow_symlinks=False) else "file"
                found.append(Found(relative, None, (
                    f"warning: a hidden {what} (its name starts with '.'): not graded"
                    + (", nothing in it was read" if what == "folder" else "")
                    + "; rename it to grade it")))
            elif entry.is_dir(follow_symlinks=False):
                stack.append(Path(entry.path))
            elif not entry.is_file(follow_symlinks=False):
                found.append(Found(relative, None, f"warning: {_kind(entry)}, not a file: "
                                                   "not opened, not graded"))
            elif entry.name.endswith(".ipynb"):
                found.append(Found(relative, Path(entry.path)))
            elif entry.name.lower().endswith(".ipynb"):
                found.append(Found(relative, None, "not graded: the name must end in .ipynb "
                                                   "(lower case); rename it and grade again"))
            else:
                found.append(Found(relative, None, "not a notebook (.ipynb): skipped"))
    found.sort(key=lambda f: f.relative)
    # two notebooks of one chapter by one student: both graded, both reported. A student is a
    # folder below SUBMISSIONS, or, for files directly in it, the prefix of the file name
    for items in same_chapter(found, assignments).values():
        if len(items) > 1:
            for item in items:
                others = ", ".join(display(o.relative) for o in items if o is not item)
                item.problem = f"duplicate: the same student's chapter is also in {others}"
    return found


def same_chapter(found: list[Found], assignments: list[Assignment]
                 ) -> dict[tuple[str, str], list[Found]]:
    """(student, chapter) -> the notebooks found for it (the chapter each is graded as: by its
    name or its exercise labels, as ``chapter_of``)."""
    owners: dict[tuple[str, str], list[Found]] = {}
    for item in found:
        assignment = chapter_of_file(item.relative, item.path, assignments)
        if assignment is not None:
            parent, _, name = item.relative.rpartition("/")
            owner = parent or name.split(assignment.name)[0].strip(" _-.")
            owners.setdefault((owner, assignment.chapter), []).append(item)
    return owners


def create(path: Path, mode: int = 0o600):
    """A new, empty text file named ``path``, never written through what had that name: it is
    made under a fresh random name (``O_CREAT|O_EXCL|O_NOFOLLOW``, by ``mkstemp``) and renamed
    over ``path``, which replaces a symbolic link there rather than following it."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, mode)
        os.replace(tmp, path)
    except OSError:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return os.fdopen(fd, "w", newline="", encoding="utf-8", errors="backslashreplace")


def _read_rows(path: Path) -> list[dict]:
    """The rows of one of our CSV files; ``ValueError`` if ``path`` is a symbolic link or not a
    regular file (never followed), ``[]`` if there is none."""
    if not os.path.lexists(path):
        return []
    text = read_regular(path, 2**31).decode("utf-8", errors="replace")
    try:
        return [r for r in csv.DictReader(io.StringIO(text, newline=""))
                if r.get("notebook") is not None]
    except csv.Error as error:
        raise ValueError(f"not a CSV file ({error})") from None


class Writer:
    """grades.csv and grading_log.csv: a row per notebook as it finishes, flushed to the
    ``.part`` files; sorted and renamed into place at the end. An interrupted run keeps the
    ``.part`` files (``--resume`` grades only what they lack). No file is written through a
    symbolic link, and a run never replaces a file with fewer rows without keeping the old one
    and saying so (``notes``)."""

    NAMES = (("grades.csv", GRADES_HEADER), ("grading_log.csv", LOG_HEADER))

    def __init__(self, out: Path, resume: bool = False):
        self.out = out
        self.files = {}
        self.notes: list[str] = []
        self.done: set[str] = set()
        kept: dict[str, list[dict]] = {"grades.csv": [], "grading_log.csv": []}
        for name in kept:
            part = out / f"{name}.part"
            try:
                rows = _read_rows(part)
            except ValueError as error:
                self.notes.append(f"warning: {name}.part is not a file of this grader "
                                  f"({error}): replaced, never followed, nothing kept from it")
                continue
            if resume:
                kept[name] = rows
            elif rows:  # an interrupted run's rows: kept aside, not lost
                keep = out / f"{name.removesuffix('.csv')}.previous.csv.part"
                os.replace(part, keep)
                self.notes.append(f"note: {name}.part of an earlier interrupted run "
                                  f"({len(rows)} rows) is kept as {keep.name}; pass --resume "
                                  "to go on from it instead")
        if resume:  # a notebook is done when its log rows were written (they come last)
            self.done = {r["notebook"] for r in kept["grading_log.csv"]}
            kept = {name: [r for r in rows if r["notebook"] in self.done]
                    for name, rows in kept.items()}
        for name, header in self.NAMES:
            handle = create(out / f"{name}.part")
            writer = csv.DictWriter(handle, fieldnames=header, extrasaction="ignore")
            writer.writeheader()
            writer.writerows(kept[name])  # as read: already made safe when first written
            handle.flush()
            self.files[name] = (handle, writer)
        self.lock = threading.Lock()

    def add(self, outcome: Outcome, with_stubs: bool = False) -> None:
        with self.lock:
            for name, rows in (("grades.csv", grade_rows(outcome)),
                               ("grading_log.csv", log_rows(outcome, with_stubs))):
                handle, writer = self.files[name]
                writer.writerows([{k: cell(v) for k, v in row.items()} for row in rows])
                handle.flush()
                os.fsync(handle.fileno())

    def close(self, finish: bool = True) -> list[str]:
        """Close the files; with ``finish``, sort them into place. Returns warnings."""
        warnings = []
        for handle, _ in self.files.values():
            handle.close()
        if not finish:
            return warnings
        for name, header in self.NAMES:
            part = self.out / f"{name}.part"
            rows = sorted(_read_rows(part), key=lambda r: (r["notebook"], _exercise_key(r)))
            target = self.out / name
            try:
                before = len(_read_rows(target))
            except ValueError:
                before = 0
                warnings.append(f"warning: {name} was not a regular file (a symbolic link?): "
                                "replaced, not followed")
            with create(target.with_name(f".{name}.new")) as handle:
                writer = csv.DictWriter(handle, fieldnames=header, lineterminator="\n",
                                        extrasaction="ignore")
                writer.writeheader()
                writer.writerows(rows)
            if before > len(rows):
                keep = target.with_name(f"{name.removesuffix('.csv')}.previous.csv")
                os.replace(target, keep)
                warnings.append(f"warning: {name} had {before} rows and now has {len(rows)}: "
                                f"the old one is kept as {keep.name}")
            os.replace(target.with_name(f".{name}.new"), target)
            part.unlink()
        return warnings


def _exercise_key(row: dict) -> tuple:
    parts = re.findall(r"\d+", row.get("exercise", ""))
    return tuple(int(p) for p in parts) + (row.get("exercise", ""),)


def grade_rows(outcome: Outcome) -> list[dict]:
    if outcome.assignment is None:
        return []
    rows = []
    for exercise in outcome.assignment.exercises:
        most = outcome.assignment.max_points(exercise)
        rows.append({"notebook": outcome.notebook, "exercise": exercise.name,
                     "points": "" if most is None else outcome.points.get(exercise.name, 0),
                     "max_points": "" if most is None else most})
    return rows


def log_rows(outcome: Outcome, with_stubs: bool = False) -> list[dict]:
    names = [e.name for e in outcome.assignment.exercises] if outcome.assignment else [""]
    rows = []
    for name in names:
        rows.append({"notebook": outcome.notebook, "exercise": name,
                     "status": outcome.status.get(name, "not graded"),
                     "message": outcome.message.get(name, ""),
                     "seconds": f"{outcome.seconds:.1f}", "errors": outcome.errors,
                     "flags": "; ".join(outcome.flags), "problem": outcome.problem})
        if with_stubs and name in outcome.stubs:
            rows.append({"notebook": outcome.notebook, "exercise": f"{name} stub",
                         "status": outcome.stubs[name], "message": "", "seconds": "",
                         "errors": "", "flags": "", "problem": ""})
    return rows


def summary_line(outcome: Outcome) -> str:
    if outcome.assignment is None:
        return f"{outcome.notebook}: NOT GRADED: {outcome.problem}"
    parts, total, most = [], 0, 0
    for exercise in outcome.assignment.exercises:
        top = outcome.assignment.max_points(exercise)
        if top is None:
            parts.append(f"{exercise.name} by hand")
            continue
        got = outcome.points.get(exercise.name, 0)
        total, most = total + got, most + top
        parts.append(f"{exercise.name} {got}/{top}")
    line = f"{outcome.notebook}: {total}/{most}  [{', '.join(parts)}] {outcome.seconds:.1f} s"
    if outcome.problem:
        line += f"  ({outcome.problem})"
    if outcome.flags:
        line += f"  REVIEW: {', '.join(outcome.flags)}"
    return line


# ---------------------------------------------------------------------------------------------
# Grading processes: one submission's messages are parsed in its own interpreter

class Running:
    """The sandboxes this process has running, so that an interrupt can stop them."""

    def __init__(self):
        self.lock = threading.Lock()
        self.items: dict[int, tuple] = {}

    def add(self, process, cgroup) -> None:
        with self.lock:
            self.items[process.pid] = (process, cgroup)

    def discard(self, process) -> None:
        with self.lock:
            self.items.pop(process.pid, None)

    def stop_all(self) -> None:
        with self.lock:
            items = list(self.items.values())
        for process, cgroup in items:
            sandbox.stop(process, cgroup)


RUNNING = Running()


def _interrupt(_signum, _frame):
    raise KeyboardInterrupt


def outcome_data(outcome: Outcome) -> dict:
    data = asdict(dataclasses.replace(outcome, assignment=None))
    data["assignment"] = outcome.assignment.name if outcome.assignment else None
    return data


def outcome_from(data: dict, assignments: dict[str, Assignment]) -> Outcome:
    data = dict(data)
    data["assignment"] = assignments.get(data["assignment"]) if data["assignment"] else None
    return Outcome(**data)


def worker(stdin, stdout) -> int:
    """A grading process (``grade.py --worker``): its first line is the run's configuration,
    then one submission per line in, one outcome per line out. SIGTERM stops the sandbox it runs
    and ends it."""
    signal.signal(signal.SIGTERM, _interrupt)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides; it sends SIGTERM
    config = json.loads(stdin.readline())
    set_grading_seed(config["seed"])
    assignments = [load_assignment(Path(p)) for p in config["sources"]]
    assignments = [a for a in assignments if a.exercises]
    prefix = sandbox.Prefix.existing(Path(config["prefix"]))
    user = sandbox.User(**config["user"]) if config["user"] else None
    settings = Settings(config["timeout"], config["cell_timeout"], config["sandboxed"],
                        sandbox.Limits(**config["limits"]), config["with_stubs"], user)
    clean = Sanitiser(config["hide"])
    try:
        for line in stdin:
            job = json.loads(line)
            try:
                outcome = grade_one(job["relative"], Path(job["path"]), assignments, prefix,
                                    settings, job["problem"], clean)
            except Exception as error:  # the grader's own failure: report it, grade the rest
                outcome = Outcome(display(job["relative"]),
                                  by_name(job["relative"], assignments),
                                  problem=f"the grader failed on it ({type(error).__name__})")
                _not_graded(outcome, "not graded: the grader failed on this notebook")
                print(f"  grader error on {display(job['relative'])}: {error!r}",
                      file=sys.stderr)
                traceback.print_exc()
            stdout.write(json.dumps(outcome_data(outcome)).encode() + b"\n")
            stdout.flush()
    except KeyboardInterrupt:
        RUNNING.stop_all()
        return 130
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # nothing left to clean up
    return 0


class Workers:
    """``jobs`` grading processes (``grade.py --worker``), each grading one submission at a
    time. Each parses its own sandbox's messages, so a submission that floods its channel slows
    its own grading process only; the grader's main process reads one short line per notebook."""

    def __init__(self, jobs: int, config: dict):
        self.jobs, self.config = max(1, jobs), config
        self.stopping = threading.Event()
        self.lock = threading.Lock()
        self.processes: list[subprocess.Popen] = []

    def _spawn(self) -> subprocess.Popen:
        process = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "--worker"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, start_new_session=True)
        process.stdin.write(json.dumps(self.config).encode() + b"\n")
        process.stdin.flush()
        with self.lock:
            self.processes.append(process)
        return process

    def _drive(self, todo: queue.Queue, done: queue.Queue) -> None:
        process = None
        while not self.stopping.is_set():
            try:
                item = todo.get_nowait()
            except queue.Empty:
                break
            line = b""
            try:
                if process is None or process.poll() is not None:
                    process = self._spawn()
                process.stdin.write(json.dumps({"relative": item.relative, "path": str(
                    item.path), "problem": item.problem}).encode() + b"\n")
                process.stdin.flush()
                line = process.stdout.readline()
            except (OSError, ValueError):
                pass
            if self.stopping.is_set():
                break
            done.put((item, line))
            if not line:
                process = None  # it died: the next submission gets a fresh one
        if process is not None:
            with contextlib.suppress(OSError):
                process.stdin.close()

    def run(self, items: list[Found]):
        """(item, outcome data or None if its grading process died), as each finishes."""
        todo: queue.Queue = queue.Queue()
        for item in items:
            todo.put(item)
        done: queue.Queue = queue.Queue()
        for _ in range(min(self.jobs, len(items))):
            threading.Thread(target=self._drive, args=(todo, done), daemon=True).start()
        for _ in items:
            while True:
                try:
                    item, line = done.get(timeout=0.2)  # short waits: Ctrl-C gets through
                    break
                except queue.Empty:
                    continue
            try:
                yield item, json.loads(line) if line else None
            except ValueError:
                yield item, None

    def stop(self, wait: float = 5.0, interrupt: bool = True) -> None:
        """End every grading process: SIGTERM (each stops its sandbox), then SIGKILL. Without
        ``interrupt``, idle ones are let go first (they end when their input ends)."""
        self.stopping.set()
        with self.lock:
            processes = list(self.processes)
        for process in processes:
            with contextlib.suppress(OSError):
                if interrupt:
                    process.send_signal(signal.SIGTERM)
                else:
                    process.stdin.close()
        end = time.monotonic() + (wait if interrupt else 6 * wait)
        for process in processes:
            try:
                process.wait(timeout=max(0.1, end - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(OSError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait()
            for stream in (process.stdin, process.stdout):
                with contextlib.suppress(OSError):
                    stream.close()


def grade_all(found: list[Found], assignments: list[Assignment], settings: Settings, *,
              seed: int, sources: list[Path], prefix: sandbox.Prefix, hide: list[str],
              jobs: int, on_outcome) -> None:
    """Grade every notebook of ``found`` (the others get their row at once), calling
    ``on_outcome`` in this thread as each finishes. ``KeyboardInterrupt`` (Ctrl-C, or SIGTERM
    where the caller maps it so) stops every grading process and its sandbox within seconds,
    then propagates: outcomes not handed over are not graded."""
    named = {a.name: a for a in assignments}
    for item in found:
        if item.path is None:
            on_outcome(Outcome(display(item.relative), None, problem=item.problem))
    gradable = [f for f in found if f.path is not None]
    if not gradable:
        return
    user = settings.user
    workers = Workers(jobs, {
        "seed": seed, "sources": [str(p) for p in sources], "prefix": str(prefix.root),
        "timeout": settings.timeout, "cell_timeout": settings.cell_timeout,
        "sandboxed": settings.sandboxed, "limits": asdict(settings.limits),
        "with_stubs": settings.with_stubs, "hide": hide,
        "user": asdict(user) if user else None})
    try:
        for item, data in workers.run(gradable):
            if data is None:
                outcome = Outcome(display(item.relative), by_name(item.relative, assignments),
                                  problem="the grader failed on it (its grading process died)")
                _not_graded(outcome, "not graded: the grader failed on this notebook")
            else:
                outcome = outcome_from(data, named)
            on_outcome(outcome)
    except BaseException:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C would lose the .part
        try:
            workers.stop()
        finally:
            signal.signal(signal.SIGINT, signal.default_int_handler)
        raise
    workers.stop(interrupt=False)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv == ["--worker"]:
        return worker(sys.stdin.buffer, _private_stdout())
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("submissions", type=Path, help="folder of submitted notebooks")
    parser.add_argument("--out", type=Path, default=None,
                        help="folder for grades.csv and grading_log.csv (default: SUBMISSIONS)")
    parser.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1),
                        help="submissions graded at the same time (default 2)")
    parser.add_argument("--timeout", type=float, default=300.0,
                        help="seconds one notebook may run in all (default 300)")
    parser.add_argument("--cell-timeout", type=float, default=120.0,
                        help="seconds one cell or call may run before it is interrupted "
                             f"(default 120; stopped from outside {CELL_GRACE:.0f} s later)")
    parser.add_argument("--memory-gb", type=float, default=6.0,
                        help="address space per process in the sandbox, GB (default 6)")
    parser.add_argument("--disk-mb", type=int, default=512,
                        help="bytes a submission may write in all, MB (default 512)")
    parser.add_argument("--seed", type=int, default=None,
                        help="seed of the hidden inputs (default: a fresh random one per run)")
    parser.add_argument("--source", type=Path, action="append", default=None,
                        help="instructor notebook(s) to grade against "
                             "(default: every chapter in notebooks/)")
    parser.add_argument("--no-sandbox", "--unsafe-no-sandbox", dest="no_sandbox",
                        action="store_true",
                        help="run submissions without the sandbox: only for notebooks you "
                             "trust, or inside a container that is itself the sandbox")
    parser.add_argument("--resume", action="store_true",
                        help="keep the notebooks graded by an interrupted run (the .part files "
                             "in the output folder) and grade only the others")
    parser.add_argument("--with-stubs", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    folder = args.submissions
    if not folder.is_dir():
        parser.error(f"{folder} is not a folder")
    out = args.out or folder
    out.mkdir(parents=True, exist_ok=True)
    if args.jobs > (os.cpu_count() or 1):
        print(f"warning: --jobs {args.jobs} is more than the {os.cpu_count()} CPU(s): each "
              "sandbox is bounded to one CPU (as root), but then they share them, and a "
              "notebook that uses its whole CPU slows its neighbours", file=sys.stderr)
    if not args.no_sandbox:
        why = sandbox.unavailable()
        if why:
            print(f"cannot grade untrusted notebooks here: {why}.\nGrade in a Linux machine "
                  "or container with bubblewrap, or pass --no-sandbox for notebooks you "
                  "trust.", file=sys.stderr)
            return 2
    seed = args.seed if args.seed is not None else secrets.randbits(48)
    set_grading_seed(seed)
    sources = [p.resolve() for p in (args.source or chapter_notebooks(ROOT))]
    assignments = [a for a in (load_assignment(p) for p in sources) if a.exercises]
    found = find_submissions(folder, assignments, out)
    settings = Settings(args.timeout, args.cell_timeout, not args.no_sandbox,
                        sandbox.Limits(memory=int(args.memory_gb * 2**30),
                                       disk=args.disk_mb * 2**20), args.with_stubs)
    writer = Writer(out, resume=args.resume)
    for note in writer.notes:
        print(terminal(note), file=sys.stderr)
    if writer.done:
        print(f"resuming: {len(writer.done)} notebook(s) already graded", flush=True)
        found = [f for f in found if cell(display(f.relative)) not in writer.done]
    print(f"grading {sum(1 for f in found if f.path)} notebook(s) against {len(assignments)} "
          f"chapter(s), {args.jobs} at a time, "
          f"{'in a sandbox' if settings.sandboxed else 'WITHOUT a sandbox'}", flush=True)
    prefix = sandbox.Prefix()
    hide = [str(prefix.root), str(folder.resolve()), str(out.resolve())]
    start = time.monotonic()
    graded = 0

    def record(outcome: Outcome) -> None:
        nonlocal graded
        writer.add(outcome, args.with_stubs)
        graded += 1
        print("  " + terminal(summary_line(outcome)), flush=True)

    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        grade_all(found, assignments, settings, seed=seed, sources=sources, prefix=prefix,
                  hide=hide, jobs=args.jobs, on_outcome=record)
    except KeyboardInterrupt:
        writer.close(finish=False)
        print(f"interrupted after {time.monotonic() - start:.1f} s: the {graded} notebook(s) "
              f"graded in this run are kept in grades.csv.part and grading_log.csv.part, "
              f"{len(found) - graded} are not graded; run again with --resume to grade only "
              "those", file=sys.stderr)
        return 130
    finally:
        signal.signal(signal.SIGTERM, previous)
        prefix.remove()
    for warning in writer.close():
        print(terminal(warning), file=sys.stderr)
    print(f"wrote grades.csv and grading_log.csv in {out} "
          f"({time.monotonic() - start:.1f} s)")
    return 0


def _private_stdout():
    """The worker's replies go to the original stdout; anything printed goes to stderr."""
    replies = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    return replies


if __name__ == "__main__":
    sys.exit(main())
