"""The notebooks the exercise tools are tested on: every chapter with exercises, and the fixture."""

from __future__ import annotations

import re

from mha_grade import exercise_format as fmt  # (the tests import these two from here)
from mha_grade import student_edition  # noqa: F401

from conventions import NOTEBOOKS, ROOT

FIXTURES = ROOT / "tests" / "fixtures"
EXAMPLE = FIXTURES / "00_example_exercises.ipynb"


def has_exercises(path) -> bool:
    try:
        return bool(fmt.parse(fmt.load(path)))
    except fmt.FormatError:
        return True  # a broken one counts, so that its tests fail and say why


# chapters as they are merged, and the example notebook, which always has exercises
WITH_EXERCISES = [p for p in NOTEBOOKS if has_exercises(p)] + [EXAMPLE]
ALL = list(NOTEBOOKS) + [EXAMPLE]


def exercises_of(paths):
    """(notebook, exercise) pairs, for tests parametrized per exercise."""
    pairs = []
    for path in paths:
        try:
            found = fmt.parse(fmt.load(path))
        except fmt.FormatError:
            continue  # test_follows_the_exercise_format reports it
        pairs.extend((path, exercise) for exercise in found)
    return pairs


# a check's verdict line ("✓ Exercise 0.2 [1/1]: ...") and its note on the hidden parts
VERDICT = re.compile(r"[✓✗] Exercise (\d+\.\d+) \[(\d+(?:\.\d+)?)/(\d+(?:\.\d+)?)\]")
HIDDEN = re.compile(r"hidden parts?, worth (\d+(?:\.\d+)?) points?, on cases not shown")


def printed_points(nb) -> dict[str, tuple[str, float]]:
    """exercise -> (the points its last verdict line shows, the points of the hidden parts it
    says a notebook does not run: grading runs them, so they come on top)."""
    points = {}
    for cell in nb["cells"]:
        for output in cell.get("outputs", []):
            text = output.get("text", "")
            for line in ("".join(text) if isinstance(text, list) else text).splitlines():
                if m := VERDICT.search(line):
                    hidden = HIDDEN.search(line)
                    points[m.group(1)] = (m.group(2), float(hidden.group(1)) if hidden else 0)
    return points
