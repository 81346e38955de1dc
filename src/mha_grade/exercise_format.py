"""The course's exercise format (CONTRIBUTING.md), read from a chapter notebook.

One exercise is, in cell order:

- the prompt: a markdown cell with an ``{exercise}`` directive and ``:label: ex-NN-K``;
- its solution, either one markdown cell with ``{solution} ex-NN-K`` (prose), or the cells between
  a markdown ``{solution-start} ex-NN-K`` and a markdown ``{solution-end}`` (code): there the code
  cells are tagged ``solution`` and hold the student's part between ``### BEGIN SOLUTION`` and
  ``### END SOLUTION`` (a code cell without the markers is solution as a whole);
- for code with a check, one or more code cells tagged ``check``, each calling one
  ``mha.checks.<module>.<check>``; the markers are then required. A code exercise without a check
  (an experiment) is graded by hand, like a derivation.

``parse`` finds the exercises and raises ``FormatError`` (naming the cell) when a notebook breaks
the format, so the student edition and the grader can rely on it.
"""

from __future__ import annotations

import importlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

BEGIN = "### BEGIN SOLUTION"
END = "### END SOLUTION"

# A MyST directive opens with three or more backticks or colons.
_FENCE = r"^(?:`{3,}|:{3,})"
EXERCISE = re.compile(_FENCE + r"\{exercise\}", re.MULTILINE)
LABEL = re.compile(r"^:label:\s*(ex-(\d\d)-(\d+))\s*$", re.MULTILINE)
SOLUTION = re.compile(_FENCE + r"\{solution\}\s+(ex-\d\d-\d+)", re.MULTILINE)
SOLUTION_START = re.compile(_FENCE + r"\{solution-start\}\s+(ex-\d\d-\d+)", re.MULTILINE)
SOLUTION_END = re.compile(_FENCE + r"\{solution-end\}", re.MULTILINE)
CHECK_CALL = re.compile(r"\bmha\.checks\.(\w+)\.(\w+)\(")


class FormatError(ValueError):
    """A notebook does not follow the exercise format; the message names the cell."""


@dataclass
class Exercise:
    label: str  # "ex-01-2"
    name: str  # "1.2", the name checks and grades use
    prompt: int  # index of the prompt cell
    kind: str = "prose"  # "prose" (a derivation, a question) or "code" (to write, or to run)
    solution: list[int] = field(default_factory=list)  # every cell of the solution
    code: list[int] = field(default_factory=list)  # the solution's code cells
    marked: list[int] = field(default_factory=list)  # those with BEGIN/END SOLUTION regions
    checks: list[int] = field(default_factory=list)  # the check cells
    calls: list[tuple[str, str]] = field(default_factory=list)  # (module, check) per check cell


def load(path: str | Path) -> dict:
    """A notebook as plain JSON (nbformat 4)."""
    return json.loads(Path(path).read_text(encoding="utf-8"))


def source(cell: dict) -> str:
    text = cell.get("source", "")
    return text if isinstance(text, str) else "".join(text)


def tags(cell: dict) -> list[str]:
    return list(cell.get("metadata", {}).get("tags", []))


def exercise_name(label: str) -> str:
    """``ex-01-2`` -> ``1.2``."""
    _, chapter, number = label.split("-")
    return f"{int(chapter)}.{int(number)}"


def solution_regions(text: str) -> list[tuple[int, int]]:
    """(begin, end) line numbers of every ``### BEGIN/END SOLUTION`` pair in ``text``."""
    regions, begin = [], None
    for number, line in enumerate(text.split("\n")):
        if line.strip() == BEGIN:
            if begin is not None:
                raise FormatError(f"line {number + 1}: nested {BEGIN}")
            begin = number
        elif line.strip() == END:
            if begin is None:
                raise FormatError(f"line {number + 1}: {END} without {BEGIN}")
            regions.append((begin, number))
            begin = None
    if begin is not None:
        raise FormatError(f"line {begin + 1}: {BEGIN} without {END}")
    return regions


def parse(nb: dict) -> list[Exercise]:
    """Every exercise of a notebook, in order; ``FormatError`` where the format is broken."""
    exercises: dict[str, Exercise] = {}
    current: Exercise | None = None  # the exercise whose solution or checks we are in
    gated: Exercise | None = None  # inside {solution-start} ... {solution-end}
    for index, cell in enumerate(nb["cells"]):
        text, kind, where = source(cell), cell["cell_type"], f"cell {index}"
        if gated is not None:
            gated.solution.append(index)
            if kind == "markdown" and SOLUTION_END.search(text):
                gated = None
            elif kind == "code":
                try:
                    if solution_regions(text):
                        gated.marked.append(index)
                except FormatError as error:
                    raise FormatError(f"{where}: {error}") from None
                gated.code.append(index)
            elif kind == "markdown" and (EXERCISE.search(text) or SOLUTION.search(text)):
                raise FormatError(f"{where}: the solution of {gated.label} is not closed by "
                                  "a {solution-end} cell")
            continue
        if kind == "markdown" and EXERCISE.search(text):
            labels = LABEL.findall(text)
            if len(labels) != 1:
                raise FormatError(f"{where}: an exercise needs one ':label: ex-NN-K' line, "
                                  f"found {len(labels)}")
            label = labels[0][0]
            if label in exercises:
                raise FormatError(f"{where}: the label {label} is used twice")
            current = exercises[label] = Exercise(label, exercise_name(label), index)
        elif kind == "markdown" and (m := SOLUTION.search(text) or SOLUTION_START.search(text)):
            label = m.group(1)
            if label not in exercises:
                raise FormatError(f"{where}: a solution for {label}, which has no prompt above")
            current = exercises[label]
            if current.solution:
                raise FormatError(f"{where}: {label} has a second solution")
            current.solution.append(index)
            if SOLUTION_START.search(text):
                current.kind = "code"
                gated = current
        elif kind == "code" and "check" in tags(cell):
            calls = CHECK_CALL.findall(text)
            if current is None or current.kind != "code" or not current.code:
                raise FormatError(f"{where}: a check cell that follows no code solution")
            if len(calls) != 1:
                raise FormatError(f"{where}: a check cell calls one mha.checks.<module>.<check>, "
                                  f"found {len(calls)}")
            current.checks.append(index)
            current.calls.append(calls[0])
        elif kind == "code" and (BEGIN in text or END in text):
            raise FormatError(f"{where}: a {BEGIN} region outside a solution-start/end range")
        elif kind == "code" and "solution" in tags(cell):
            raise FormatError(f"{where}: a cell tagged 'solution' outside a solution range")
    if gated is not None:
        raise FormatError(f"the solution of {gated.label} is not closed by a {{solution-end}} cell")
    for exercise in exercises.values():
        if not exercise.solution:
            raise FormatError(f"{exercise.label} has no solution")
        unmarked = [i for i in exercise.code if i not in exercise.marked]
        if exercise.checks and unmarked:
            raise FormatError(f"cell {unmarked[0]}: {exercise.label} has a check, so its solution "
                              f"code must mark the student's part with {BEGIN} ... {END}")
    return list(exercises.values())


@dataclass(frozen=True)
class CheckInfo:
    exercise: str
    max_points: int


def check_info(module: str, check: str) -> CheckInfo:
    """The exercise name and points of ``mha.checks.<module>.<check>``, read from the package."""
    function = getattr(importlib.import_module(f"mha.checks.{module}"), check, None)
    if function is None or not hasattr(function, "max_points"):
        raise FormatError(f"mha.checks.{module}.{check} is not a check made with exercise_check")
    return CheckInfo(function.exercise, function.max_points)


def chapter_notebooks(root: Path) -> list[Path]:
    """The chapter notebooks, ``notebooks/NN_name.ipynb``."""
    return sorted((root / "notebooks").glob("[0-9][0-9]_*.ipynb"))
