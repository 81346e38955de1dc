"""What the report borrows from the grader: the CSV neutraliser and the escapes of names, reading
a file without following a link and writing one without writing through one, and the exercise
format (none of them imports torch)."""

from __future__ import annotations

from mha_grade import ROOT
from mha_grade.escape import FORMULA_START, cell, display, terminal
from mha_grade.exercise_format import LABEL, chapter_notebooks, parse, source
from mha_grade.files import create, read_regular
from mha_grade.student_edition import student_edition

__all__ = ["LABEL", "ROOT", "cell", "chapter_notebooks", "create", "display", "parse",
           "read_regular", "source", "student_edition", "terminal", "uncell"]


def uncell(value: str) -> str:
    """``cell`` undone: the text a field held before the grader made it safe for a spreadsheet
    (``'=x`` was ``=x``); a field ``cell`` would not have changed is returned as it is."""
    if value.startswith("'") and value[1:].startswith(FORMULA_START):
        return value[1:]
    return value
