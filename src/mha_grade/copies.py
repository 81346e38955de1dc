"""Who handed a notebook in, and which of one student's copies of a chapter counts.

Who: where the notebook sits under SUBMISSIONS (``owner_of``): the first folder below it (an LMS
download, one folder per student), or a ``submission_NNN`` folder of a Gradescope export (as
SUBMISSIONS or one folder per assignment in it: gradebook.gradescope_exports); for a file
directly in SUBMISSIONS, the Canvas user id of a Canvas bulk download
(``smithalice_700030_700031_01_attention_recap.ipynb``: the name part, the user id, the
submission id, then the file's own name, with ``_late`` after the name part when late), else
the prefix before the chapter's name (``alice_03_....ipynb``). The key is compared exactly:
``ALICE/`` and ``alice/`` are two owners (the report stops on such look-alikes).

Which copy counts, one rule in ``mha-grade grade``, ``mha-grade report`` and on Gradescope
(``RULES``):

- ``latest`` (the default): the copy handed in last, by the LMS's order where the layout has one
  (a Canvas download: the submission id, which Canvas numbers in the order work is handed in),
  else by the file's modification time (then by name, for a tie); the other copies are not
  graded (one grading per student and chapter) and are reported as ignored;
- ``best``: every copy is graded, and the one with the most points counts (a tie: the latest).

A file's name gives it no precedence (``01_attention_recap.ipynb`` does not win over a later
``01_attention_recap-1.ipynb``). Only one owner's copies are compared, so no other student's
notebook (a planted copy) can displace a student's own.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from mha_grade.files import create, read_regular

RULES = ("latest", "best")
DEFAULT_RULE = "latest"
RULE_FILE = "copies_rule.json"  # the rule a grading used, beside its grades.csv, for the report
CANVAS_FILE = re.compile(r"^(?P<slug>[^_/]+?)(?P<late>_late)?_(?P<uid>\d+)_(?P<sid>\d+)_"
                         r"(?P<file>.+)$", re.IGNORECASE)  # late: Canvas's mark (mha_grade.late)
GRADESCOPE_FOLDER = re.compile(r"^submission_\d+$")  # Gradescope's name of a submission
# how the grader's log says a copy was left out: the report reads it back
IGNORED = "ignored copy: "


@dataclass
class Owner:
    """Who a notebook belongs to, as its place under SUBMISSIONS says."""

    key: str  # the folder, the Canvas user id, or the name prefix
    name: str  # shown
    canvas_id: str = ""
    file: str = ""  # the file's own name (a Canvas download's original name)
    sis_id: str = ""  # from Gradescope's metadata
    email: str = ""


def owner_of(notebook: str, chapter_stem: str = "", exports=()) -> Owner:
    """The student a notebook (its path relative to SUBMISSIONS) belongs to; ``exports``: the
    folders of SUBMISSIONS that are Gradescope exports ("" for SUBMISSIONS itself), whose
    ``submission_NNN`` folders are each a submission of its own."""
    parts = notebook.split("/")
    for root in exports:
        inside = parts[1:] if root else parts
        if (not root or parts[0] == root) and len(inside) > 1 \
                and GRADESCOPE_FOLDER.match(inside[0]):
            key = f"{root}/{inside[0]}" if root else inside[0]
            return Owner(key, key, file=parts[-1])
    if len(parts) > 1:
        return Owner(parts[0], parts[0], file=parts[-1])
    name = parts[0]
    match = CANVAS_FILE.match(name)
    if match:
        return Owner(f"canvas-{match['uid']}", match["slug"], match["uid"], match["file"])
    stem = name.removesuffix(".ipynb")
    if chapter_stem and chapter_stem in stem:
        prefix = stem.split(chapter_stem)[0].strip(" _-.")
    else:  # renamed: the part before the first separator
        prefix = re.split(r"[ _.-]", stem, maxsplit=1)[0]
    return Owner(prefix, prefix, file=name)


def handed_in(notebook: str, path: Path | None) -> tuple[int, float, str]:
    """When a copy was handed in, as a key to sort by: Canvas's submission id for a file of a
    Canvas download (read from the name Canvas gave it), else the file's modification time;
    then the name, so that two copies are never tied."""
    match = CANVAS_FILE.match(notebook) if "/" not in notebook else None
    if match:
        return 1, float(match["sid"]), notebook
    try:
        modified = os.lstat(path).st_mtime if path is not None else 0.0
    except OSError:
        modified = 0.0
    return 0, modified, notebook


def order_name(notebook: str) -> str:
    """How ``handed_in`` orders this notebook's copies, in words."""
    return ("Canvas's submission order" if "/" not in notebook and CANVAS_FILE.match(notebook)
            else "the files' modification times")


def _time(key):
    """When a copy was handed in, without the name ``handed_in`` breaks a tie with."""
    return key[:2] if isinstance(key, tuple) else key


def counted(copies: list, rule: str, when, points=None):
    """The copy that counts among one student's ``copies`` of a chapter, and why (words for a
    note). ``when(copy)`` is its ``handed_in`` key; ``points(copy)``, for ``best``, its points
    (None: not graded)."""
    if rule not in RULES:
        raise ValueError(f"the rule for copies must be one of {', '.join(RULES)}, not {rule!r}")
    latest = max(copies, key=when)
    if rule == "latest" or points is None:
        # copies of one upload or one unzipped archive share a time: then the name decides,
        # which says nothing of which copy the student meant (instructor 48: a blank draft)
        if sum(1 for c in copies if _time(when(c)) == _time(when(latest))) > 1:
            return latest, ("handed in at the same time as another copy, so chosen by its name "
                            "(the last in alphabetical order): check it is the one meant")
        return latest, "handed in last"
    graded = [c for c in copies if points(c) is not None]
    if not graded:
        return latest, "handed in last (none graded)"
    best = max(graded, key=lambda c: (points(c), when(c)))
    tied = sum(1 for c in graded if points(c) == points(best)) > 1
    return best, "the most points" + (", handed in last of those" if tied else "")


def keep_rule(out: Path, rule: str) -> None:
    """Writes down, beside the grades, which ``rule`` graded them (``graded_rule`` reads it)."""
    with create(out / RULE_FILE, 0o644) as handle:
        json.dump({"copies": rule}, handle)


def graded_rule(folder: Path) -> str | None:
    """The rule ``mha-grade grade`` used for the grades in ``folder``; None if it did not say
    (graded by an older version, or not graded there)."""
    try:
        rule = json.loads(read_regular(folder / RULE_FILE, 2**10))["copies"]
    except (ValueError, KeyError, TypeError):
        return None
    return rule if rule in RULES else None
