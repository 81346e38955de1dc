"""Late work: how late a notebook was handed in, as the LMS says, and the penalty for it.

How late, only from what the LMS wrote (``Lateness``), never from a file's time (a student can
set it) or from a name the student chose:

- a Canvas bulk download (files directly in SUBMISSIONS): Canvas writes ``_late`` into the name
  of a file handed in after its due date (``smithalice_late_700030_700031_01_....ipynb``). The
  name part before it is Canvas's (no ``_`` in it), so the student's own file name, which comes
  after the ids, cannot add or remove the mark. The download does not say *how* late: late by an
  unknown time (``days`` None), which a per-day rule counts as one day;
- Gradescope (``mha-grade gradescope run``): ``submission_metadata.json``, which Gradescope
  writes and the autograder makes root's before any student code runs: ``created_at`` against
  the assignment's ``due_date`` (or a user's own, later one: an extension);
- anywhere else (a folder per student, Gradescope's export): not known, and no penalty, unless
  the instructor gives the due date and the LMS's times (``mha-grade report --due``,
  ``--handed-in``).

The penalty is one rule per class (``Penalty``, ``--late-penalty``): ``none`` (the default),
``P%`` (a flat fraction off once late) or ``P%/day`` (P% per day or part of a day late, at most
100%). The report takes it off a chapter's total (autograded and by-hand points); Gradescope's
autograder off its own score only (Gradescope's manual grading adds its points itself, with no
penalty). The points taken off are rounded down to the hundredth (in the student's favour), all
of them at 100%, and the result is never below 0 nor above the points before the penalty.
``mha-grade grade`` writes the rule beside the grades (``late_rule.json``) as it does the
copies rule; the report, ``--resume`` and ``--regrade`` follow it.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from datetime import datetime
from decimal import ROUND_FLOOR, Decimal
from pathlib import Path

from mha_grade.copies import CANVAS_FILE
from mha_grade.files import create, read_regular

NONE = "none"
RULE_FILE = "late_rule.json"  # the penalty a grading chose, beside its grades.csv
DAY = 86400.0
PENALTY = re.compile(r"^(?P<percent>\d{1,3}(?:\.\d{1,2})?)%(?P<per_day>/day)?$")
HELP = ("the penalty for late work, one rule per class: 'none' (default), 'P%%' (P%% off once "
        "late) or 'P%%/day' (P%% per day or part of a day late, at most 100%%); the points taken "
        "off are rounded down to the hundredth. Lateness comes from the LMS only: Canvas's "
        "'_late' in a bulk download's names, Gradescope's submission metadata")


@dataclass(frozen=True)
class Lateness:
    """A notebook handed in late: by ``days`` (days or parts of days; None: late by a time the
    LMS does not say), as ``source`` says (words for the student and the instructor)."""

    days: int | None
    source: str

    def words(self) -> str:
        how = "late" if self.days is None else f"{self.days} day{'s' * (self.days != 1)} late"
        return f"{how} ({self.source})"


@dataclass(frozen=True)
class Penalty:
    """A rule for late work: ``percent`` off, once (``per_day`` False) or per day late."""

    percent: Decimal = Decimal(0)
    per_day: bool = False

    @classmethod
    def parse(cls, text: str, name: str = "--late-penalty") -> Penalty:
        """``none``, ``P%`` or ``P%/day`` (0 < P <= 100, at most two decimals); ``ValueError``
        naming ``name`` else."""
        text = str(text).strip().lower().replace(" ", "")
        if text == NONE:
            return cls()
        match = PENALTY.match(text)
        percent = Decimal(match["percent"]) if match else Decimal(0)
        if not match or not 0 < percent <= 100:
            raise ValueError(f"{name} must be 'none', a percentage such as '20%' (off once "
                             "late) or a percentage per day such as '10%/day' (per day or part "
                             f"of a day late), between 0 and 100, not {text!r}")
        return cls(percent, bool(match["per_day"]))

    def __str__(self) -> str:
        if not self.percent:
            return NONE
        return f"{self.percent.normalize():f}%" + ("/day" if self.per_day else "")

    @property
    def active(self) -> bool:
        return self.percent > 0

    def fraction(self, late: Lateness | None) -> Decimal:
        """The fraction of the points taken off, in [0, 1]: a per-day rule counts a lateness of
        unknown length as one day."""
        if late is None or not self.active:
            return Decimal(0)
        days = 1 if late.days is None else late.days
        percent = self.percent * days if self.per_day else self.percent
        return min(Decimal(1), max(Decimal(0), percent / 100))

    def deduction(self, points: float, late: Lateness | None) -> float:
        """The points taken off ``points`` for ``late``: rounded down to the hundredth, never
        negative, never more than the points (none off a negative or zero score)."""
        if points <= 0 or not math.isfinite(points):
            return 0.0
        if self.fraction(late) >= 1:  # all of it: 3.083 at 100% keeps nothing, not 0.003
            return float(points)
        exact = Decimal(repr(float(points))) * self.fraction(late)
        off = exact.quantize(Decimal("0.01"), rounding=ROUND_FLOOR)
        return float(min(max(off, Decimal(0)), Decimal(repr(float(points)))))

    def after(self, points: float, late: Lateness | None) -> float:
        """``points`` less the ``deduction``, rounded to 9 decimals: 0.1 + 0.2 points less
        0.30 is 0, not the float residue 5.55e-17 a gradebook would print."""
        off = self.deduction(points, late)
        return round(points - off, 9) if off else points

    def note(self, points: float, late: Lateness) -> str:
        """Words for a feedback page, a gradebook note and Gradescope's output."""
        off = self.deduction(points, late)
        if not self.active:
            return f"handed in {late.words()}: no penalty (--late-penalty none)"
        why = (f"{self.percent.normalize():f}% per day" if self.per_day
               else f"{self.percent.normalize():f}% once late")
        unknown = ", counted as one day: the LMS does not say how late" \
            if self.per_day and late.days is None else ""
        return (f"handed in {late.words()}: {_fmt(float(self.fraction(late) * 100))}% off "
                f"({why}{unknown}), {_fmt(off)} point(s) of {_fmt(points)} taken off")


def _fmt(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:.2f}".rstrip("0")


def canvas_lateness(notebook: str) -> Lateness | None:
    """Canvas's mark on a file of its bulk download (``notebook``: the path relative to
    SUBMISSIONS; only a file directly in it is a Canvas download's), else None (not known)."""
    if "/" in notebook:
        return None
    match = CANVAS_FILE.match(notebook)
    if match is None or match["late"] is None:
        return None
    return Lateness(None, "Canvas marked the file late")


def lateness_from_times(handed_in: datetime, due: datetime, source: str) -> Lateness | None:
    """Late by whole days or parts of days after ``due`` (both with a time zone), or None."""
    if handed_in.tzinfo is None or due.tzinfo is None:
        raise ValueError("a time without a time zone cannot be compared with a due date")
    seconds = (handed_in - due).total_seconds()
    return Lateness(math.ceil(seconds / DAY), source) if seconds > 0 else None


def parse_time(text: object, name: str) -> datetime:
    """An ISO 8601 time with its time zone (Gradescope's ``2018-07-01T14:22:32.365935-07:00``,
    or ``2026-03-01T23:59+01:00``); ``ValueError`` naming ``name`` else."""
    try:
        when = datetime.fromisoformat(str(text).strip().replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"{name}: {str(text)[:60]!r} is not an ISO 8601 time such as "
                         "2026-03-01T23:59+01:00") from None
    if when.tzinfo is None:
        raise ValueError(f"{name}: {str(text)[:60]!r} has no time zone (write it, e.g. "
                         "2026-03-01T23:59+01:00 or ...Z for UTC)")
    return when


def gradescope_lateness(metadata: dict) -> Lateness | None:
    """How late Gradescope's ``submission_metadata.json`` says this submission is: its
    ``created_at`` after the due date, which is the assignment's ``due_date`` or, when a user
    has a later one of their own (an extension, ``users[].assignment.due_date``), the latest
    of those. None when on time or when the metadata gives no due date; ``ValueError`` when
    it is not as Gradescope documents it."""
    if not isinstance(metadata, dict) or not isinstance(metadata.get("assignment"), dict):
        raise ValueError("submission_metadata.json has no 'assignment'")
    dues = [metadata["assignment"].get("due_date")]
    for user in metadata.get("users") or []:
        own = user.get("assignment") if isinstance(user, dict) else None
        if isinstance(own, dict):
            dues.append(own.get("due_date"))
    dues = [parse_time(d, "submission_metadata.json due_date") for d in dues if d]
    if not dues:
        return None
    handed_in = parse_time(metadata.get("created_at"), "submission_metadata.json created_at")
    extended = " (with an extension)" if max(dues) > dues[0] else ""
    return lateness_from_times(handed_in, max(dues),
                               f"Gradescope: submitted {handed_in.isoformat()}, due "
                               f"{max(dues).isoformat()}{extended}")


def keep_rule(out: Path, penalty: Penalty) -> None:
    """Writes down, beside the grades, the penalty chosen for the class (``graded_rule``)."""
    with create(out / RULE_FILE, 0o644) as handle:
        json.dump({"late_penalty": str(penalty)}, handle)


def graded_rule(folder: Path) -> Penalty | None:
    """The penalty ``mha-grade grade`` wrote beside the grades in ``folder``; None if none was
    written (graded by an older version) or the file is not the grader's."""
    try:
        return Penalty.parse(json.loads(read_regular(folder / RULE_FILE, 2**10))["late_penalty"])
    except (ValueError, KeyError, TypeError):
        return None


def chosen_rule(given: str | None, folder: Path) -> tuple[Penalty, Penalty | None]:
    """The penalty to use (``given``, else the one kept in ``folder``, else none) and the one
    kept there (None if none)."""
    kept = graded_rule(folder)
    penalty = Penalty.parse(given) if given is not None else kept or Penalty()
    return penalty, kept


def parse_dues(values: list[str]) -> dict[str, datetime]:
    """``--due``: ``TIME`` (every chapter) or ``NN=TIME`` (chapter NN), as chapter -> time
    ("" for every chapter)."""
    dues: dict[str, datetime] = {}
    for value in values:
        chapter, sep, when = value.partition("=")
        if not sep:
            chapter, when = "", value
        elif not re.fullmatch(r"\d\d", chapter):
            raise ValueError(f"--due {value!r}: write TIME, or NN=TIME for chapter NN")
        dues[chapter] = parse_time(when, f"--due {value}")
    return dues


def read_handed_in(rows: list[dict], name: str = "--handed-in") -> dict[str, datetime]:
    """``--handed-in``'s rows (a CSV with columns ``notebook``, as the grader names it, and
    ``handed_in``, the LMS's time with its time zone): notebook -> time."""
    times: dict[str, datetime] = {}
    for number, row in enumerate(rows, start=2):
        notebook = (row.get("notebook") or "").strip()
        if not notebook:
            raise ValueError(f"{name} line {number}: no notebook (columns: notebook, handed_in)")
        times[notebook] = parse_time(row.get("handed_in"), f"{name} line {number}")
    return times


def lateness_of(notebooks: list, penalty: Penalty, dues: dict[str, datetime],
                times: dict[str, datetime]) -> tuple[dict[str, Lateness], list[str]]:
    """How late each of the graded ``notebooks`` (gradebook.Notebook: ``name``, ``chapter``) was
    handed in, where the LMS says: from the instructor's ``times`` and ``dues`` where both name
    it, else Canvas's mark. Returns notebook name -> lateness, and notes on what is not known."""
    found: dict[str, Lateness] = {}
    unknown = []
    for notebook in notebooks:
        if not notebook.chapter:
            continue
        due = dues.get(notebook.chapter) or dues.get("")
        if notebook.name in times and due is not None:
            lateness = lateness_from_times(
                times[notebook.name], due,
                f"handed in {times[notebook.name].isoformat()}, due {due.isoformat()}")
        elif "/" in notebook.name or not CANVAS_FILE.match(notebook.name):
            lateness = None  # a folder per student, a name prefix: the LMS's word is missing
            unknown.append(notebook.name)
        else:
            lateness = canvas_lateness(notebook.name)
        if lateness is not None:
            found[notebook.name] = lateness
    if not unknown or not penalty.active:
        return found, []
    return found, [
        f"--late-penalty {penalty}: no lateness is known for {len(unknown)} notebook(s) outside "
        "a Canvas bulk download (a file's time is the student's to set, not the LMS's word), "
        "so no penalty for them; give --due and --handed-in (the LMS's times) to apply it: "
        f"{', '.join(unknown[:5])}{', ...' if len(unknown) > 5 else ''}"]


def rule_for_grading(given: str | None, out: Path, again: bool) -> Penalty:
    """The penalty ``mha-grade grade`` writes down: ``given``, else for ``--resume`` and
    ``--regrade`` (``again``) the one the folder was graded with, else none. A rule other than
    the folder's is refused there: one class, one rule."""
    penalty = Penalty.parse(given) if given is not None else None
    kept = graded_rule(out) if again else None
    if penalty is not None and kept is not None and penalty != kept:
        raise ValueError(f"--late-penalty {penalty}: {out} was graded with --late-penalty "
                         f"{kept}; resume or regrade with the same rule, or grade afresh into "
                         "another --out")
    return penalty or kept or Penalty()
