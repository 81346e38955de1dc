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

Output (in SUBMISSIONS, or ``--out``), written a notebook at a time as results come in and
replaced atomically at the end: ``grades.csv`` (``notebook,exercise,points,max_points``; exercises
graded by hand have empty points) and ``grading_log.csv`` (status, the check's message, which is
feedback a student may read, seconds, errors, flags for code that deserves a human look, and the
problem with the whole notebook if any: skipped files, duplicates, chapter mismatches, limits).
"""

from __future__ import annotations

import argparse
import ast
import csv
import io
import json
import os
import queue
import re
import secrets
import shutil
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
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
from student_edition import stub_regions  # noqa: E402

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
MAX_MESSAGE_BYTES = 64 * 2**20  # one line from the sandbox
MAX_ERRORS_COUNTED = 10_000
OUTPUT_NAMES = {"grades.csv", "grading_log.csv", "grades.csv.part", "grading_log.csv.part"}
GRADES_HEADER = ["notebook", "exercise", "points", "max_points"]
LOG_HEADER = ["notebook", "exercise", "status", "message", "seconds", "errors", "flags",
              "problem"]

# Code that reaches for the machine or the grading machinery instead of solving the exercise.
# None of it can change a grade (the verdicts are computed outside the sandbox); a flag tells
# the instructor that someone tried. Only cells that differ from every cell of the instructor's
# notebook are read, so the setup cell and the chapter's own code never raise a flag.
SUSPICIOUS = {
    "reads /proc or secrets": re.compile(r"/proc\b|\benviron\b|\.ssh\b|getenv"),
    "processes": re.compile(r"\bsubprocess\b|\bos\.fork\b|\bos\.system\b|\bpty\b|start_new_"
                            r"session|\bos\.exec|\bos\.spawn|\bmultiprocessing\b"),
    "network": re.compile(r"\bsocket\b|\burllib\b|\brequests\.|\bhttp\.client\b"),
    "low-level": re.compile(r"\bctypes\b|\bcffi\b|\bptrace\b|\bsys\.settrace\b"),
    "patches the grading": re.compile(r"\bmha\.exercises\b|from mha import exercises|"
                                      r"__torch_function__|\bsys\.modules\b|"
                                      r"\btorch\.\w+\s*=[^=]|\bsys\.std(out|err)\s*=[^=]"),
    "writes startup or package files": re.compile(r"\.ipython|profile_default|__file__|"
                                                  r"site-packages|\.pth\b"),
    "fake verdict": re.compile(r"Exercise \d+\.\d+ \[|✓"),
    "obfuscation": re.compile(r"\bgetattr\([^)]*\+|\bexec\(|\beval\(|__import__|\bcompile\("),
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
    info, captures, checkers = {}, {}, {}
    for exercise in exercises:
        for index, (module, check) in zip(exercise.checks, exercise.calls, strict=True):
            info[index] = check_info(module, check)
            if info[index].exercise != exercise.name:
                raise FormatError(f"{path.name} cell {index}: the check of {exercise.label} "
                                  f"grades exercise {info[index].exercise}, not {exercise.name}")
            captures[index] = capture_expression(source(nb["cells"][index]))
            checkers[index] = getattr(importlib.import_module(f"mha.checks.{module}"),
                                      check).checker
    cells = {source(c) for c in nb["cells"] if c.get("cell_type") == "code"}
    return Assignment(path.stem, path.stem[:2], nb, exercises, info, captures, checkers, cells)


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


def flags(nb: dict, assignment: Assignment) -> list[str]:
    code = "\n".join(c["source"] for c in nb["cells"]
                     if c["cell_type"] == "code" and c["source"] not in assignment.cells)
    return [name for name, pattern in SUSPICIOUS.items() if pattern.search(code)]


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
        self.queue: queue.Queue = queue.Queue(maxsize=1000)
        self.thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self.thread.start()

    def _read(self, stream) -> None:
        try:
            while True:
                line = stream.readline(MAX_MESSAGE_BYTES)
                if not line or not line.endswith(b"\n"):
                    break  # the end, or a line too long to be a message
                self.queue.put(line)
        except (OSError, ValueError):
            pass
        self.queue.put(None)

    def next(self, deadline: float) -> dict | None:
        """The next message, ``None`` at the end or at the deadline; junk is skipped."""
        while True:
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
                continue


class SandboxChannel(Channel):
    """The check's end of the pipe to one sandbox (see mha.exercises.Channel)."""

    def __init__(self, process, messages: Messages, deadline: float):
        self.process, self.messages, self.deadline = process, messages, deadline

    def request(self, message: dict) -> dict:
        try:
            self.process.stdin.write(dumps(message))
            self.process.stdin.flush()
        except (OSError, ValueError):
            raise ProtocolError("the notebook stopped") from None
        reply = self.messages.next(self.deadline)
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


def grade_one(relative: str, path: Path, assignments: list[Assignment], prefix: sandbox.Prefix,
              settings: Settings, problem: str, clean: Sanitiser) -> Outcome:
    try:
        if path.stat().st_size > MAX_NOTEBOOK_BYTES:
            raise ValueError(f"larger than {MAX_NOTEBOOK_BYTES // 2**20} MB: not graded")
        nb = read_notebook(path.read_bytes())
    except (OSError, ValueError) as error:
        assignment = by_name(relative, assignments)
        outcome = Outcome(relative, assignment, problem="; ".join(filter(None, [str(error),
                                                                                 problem])))
        _not_graded(outcome, str(error))
        return outcome
    named = by_name(relative, assignments)
    chapters = labels(nb)
    assignment = named
    if named is None or (chapters and named.chapter not in chapters):
        candidates = [a for a in assignments if a.chapter in chapters]
        if len(candidates) == 1:
            assignment = candidates[0]
            if named is not None:
                problem = "; ".join(filter(None, [problem, (
                    f"saved as chapter {named.chapter} ({named.name}) but its exercises are "
                    f"chapter {assignment.chapter}'s: graded as {assignment.name}")]))
    outcome = Outcome(relative, assignment, problem=problem)
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
    start = time.monotonic()
    deadline = start + settings.timeout
    unfinished = ""
    if settings.sandboxed:
        process, cgroup = sandbox.start(prefix, plan_path, settings.limits)
    else:
        process, cgroup = sandbox.start_unsandboxed(prefix, plan_path, settings.limits, work)
    # a watchdog: whatever blocks (a sandbox that stops reading its input), the deadline holds
    watchdog = threading.Timer(settings.timeout + 10, sandbox.stop, (process, cgroup))
    watchdog.daemon = True
    watchdog.start()
    try:
        messages = Messages(process.stdout)
        channel = SandboxChannel(process, messages, deadline)
        finished = False
        while not finished:
            message = messages.next(deadline)
            if message is None:
                break
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
            else:
                unfinished = "the notebook stopped before its end (it crashed, exited or " \
                             "hit a limit)"
    except ProtocolError as error:  # pragma: no cover (each check catches its own)
        unfinished = f"the notebook broke the grading protocol ({error})"
    finally:
        outcome.seconds = time.monotonic() - start
        watchdog.cancel()
        sandbox.stop(process, cgroup)
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


def find_submissions(folder: Path, assignments: list[Assignment]) -> list[Found]:
    """Every notebook under ``folder`` (symbolic links are reported, never followed)."""
    found: list[Found] = []
    stack = [folder]
    while stack:
        current = stack.pop()
        try:
            entries = sorted(os.scandir(current), key=lambda e: e.name)
        except OSError:
            continue
        for entry in entries:
            relative = Path(entry.path).relative_to(folder).as_posix()
            if entry.name.startswith(".") or entry.name in OUTPUT_NAMES:
                continue
            if entry.is_symlink():
                found.append(Found(relative, None, "a symbolic link: not followed, not graded"))
            elif entry.is_dir(follow_symlinks=False):
                stack.append(Path(entry.path))
            elif not entry.is_file(follow_symlinks=False):
                continue
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
    owners: dict[tuple[str, str], list[Found]] = {}
    for item in found:
        assignment = by_name(item.relative, assignments) if item.path else None
        if assignment is not None:
            parent, _, name = item.relative.rpartition("/")
            owner = parent or name.split(assignment.name)[0].strip(" _-.")
            owners.setdefault((owner, assignment.chapter), []).append(item)
    for items in owners.values():
        if len(items) > 1:
            for item in items:
                others = ", ".join(o.relative for o in items if o is not item)
                item.problem = f"duplicate: the same student's chapter is also in {others}"
    return found


class Writer:
    """grades.csv and grading_log.csv: a row per notebook as it finishes, flushed; atomically
    sorted and renamed into place at the end (a crash keeps the ``.part`` files)."""

    def __init__(self, out: Path, resume: bool = False):
        self.out = out
        self.files = {}
        kept: dict[str, list[dict]] = {"grades.csv": [], "grading_log.csv": []}
        self.done: set[str] = set()
        if resume:  # a notebook is done when its log rows were written (they come last)
            kept = {name: _read_rows(out / f"{name}.part") for name in kept}
            self.done = {r["notebook"] for r in kept["grading_log.csv"]}
            kept = {name: [r for r in rows if r["notebook"] in self.done]
                    for name, rows in kept.items()}
        for name, header in (("grades.csv", GRADES_HEADER), ("grading_log.csv", LOG_HEADER)):
            handle = (out / f"{name}.part").open("w", newline="", encoding="utf-8")
            writer = csv.DictWriter(handle, fieldnames=header, extrasaction="ignore")
            writer.writeheader()
            writer.writerows(kept[name])
            handle.flush()
            self.files[name] = (handle, writer)
        self.lock = threading.Lock()

    def add(self, outcome: Outcome, with_stubs: bool = False) -> None:
        with self.lock:
            for name, rows in (("grades.csv", grade_rows(outcome)),
                               ("grading_log.csv", log_rows(outcome, with_stubs))):
                handle, writer = self.files[name]
                writer.writerows(rows)
                handle.flush()
                os.fsync(handle.fileno())

    def close(self) -> None:
        for name, (handle, _) in self.files.items():
            handle.close()
            part = self.out / f"{name}.part"
            with part.open(newline="", encoding="utf-8") as source_handle:
                reader = csv.DictReader(source_handle)
                rows = sorted(reader, key=lambda r: (r["notebook"], _exercise_key(r)))
                header = reader.fieldnames
            buffer = io.StringIO()
            writer = csv.DictWriter(buffer, fieldnames=header, lineterminator="\n")
            writer.writeheader()
            writer.writerows(rows)
            tmp = self.out / f".{name}.tmp"
            tmp.write_text(buffer.getvalue(), encoding="utf-8")
            os.replace(tmp, self.out / name)
            part.unlink()


def _read_rows(path: Path) -> list[dict]:
    try:
        with path.open(newline="", encoding="utf-8") as handle:
            return [r for r in csv.DictReader(handle) if r.get("notebook") is not None]
    except (OSError, csv.Error):
        return []


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


def main(argv: list[str] | None = None) -> int:
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
                             "(default 120)")
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
    if not args.no_sandbox:
        why = sandbox.unavailable()
        if why:
            print(f"cannot grade untrusted notebooks here: {why}.\nGrade in a Linux machine "
                  "or container with bubblewrap, or pass --no-sandbox for notebooks you "
                  "trust.", file=sys.stderr)
            return 2
    set_grading_seed(args.seed if args.seed is not None else secrets.randbits(48))
    assignments = [load_assignment(p) for p in (args.source or chapter_notebooks(ROOT))]
    assignments = [a for a in assignments if a.exercises]
    found = find_submissions(folder, assignments)
    settings = Settings(args.timeout, args.cell_timeout, not args.no_sandbox,
                        sandbox.Limits(memory=int(args.memory_gb * 2**30),
                                       disk=args.disk_mb * 2**20), args.with_stubs)
    print(f"grading {sum(1 for f in found if f.path)} notebook(s) against {len(assignments)} "
          f"chapter(s), {args.jobs} at a time, "
          f"{'in a sandbox' if settings.sandboxed else 'WITHOUT a sandbox'}", flush=True)
    prefix = sandbox.Prefix()
    clean = Sanitiser([str(prefix.root), str(folder.resolve()), str(out.resolve())])
    writer = Writer(out, resume=args.resume)
    if writer.done:
        print(f"resuming: {len(writer.done)} notebook(s) already graded", flush=True)
        found = [f for f in found if f.relative not in writer.done]
    start = time.monotonic()
    interrupted = False

    def one(item: Found) -> Outcome:
        if item.path is None:
            return Outcome(item.relative, None, problem=item.problem)
        try:
            return grade_one(item.relative, item.path, assignments, prefix, settings,
                             item.problem, clean)
        except Exception as error:  # the grader's own failure: report it, grade the rest
            outcome = Outcome(item.relative, by_name(item.relative, assignments),
                              problem=f"the grader failed on it ({type(error).__name__})")
            _not_graded(outcome, "not graded: the grader failed on this notebook")
            print(f"  grader error on {item.relative}: {error!r}", file=sys.stderr)
            return outcome

    try:
        with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            for future in as_completed([pool.submit(one, item) for item in found]):
                outcome = future.result()
                writer.add(outcome, args.with_stubs)
                print("  " + summary_line(outcome), flush=True)
    except KeyboardInterrupt:
        interrupted = True
        print("interrupted: the notebooks graded so far are in the CSV files", file=sys.stderr)
    finally:
        writer.close()
        prefix.remove()
    print(f"wrote grades.csv and grading_log.csv in {out} "
          f"({time.monotonic() - start:.1f} s)")
    return 130 if interrupted else 0


if __name__ == "__main__":
    sys.exit(main())
