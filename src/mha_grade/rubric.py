"""Rubric items of the by-hand exercises: an instructor-editable CSV beside points.csv.

``by_hand/rubric.csv`` has the columns ``exercise, item, points``, one row per item (R1, R2, ...
in the order of the file). The report writes a first version when there is none (one item per
exercise: full marks for the chapter's solution) and never overwrites it; the pages show each
exercise's items beside every answer, for the grader to tick. The file is the instructor's, like
points.csv (an exercise of their own has no solution in the book to take items from).
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

from mha_grade._shared import cell, create, display, uncell
from mha_grade.gradebook import fmt_points, number, read_csv

HEADER = ["exercise", "item", "points"]
FIRST_ITEM = "Correct and complete, as the chapter's solution (edit rubric.csv to split this)"


@dataclass
class Item:
    name: str  # "R1"
    text: str
    points: float


def write_first(path: Path, maxima: dict[str, float]) -> None:
    """A rubric of one item per exercise (``maxima``: exercise -> its points)."""
    with create(path) as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(HEADER)
        writer.writerows([[cell(exercise), cell(FIRST_ITEM), fmt_points(most)]
                          for exercise, most in maxima.items()])


def read(path: Path, exercises: set[str] | None) -> tuple[dict[str, list[Item]], list[str]]:
    """Each exercise's items, and one message per row not taken (an exercise not in
    ``exercises`` unless that is None, points that are not a number, a row without text)."""
    rows = read_csv(path)
    if rows and not set(HEADER) <= set(rows[0]):
        return {}, [f"{path.name}: the columns must be {', '.join(HEADER)}"]
    items: dict[str, list[Item]] = {}
    errors = []
    for line, row in enumerate(rows, start=2):
        where = f"{path.name} line {line}"
        exercise = (row.get("exercise") or "").strip()
        text = uncell(row.get("item") or "").strip()
        if exercises is not None and exercise not in exercises:
            errors.append(f"{where}: exercise {display(exercise)!r} is not graded by hand")
            continue
        if not text:
            errors.append(f"{where}: the item has no text")
            continue
        try:
            points = number((row.get("points") or "").strip())
        except ValueError:
            points = None
        if points is None:
            errors.append(f"{where}: points {display(row.get('points') or '')!r} is not a "
                          "number")
            continue
        found = items.setdefault(exercise, [])
        found.append(Item(f"R{len(found) + 1}", text, points))
    return items, errors
