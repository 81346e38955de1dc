"""What the report borrows from the grader: the CSV neutraliser, reading a file without following
a link, writing one without writing through one, and the exercise format."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(ROOT / "tools"))

from exercise_format import LABEL, chapter_notebooks, parse, source  # noqa: E402
from grade import FORMULA_START, cell, create, display, read_regular, terminal  # noqa: E402
from student_edition import student_edition  # noqa: E402

__all__ = ["LABEL", "ROOT", "cell", "chapter_notebooks", "create", "display", "parse",
           "read_regular", "source", "student_edition", "terminal", "uncell"]


def uncell(value: str) -> str:
    """``cell`` undone: the text a field held before the grader made it safe for a spreadsheet
    (``'=x`` was ``=x``); a field ``cell`` would not have changed is returned as it is."""
    if value.startswith("'") and value[1:].startswith(FORMULA_START):
        return value[1:]
    return value
