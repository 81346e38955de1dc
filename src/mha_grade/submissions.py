"""Finding submissions in a class folder, reading them (structure only, never running them),
the chapter each is graded as, and duplicates."""

from __future__ import annotations

import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from mha_grade import copies
from mha_grade.assignments import Assignment
from mha_grade.escape import display
from mha_grade.exercise_format import (
    LABEL,
)
from mha_grade.files import read_regular
from mha_grade.gradebook import gradescope_exports
from mha_grade.outputs import (
    OUTPUT_NAMES,
    TEMPORARY,
)

MAX_NOTEBOOK_BYTES = 20 * 2**20  # a larger submission is not graded
MAX_CELLS = 2000
# Bounds on what one student's folder costs the grader and its log (an outside attack: 70,000
# empty files under a 3,826-character path made a 272 MB log that the report then refused)
MAX_SKIPPED_PER_STUDENT = 100  # rows for what is not a notebook, under one top-level folder
MAX_COPIES_GRADED = 5  # --copies best: a student's latest copies of a chapter graded
NAMED = 5  # copies named in one row's note


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


def chapter_of(relative: str, nb: dict, assignments: list[Assignment]
               ) -> tuple[Assignment | None, str]:
    """The chapter a notebook is graded as: the one its name holds, unless its exercise labels
    are all of one other chapter (or its name holds none); and a note when the two disagree."""
    named = by_name(relative, assignments)
    chapters = labels(nb)
    if named is None or (chapters and named.chapter not in chapters):
        candidates = [a for a in assignments if a.chapter in chapters]
        if len(candidates) == 1:
            found = candidates[0]
            return found, "" if named is None else (
                f"saved as chapter {named.chapter} ({named.name}) but its exercises are "
                f"chapter {found.chapter}'s: graded as {found.name}")
    return named, ""


def chapter_of_file(relative: str, path: Path | None, assignments: list[Assignment]
                    ) -> Assignment | None:
    """``chapter_of`` for a file (read, never run): by its name alone if it cannot be read."""
    if path is None:
        return None
    try:
        nb = read_notebook(read_regular(path, MAX_NOTEBOOK_BYTES))
    except (OSError, ValueError):
        return by_name(relative, assignments)
    return chapter_of(relative, nb, assignments)[0]


# ---------------------------------------------------------------------------------------------
# Finding submissions, writing results

@dataclass
class Found:
    relative: str
    path: Path | None  # None: reported, not graded
    problem: str = ""


def _kind(entry: os.DirEntry) -> str:
    try:
        mode = entry.stat(follow_symlinks=False).st_mode
    except OSError:
        return "a file that vanished"
    return ("a FIFO" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode)
            else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "not a regular file")


def find_submissions(folder: Path, assignments: list[Assignment],
                     out: Path | None = None, rule: str | None = copies.DEFAULT_RULE
                     ) -> list[Found]:
    """Every entry under ``folder``: a notebook to grade, or a row saying why it is not graded
    (symbolic links, hidden files and folders, FIFOs and other special files are reported,
    never followed, opened or searched; with ``rule`` "latest", a student's copies of a chapter
    but the last; ``None``: copies left to the caller). The grader's own outputs in ``out``
    are left out."""
    survey = Survey(folder, out)
    survey.walk()
    found = survey.found + survey.overflow_rows()
    found.sort(key=lambda f: f.relative)
    if rule is not None:
        mark_copies(found, assignments, rule, gradescope_exports(folder)[0])
    return found


class Survey:
    """One walk of a submissions folder: the notebooks to grade, and a row for each entry that
    is not (at most MAX_SKIPPED_PER_STUDENT under each top-level folder)."""

    def __init__(self, folder: Path, out: Path | None):
        self.folder = folder
        self.own = out.resolve() if out is not None else None
        self.found: list[Found] = []
        self.skipped: dict[str, int] = {}  # entries not graded, under each top-level folder

    def skip(self, relative: str, why: str) -> None:
        """A row for an entry not graded, unless its top-level folder has had its share."""
        top = relative.split("/")[0]
        self.skipped[top] = self.skipped.get(top, 0) + 1
        if self.skipped[top] <= MAX_SKIPPED_PER_STUDENT:
            self.found.append(Found(relative, None, why))

    def walk(self) -> None:
        """Visit every folder under ``folder``, never through a link; the grader's outputs in
        ``out`` are left out."""
        stack = [self.folder]
        while stack:
            current = stack.pop()
            ours = self.own is not None and Path(current).resolve() == self.own
            for entry in self.entries(current):
                if ours and (entry.name in OUTPUT_NAMES or TEMPORARY.match(entry.name)):
                    continue
                self.take(entry, stack)

    def entries(self, current) -> list:
        """The entries of folder ``current`` by name; none (and a row, below the top) when it
        cannot be read."""
        try:
            return sorted(os.scandir(current), key=lambda e: e.name)
        except OSError as error:
            if current != self.folder:
                relative = Path(current).relative_to(self.folder).as_posix()
                self.found.append(Found(relative, None, f"a folder that cannot be read "
                                                        f"({error.strerror}): not graded"))
            return []

    def take(self, entry: os.DirEntry, stack: list[Path]) -> None:
        """One entry: a folder to visit (onto ``stack``), a notebook, or a row saying why it
        is skipped."""
        relative = Path(entry.path).relative_to(self.folder).as_posix()
        if entry.is_symlink():
            self.skip(relative, "a symbolic link: not followed, not graded")
        elif entry.name.startswith("."):
            what = "folder" if entry.is_dir(follow_symlinks=False) else "file"
            self.skip(relative, (
                f"warning: a hidden {what} (its name starts with '.'): not graded"
                + (", nothing in it was read" if what == "folder" else "")
                + "; rename it to grade it"))
        elif entry.is_dir(follow_symlinks=False):
            stack.append(Path(entry.path))
        elif not entry.is_file(follow_symlinks=False):
            self.skip(relative, f"warning: {_kind(entry)}, not a file: not opened, not graded")
        elif entry.name.endswith(".ipynb"):
            self.found.append(Found(relative, Path(entry.path)))
        elif entry.name.lower().endswith(".ipynb"):
            self.skip(relative, "not graded: the name must end in .ipynb (lower case); "
                                "rename it and grade again")
        else:
            self.skip(relative, "not a notebook (.ipynb): skipped")

    def overflow_rows(self) -> list[Found]:
        """A row per top-level folder with more entries not graded than rows of their own."""
        return [Found(f"{top}/...", None, (
            f"warning: {count} entries under {display(top)} are not notebooks to grade; "
            f"the first {MAX_SKIPPED_PER_STUDENT} have rows of their own, the rest "
            "only this one")) for top, count in self.skipped.items()
            if count > MAX_SKIPPED_PER_STUDENT]


def named(items: list[Found]) -> str:
    """At most ``NAMED`` of ``items``, and how many more: a note of bounded length."""
    names = ", ".join(display(o.relative) for o in items[:NAMED])
    return names + (f" and {len(items) - NAMED} more" if len(items) > NAMED else "")


def mark_copies(found: list[Found], assignments: list[Assignment], rule: str,
                exports: list[str] = ()) -> None:
    """One student's copies of a chapter, by the ``copies`` rule: with "latest", every copy but
    the one handed in last is not graded (``path`` None); with "best", all are graded. Every
    copy's row says which copies there are and what became of each. ``exports``: as
    ``copies.owner_of``."""
    if rule not in copies.RULES:
        raise ValueError(f"rule must be one of {', '.join(copies.RULES)}, not {rule!r}")
    for (owner, chapter), items in same_chapter(found, assignments, exports).items():
        if len(items) < 2:
            continue
        def when(f):
            return copies.handed_in(f.relative, f.path)

        kept, why = copies.counted(items, "latest", when)
        how = f"{why}, by {copies.order_name(kept.relative)}"
        whose = f"chapter {chapter} handed in {len(items)} times by {display(owner)}"
        others = named([o for o in items if o is not kept])
        if rule == "best":
            graded = sorted(items, key=when)[-MAX_COPIES_GRADED:]  # the latest few, at most
            for item in graded:
                rest = named([o for o in items if o is not item])
                item.problem = (f"duplicate: {whose}, the last {len(graded)} graded (--copies "
                                f"best): the one with the most points counts; the others: "
                                f"{rest}")
            for item in items:
                if item not in graded:
                    item.path = None
                    item.problem = (f"{copies.IGNORED}{whose}: only the last "
                                    f"{MAX_COPIES_GRADED} copies are graded, not this one")
            continue
        kept.problem = (f"duplicate: {whose}: this copy ({how}) is graded; not graded: "
                        f"{others}")
        for item in items:
            if item is not kept:
                item.path = None
                item.problem = (f"{copies.IGNORED}{whose}: {display(kept.relative)} ({how}) "
                                f"is graded, not this one (grade every copy with --copies "
                                "best)")


def same_chapter(found: list[Found], assignments: list[Assignment], exports: list[str] = ()
                 ) -> dict[tuple[str, str], list[Found]]:
    """(student, chapter) -> the notebooks found for it: the student as ``copies.owner_of``
    says (exactly), the chapter each is graded as (by its name or its exercise labels, as
    ``chapter_of``)."""
    owners: dict[tuple[str, str], list[Found]] = {}
    for item in found:
        assignment = chapter_of_file(item.relative, item.path, assignments)
        if assignment is not None:
            owner = copies.owner_of(item.relative, assignment.name, exports).key
            owners.setdefault((owner, assignment.chapter), []).append(item)
    return owners

