"""grades.csv and grading_log.csv: written a notebook at a time (the .part files, for
--resume), sorted and replaced atomically at the end."""

from __future__ import annotations

import csv
import io
import json
import os
import re
import threading
from pathlib import Path

from mha_grade.compare import LEFT_TO_INSTRUCTOR, TIMED_OUT, Outcome
from mha_grade.copies import RULE_FILE
from mha_grade.escape import cell
from mha_grade.files import create, read_regular
from mha_grade.late import RULE_FILE as LATE_RULE_FILE

TIME_LIMITS = "time_limits.json"  # mha_grade.limits keeps the measured limits there
OUTPUT_NAMES = {f"{stem}{end}" for stem in ("grades", "grading_log", "grades.previous",
                                             "grading_log.previous")
                for end in (".csv", ".csv.part")} | {TIME_LIMITS, RULE_FILE, LATE_RULE_FILE}
GRADES_HEADER = ["notebook", "exercise", "points", "max_points"]
LOG_HEADER = ["notebook", "exercise", "status", "message", "seconds", "errors", "flags",
              "problem", "first_error", "parts"]

TEMPORARY = re.compile(r"^\.+(grades|grading_log)\.")  # the Writer's, while it writes

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

    def __init__(self, out: Path, resume: bool = False, regrade: set[str] | None = None):
        """``resume``: keep the notebooks an interrupted run graded (its ``.part`` files), but
        not those stopped at their time limit; ``regrade``: keep the rows of the finished
        grades.csv and grading_log.csv but those of the notebooks named (as in their
        ``notebook`` column). ``done`` is the notebooks kept."""
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
            stopped = {r["notebook"] for r in kept["grading_log.csv"]
                       if TIMED_OUT in (r.get("problem") or "")}
            if stopped:
                self.notes.append(f"note: {len(stopped)} notebook(s) of the interrupted run "
                                  "stopped at their time limit: graded again")
            self.done -= stopped
        if regrade is not None:  # every finished row but the named notebooks'
            for name in kept:
                kept[name] = [r for r in _read_rows(out / name) if r["notebook"] not in regrade]
            self.done = {r["notebook"] for r in kept["grading_log.csv"]}
        if resume or regrade is not None:
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
                     # left to the instructor: no points until they enter them (points.csv)
                     "points": "" if most is None or outcome.status.get(exercise.name) ==
                     LEFT_TO_INSTRUCTOR else outcome.points.get(exercise.name, 0),
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
                     "flags": "; ".join(outcome.flags), "problem": outcome.problem,
                     "first_error": outcome.first_error, "parts": hidden_parts(outcome, name)})
        if with_stubs and name in outcome.stubs:
            rows.append({"notebook": outcome.notebook, "exercise": f"{name} stub",
                         "status": outcome.stubs[name], "message": "", "seconds": "",
                         "errors": "", "flags": "", "problem": "", "first_error": ""})
    return rows


def hidden_parts(outcome: Outcome, exercise: str) -> str:
    """The ``parts`` column: when a check of the exercise has hidden parts, every part that ran
    (name, points, max_points, hidden, status, message) as JSON, so that ``mha-grade report``
    can show students a hidden part's points without its message; else empty."""
    parts = outcome.parts.get(exercise, [])
    if not any(part.get("hidden") for part in parts):
        return ""
    return json.dumps(parts, ensure_ascii=False)


def summary_line(outcome: Outcome) -> str:
    if outcome.assignment is None:
        return f"{outcome.notebook}: NOT GRADED: {outcome.problem}"
    parts, total, most = [], 0, 0
    for exercise in outcome.assignment.exercises:
        top = outcome.assignment.max_points(exercise)
        if top is None:
            parts.append(f"{exercise.name} by hand")
            continue
        if outcome.status.get(exercise.name) == LEFT_TO_INSTRUCTOR:
            parts.append(f"{exercise.name} left to the instructor")
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


