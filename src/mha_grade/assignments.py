"""A chapter as the grader knows it: the instructor's notebook, its exercises, their checks."""

from __future__ import annotations

import ast
import json
from dataclasses import dataclass, field
from pathlib import Path

from mha.exercises import tidy
from mha_grade.exercise_format import (
    CheckInfo,
    Exercise,
    FormatError,
    check_info,
    parse,
    source,
)
from mha_grade.flags import mha_names
from mha_grade.student_edition import student_edition


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
    # exercise -> the dotted names of the mha callables its checks compare with ("mha.attention"),
    # as the checks' reference_names declare them
    references: dict[str, tuple[str, ...]] = field(default_factory=dict)
    given: set[str] = field(default_factory=set)  # mha names the student edition's code uses

    def max_points(self, exercise: Exercise) -> float | None:
        if not exercise.checks:  # a derivation or an experiment: graded by hand
            return None
        return tidy(sum(self.info[i].max_points for i in exercise.checks))  # 1, not 1.0


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
    # what the student edition's own code already calls is no sign of anything, outside an
    # answer (mha_grade.flags)
    given = mha_names([source(c) for c in student_edition(nb)["cells"]
                       if c.get("cell_type") == "code"])
    return Assignment(path.stem, path.stem[:2], nb, exercises, info, captures, checkers, cells,
                      {k: v for k, v in references.items() if v}, given)


