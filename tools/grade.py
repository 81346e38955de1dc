"""Grade submitted notebooks: run each in its own kernel, with a time limit, and collect points.

    python tools/grade.py SUBMISSIONS [--jobs 2] [--timeout 300] [--cell-timeout 120]

Every ``*.ipynb`` under SUBMISSIONS (any depth, e.g. one folder per student) is matched to its
chapter by file name (``.../01_attention_recap.ipynb``, ``alice_01_attention_recap.ipynb``) or,
failing that, by the exercise labels it contains. Then, for each submission:

1. its check cells are replaced by the instructor's, from the chapter notebook (like nbgrader's
   "overwrite cells"): a student who edits, deletes or fakes a check cell changes nothing;
2. it runs in a fresh kernel (its own process) in a private temporary folder, with a time limit
   per cell and per notebook, a cap on the output kept, a cap on the size of files it writes,
   and errors allowed, so one failing exercise does not cost the others;
3. the points are read from the line each restored check cell prints (``✓ Exercise 1.2 [1/1]``),
   and only from those cells.

All submissions are read before the first one runs and ``grades.csv`` is written after the last,
so a submission that deletes or rewrites files cannot change another's grade.

Output, in SUBMISSIONS: ``grades.csv`` (``notebook,exercise,points,max_points``; exercises that
are graded by hand, derivations and experiments, have empty points and max_points) and
``grading_log.csv`` (the status and the check's message per exercise, the seconds per notebook, and
flags for code that touches the grading machinery, to review by hand).
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import csv
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from exercise_format import (  # noqa: E402
    LABEL,
    CheckInfo,
    Exercise,
    FormatError,
    chapter_notebooks,
    check_info,
    parse,
    source,
    tags,
)

ROOT = Path(__file__).resolve().parent.parent

RESULT_LINE = re.compile(r"^([✓✗]) Exercise (\S+) \[(\d+)/(\d+)\]: (.*)$", re.MULTILINE)

# Code in a submission that reaches for the grading machinery instead of solving the exercise.
# The grader cannot stop code that runs in the same process as a check from tampering with it;
# it points such submissions out so that a person reads them.
SUSPICIOUS = {
    "mha.exercises": re.compile(r"\bmha\.exercises\b|\bfrom mha import exercises\b"),
    "assigns to mha": re.compile(r"\bmha(\.\w+)+\s*=[^=]|setattr\(\s*mha\b"),
    "grading report": re.compile(r"MHA_GRADING"),
    "fake result line": re.compile(r"Exercise \d+\.\d+ \["),
    "raw stdout": re.compile(r"\bos\.write\b|sys\.__stdout__|/dev/stdout|/proc/"),
    "threads": re.compile(r"\bthreading\b|\b_thread\b|\bmultiprocessing\b"),
    "ipython hooks": re.compile(r"\.events\.register|\bget_ipython\(\)\.\w+\s*="),
    "patches modules": re.compile(r"\bsys\.modules\b|\bimportlib\b|\bbuiltins\b"),
}

MAX_FILE_BYTES = 64 * 2**20  # a submission cannot write a file larger than this
MAX_CELL_OUTPUT = 1_000_000  # characters of output kept per cell; the rest is dropped
# The only environment variables a submission sees: no tokens or settings of the grader's account.
KEPT_ENV = ("PATH", "HOME", "LANG", "LANGUAGE", "TMPDIR", "VIRTUAL_ENV", "PYTHONPATH")
KEPT_ENV_PREFIXES = ("LC_", "JUPYTER", "JPY_", "XDG_", "OMP_", "MKL_")


@dataclass
class Assignment:
    """A chapter notebook, the instructor's version, with the exercises it grades."""

    name: str  # file stem, "01_attention_recap"
    chapter: str  # "01"
    nb: dict
    exercises: list[Exercise]
    info: dict[int, CheckInfo]  # check cell index -> what that check grades

    def max_points(self, exercise: Exercise) -> int | None:
        if not exercise.checks:  # a derivation or an experiment: graded by hand
            return None
        return sum(self.info[i].max_points for i in exercise.checks)


@dataclass
class Outcome:
    """What grading one submission found, per exercise name."""

    notebook: str
    assignment: Assignment | None
    points: dict[str, int] = field(default_factory=dict)
    status: dict[str, str] = field(default_factory=dict)
    message: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0
    problem: str = ""  # what went wrong with the whole notebook, if anything
    errors: int = 0  # cells (other than checks) that ended in an error
    flags: list[str] = field(default_factory=list)


def load_assignment(path: Path) -> Assignment:
    nb = json.loads(path.read_text(encoding="utf-8"))
    exercises = parse(nb)
    info = {}
    for exercise in exercises:
        for index, (module, check) in zip(exercise.checks, exercise.calls, strict=True):
            info[index] = check_info(module, check)
            if info[index].exercise != exercise.name:
                raise FormatError(f"{path.name} cell {index}: the check of {exercise.label} "
                                  f"grades exercise {info[index].exercise}, not {exercise.name}")
    return Assignment(path.stem, path.stem[:2], nb, exercises, info)


def match(relative: str, nb: dict | None, assignments: list[Assignment]) -> Assignment | None:
    """The assignment a submission answers: by file name first, then by its exercise labels."""
    stem = Path(relative).stem
    by_name = [a for a in assignments if a.name in stem]
    if by_name:
        return max(by_name, key=lambda a: len(a.name))
    if nb is not None:
        chapters = {m.group(2) for cell in nb.get("cells", [])
                    if cell.get("cell_type") == "markdown" for m in LABEL.finditer(source(cell))}
        candidates = [a for a in assignments if a.chapter in chapters]
        if len(candidates) == 1:
            return candidates[0]
    return None


def flags(nb: dict) -> list[str]:
    code = "\n".join(source(c) for c in nb.get("cells", [])
                     if c.get("cell_type") == "code" and "check" not in tags(c))
    return [name for name, pattern in SUSPICIOUS.items() if pattern.search(code)]


def graded_notebook(submission: dict, assignment: Assignment) -> tuple[dict, dict[int, int]]:
    """The submission with its check cells replaced by the instructor's.

    Returns the notebook and, for each restored check cell, the index of the instructor's check
    cell it came from. A restored check goes right after the student's last solution cell of its
    exercise (found between the exercise's prompt and the next prompt); if the student deleted
    the prompt, it goes at the end, where everything the student defined exists.
    """
    cells = [c for c in submission["cells"]
             if not (c.get("cell_type") == "code" and "check" in tags(c))]
    prompts = {}
    for position, cell in enumerate(cells):
        if cell.get("cell_type") == "markdown":
            for m in LABEL.finditer(source(cell)):
                prompts.setdefault(m.group(1), position)
    order = sorted(prompts.values())
    insert_after: dict[int, list[int]] = {}  # position in cells -> instructor check cells
    at_end: list[int] = []
    for exercise in assignment.exercises:
        if not exercise.checks:
            continue
        start = prompts.get(exercise.label)
        if start is None:
            at_end.extend(exercise.checks)
            continue
        stop = next((p for p in order if p > start), len(cells))
        solutions = [p for p in range(start, stop)
                     if cells[p].get("cell_type") == "code" and "solution" in tags(cells[p])]
        insert_after.setdefault(solutions[-1] if solutions else start, []).extend(exercise.checks)
    out, origin = [], {}
    for position, cell in enumerate(cells):
        out.append(_clean(cell))
        for index in insert_after.get(position, []):
            origin[len(out)] = index
            out.append(_clean(assignment.nb["cells"][index]))
    for index in at_end:
        origin[len(out)] = index
        out.append(_clean(assignment.nb["cells"][index]))
    nb = {k: copy.deepcopy(v) for k, v in submission.items() if k != "cells"}
    nb["cells"] = out
    nb["nbformat"], nb["nbformat_minor"] = 4, 4
    return nb, origin


def _clean(cell: dict) -> dict:
    """A copy of a cell in plain nbformat 4.4 (no ids needed), outputs cleared."""
    cell = {"cell_type": cell.get("cell_type", "raw"), "metadata": cell.get("metadata", {}),
            "source": source(cell)}
    if cell["cell_type"] == "code":
        cell["outputs"], cell["execution_count"] = [], None
    return copy.deepcopy(cell)


def read_results(nb: dict, origin: dict[int, int], assignment: Assignment, outcome: Outcome,
                 unfinished: str) -> None:
    """Points from the output of each restored check cell, and only from there."""
    for exercise in assignment.exercises:
        if not exercise.checks:
            outcome.status[exercise.name] = "by hand"
            continue
        outcome.points[exercise.name] = 0
        statuses, messages = [], []
        for position, index in origin.items():
            if index not in exercise.checks:
                continue
            info = assignment.info[index]
            outputs = nb["cells"][position].get("outputs", [])
            text = "".join(o.get("text", "") for o in outputs
                           if o.get("output_type") == "stream" and o.get("name") == "stdout")
            lines = [m for m in RESULT_LINE.finditer(text) if m.group(2) == info.exercise]
            errors = [o for o in outputs if o.get("output_type") == "error"]
            if lines:
                mark, _, points, max_points, message = lines[-1].groups()
                valid = int(max_points) == info.max_points and int(points) <= info.max_points
                outcome.points[exercise.name] += int(points) if valid and mark == "✓" else 0
                status = ("correct" if mark == "✓" else
                          "not done" if message.startswith("not done") else "wrong")
                statuses.append(status)
                messages.append(message)
            elif errors:
                statuses.append("error")
                messages.append(f"the check cell raised {errors[-1].get('ename')}: "
                                f"{errors[-1].get('evalue', '')}"[:300])
            else:
                statuses.append(unfinished or "no result")
                messages.append(unfinished or "the check printed no result")
        outcome.status[exercise.name] = ("correct" if statuses and
                                         all(s == "correct" for s in statuses) else
                                         next((s for s in statuses if s != "correct"), "no result"))
        outcome.message[exercise.name] = " | ".join(messages)[:500]


def _limit_files() -> None:  # runs in the kernel's process, before it starts
    import resource

    resource.setrlimit(resource.RLIMIT_FSIZE, (MAX_FILE_BYTES, MAX_FILE_BYTES))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


async def run_one(relative: str, data: bytes, assignments: list[Assignment], *,
                  timeout: float, cell_timeout: float, scratch: Path) -> Outcome:
    from nbclient import NotebookClient
    from nbclient.exceptions import DeadKernelError

    class Client(NotebookClient):
        """Keeps at most MAX_CELL_OUTPUT characters of output per cell."""

        def output(self, outs, msg, display_id, cell_index):
            if not hasattr(self, "_kept"):
                self._kept: dict[int, int] = {}
            size = len(json.dumps(msg.get("content", {})))
            used = self._kept.get(cell_index, 0)
            self._kept[cell_index] = used + size
            if used + size > MAX_CELL_OUTPUT:
                return None
            return super().output(outs, msg, display_id, cell_index)

    try:
        submission = json.loads(data.decode("utf-8"))
        if not isinstance(submission, dict) or not isinstance(submission.get("cells"), list):
            raise ValueError("not a notebook")
    except (ValueError, UnicodeDecodeError):
        submission = None
    assignment = match(relative, submission, assignments)
    outcome = Outcome(relative, assignment)
    if assignment is None:
        outcome.problem = "no chapter notebook matches its name or its exercise labels"
        return outcome
    if submission is None:
        outcome.problem = "not a readable notebook"
        read_results({"cells": []}, {}, assignment, outcome, "unreadable")
        return outcome
    outcome.flags = flags(submission)
    nb, origin = graded_notebook(submission, assignment)
    import nbformat

    nb = nbformat.from_dict(nb)
    workdir = Path(tempfile.mkdtemp(dir=scratch))
    env = {k: v for k, v in os.environ.items()
           if k in KEPT_ENV or k.startswith(KEPT_ENV_PREFIXES)}
    env.update(MPLBACKEND="Agg", PYTHONWARNINGS="ignore")
    deadline = time.monotonic() + timeout
    client = Client(nb, kernel_name="python3", allow_errors=True, interrupt_on_timeout=True,
                    timeout_func=lambda _cell: max(1, min(cell_timeout,
                                                          deadline - time.monotonic() + 1)),
                    startup_timeout=120, record_timing=False,
                    resources={"metadata": {"path": str(workdir)}})
    unfinished = ""
    start = time.monotonic()
    try:
        await asyncio.wait_for(
            client.async_execute(env=env, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL, preexec_fn=_limit_files),
            timeout=timeout)
    except Exception as error:  # report what stopped the notebook; grade what it got done
        if isinstance(error, TimeoutError) or time.monotonic() >= deadline:
            # (stopping the kernel at the deadline can surface as a dead kernel as well)
            unfinished = f"stopped after the time limit of {timeout:.0f} s"
        elif isinstance(error, DeadKernelError):
            unfinished = "the kernel died (the notebook crashed or exited)"
        else:  # the notebook could not be run at all
            unfinished = f"could not run: {type(error).__name__}: {error}"[:300]
        outcome.problem = unfinished
    finally:
        outcome.seconds = time.monotonic() - start
        await _stop(client)
        shutil.rmtree(workdir, ignore_errors=True)
    read_results(client.nb, origin, assignment, outcome, unfinished)
    outcome.errors = sum(1 for position, cell in enumerate(client.nb["cells"])
                         if position not in origin and cell.get("cell_type") == "code"
                         and any(o.get("output_type") == "error" for o in cell.get("outputs", [])))
    return outcome


async def _stop(client) -> None:
    """Kill the kernel (and its process group) whatever state it is in."""
    km = getattr(client, "km", None)
    if km is None:
        return
    try:
        if km.has_kernel:
            await asyncio.wait_for(km.shutdown_kernel(now=True), timeout=20)
    except Exception:  # already dead, or refusing to die: fall back to a plain kill
        try:
            await km.kill_kernel()
        except Exception:
            pass


async def run_all(submissions: list[tuple[str, bytes]], assignments: list[Assignment], *,
                  jobs: int, timeout: float, cell_timeout: float) -> list[Outcome]:
    limit = asyncio.Semaphore(jobs)
    # each notebook works in its own folder in here; "../" of it is in here too
    scratch = Path(tempfile.mkdtemp(prefix="mha-grade-"))

    async def one(relative: str, data: bytes) -> Outcome:
        async with limit:
            outcome = await run_one(relative, data, assignments, timeout=timeout,
                                    cell_timeout=cell_timeout, scratch=scratch)
            total = sum(outcome.points.values())
            most = sum(outcome.assignment.max_points(e) or 0
                       for e in outcome.assignment.exercises) if outcome.assignment else 0
            print(f"  graded {relative}: {total}/{most} in {outcome.seconds:.1f} s"
                  + (f" ({outcome.problem})" if outcome.problem else ""), flush=True)
            return outcome

    try:
        return await asyncio.gather(*(one(r, d) for r, d in submissions))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def find_submissions(folder: Path) -> list[tuple[str, bytes]]:
    """Every notebook under ``folder``, read now, before any of them runs."""
    found = []
    for path in sorted(folder.rglob("*.ipynb")):
        if ".ipynb_checkpoints" in path.parts or not path.is_file():
            continue
        found.append((path.relative_to(folder).as_posix(), path.read_bytes()))
    return found


def rows(outcomes: list[Outcome]) -> list[dict]:
    out = []
    for outcome in outcomes:
        if outcome.assignment is None:
            continue
        for exercise in outcome.assignment.exercises:
            most = outcome.assignment.max_points(exercise)
            out.append({"notebook": outcome.notebook, "exercise": exercise.name,
                        "points": "" if most is None else outcome.points.get(exercise.name, 0),
                        "max_points": "" if most is None else most})
    return out


def write_csv(path: Path, header: list[str], records: list[dict]) -> None:
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=header)
        writer.writeheader()
        writer.writerows(records)


def log_rows(outcomes: list[Outcome]) -> list[dict]:
    out = []
    for outcome in outcomes:
        names = [e.name for e in outcome.assignment.exercises] if outcome.assignment else [""]
        for name in names:
            out.append({"notebook": outcome.notebook, "exercise": name,
                        "status": outcome.status.get(name, outcome.problem or "not graded"),
                        "message": outcome.message.get(name, outcome.problem),
                        "seconds": f"{outcome.seconds:.1f}", "errors": outcome.errors,
                        "flags": "; ".join(outcome.flags)})
    return out


def summary(outcomes: list[Outcome]) -> str:
    lines = []
    for outcome in outcomes:
        if outcome.assignment is None:
            lines.append(f"{outcome.notebook}: NOT GRADED: {outcome.problem}")
            continue
        parts, total, most = [], 0, 0
        for exercise in outcome.assignment.exercises:
            top = outcome.assignment.max_points(exercise)
            if top is None:
                parts.append(f"{exercise.name} by hand")
                continue
            got = outcome.points.get(exercise.name, 0)
            total, most = total + got, most + top
            parts.append(f"{exercise.name} {got}/{top}")
        line = f"{outcome.notebook}: {total}/{most}  [{', '.join(parts)}]"
        if outcome.problem:
            line += f"  ({outcome.problem})"
        if outcome.flags:
            line += f"  REVIEW: {', '.join(outcome.flags)}"
        lines.append(line)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("submissions", type=Path, help="folder of submitted notebooks")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                        help="submissions graded at the same time (default: one per core)")
    parser.add_argument("--timeout", type=float, default=300.0,
                        help="seconds one notebook may run in all (default 300)")
    parser.add_argument("--cell-timeout", type=float, default=120.0,
                        help="seconds one cell may run before it is interrupted (default 120)")
    parser.add_argument("--source", type=Path, action="append", default=None,
                        help="instructor notebook(s) to grade against "
                             "(default: every chapter in notebooks/)")
    args = parser.parse_args(argv)
    folder = args.submissions
    if not folder.is_dir():
        parser.error(f"{folder} is not a folder")
    assignments = [load_assignment(p) for p in (args.source or chapter_notebooks(ROOT))]
    assignments = [a for a in assignments if a.exercises]
    submissions = find_submissions(folder)
    print(f"grading {len(submissions)} notebook(s) against {len(assignments)} chapter(s) "
          f"with {args.jobs} at a time", flush=True)
    start = time.monotonic()
    outcomes = asyncio.run(run_all(submissions, assignments, jobs=max(1, args.jobs),
                                   timeout=args.timeout, cell_timeout=args.cell_timeout))
    write_csv(folder / "grades.csv", ["notebook", "exercise", "points", "max_points"],
              rows(outcomes))
    write_csv(folder / "grading_log.csv",
              ["notebook", "exercise", "status", "message", "seconds", "errors", "flags"],
              log_rows(outcomes))
    print(summary(outcomes))
    print(f"wrote grades.csv and grading_log.csv in {folder} "
          f"({time.monotonic() - start:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
