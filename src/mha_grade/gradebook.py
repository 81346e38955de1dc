"""The class's gradebook: one row per student, from the grader's grades.csv and grading_log.csv.

Who a notebook belongs to is read from where it sits under SUBMISSIONS (``copies.owner_of``:
the first folder below SUBMISSIONS, a Canvas bulk download's user id, a name prefix), and in
Gradescope's export (``submission_NNN/``, as SUBMISSIONS or one folder per assignment in it)
from the students its ``submission_metadata.yml`` names for that folder (each member of a
group), by e-mail. Which of one student's copies of a chapter counts is the ``copies`` rule.

A student is their key, exactly (an e-mail without case). A roster (a CSV of students: Canvas's
gradebook export, or columns name, id, login, section) puts everyone on it in the gradebook,
matched by Canvas id, SIS id, login (or e-mail, without case), else by name; a student who
handed in nothing gets zeros, and a submission that matches nobody keeps its row, marked "not
on the roster". A match is exact or none, and loud: a submission that matches several roster
entries, a roster entry that several submissions match, and two submissions whose keys differ
only in case, width or spaces (``ALICE/`` and ``alice/``, `` alice/``) stop the gradebook
(``Ambiguous``) with the names to resolve (``--match``), rather than give one of them the
other's work or a 0. Everything a submission names (file and folder names) is shown as the
grader wrote it: escaped for a terminal, and for a spreadsheet (``cell``).
"""

from __future__ import annotations

import csv
import functools
import hashlib
import io
import json
import math
import os
import re
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path

from mha_grade import copies, late
from mha_grade._shared import cell, display, read_regular, uncell
from mha_grade.copies import GRADESCOPE_FOLDER, Owner, owner_of

MAX_CSV_BYTES = 256 * 2**20
EXERCISE = re.compile(r"^(\d+)\.(\d+)$")


def exercise_key(name: str) -> tuple:
    return tuple(int(p) for p in re.findall(r"\d+", name)) + (name,)


def chapter_of_exercise(name: str) -> str:
    """``3.2`` -> ``03``."""
    match = EXERCISE.match(name)
    if match is None:
        raise ValueError(f"exercise name {name!r} is not N.K")
    return f"{int(match.group(1)):02d}"


def feedback_file(key: str) -> str:
    """A file name for a student's feedback: ASCII letters, digits and dashes from their key, at
    most 40, and 10 hex digits of its SHA-256, so two keys never share a file and no key reaches
    outside the folder (no ``/``, ``..``, device names or hidden files)."""
    ascii_ = unicodedata.normalize("NFKD", key).encode("ascii", "ignore").decode()
    slug = re.sub(r"[^A-Za-z0-9]+", "-", ascii_).strip("-").lower()[:40] or "student"
    digest = hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:10]
    return f"{slug}-{digest}.html"


def number(text: str) -> float | None:
    if text is None or not str(text).strip():
        return None
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"not a finite number: {text!r}")
    return value


def fmt_points(value: float | None) -> str:
    if value is None:
        return ""
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def read_csv(path: Path) -> list[dict]:
    """The rows of a CSV file, read without following a symbolic link (``ValueError`` naming
    the file if it is one, or missing, or not a regular file, or not CSV). A byte-order mark
    (Excel's) is dropped, and a file whose first line has more semicolons than commas (Excel
    where the comma is the decimal mark) is read with semicolons."""
    try:
        text = read_regular(path, MAX_CSV_BYTES).decode("utf-8-sig", errors="replace")
    except ValueError as error:
        raise ValueError(f"{path}: {error}") from None
    first = text.split("\n", 1)[0]
    delimiter = ";" if first.count(";") > first.count(",") else ","
    try:
        return list(csv.DictReader(io.StringIO(text, newline=""), delimiter=delimiter))
    except csv.Error as error:
        raise ValueError(f"{path} is not a CSV file ({error})") from None


# ---------------------------------------------------------------------------------------------
# What the grader wrote

@dataclass
class Result:
    exercise: str
    points: float | None  # None: graded by hand (or not graded)
    max_points: float | None
    status: str = ""
    message: str = ""  # as the grader wrote it: with hidden parts' messages
    # the parts that ran when the check has hidden parts (grading_log.csv's ``parts``): dicts
    # with name, points, max_points, hidden, status, message; None when not written
    parts: list[dict] | None = None


@dataclass
class Notebook:
    """One graded notebook: its name as the grader wrote it (relative to SUBMISSIONS)."""

    name: str
    chapter: str = ""  # "03"; "" when it was graded as no chapter
    results: dict[str, Result] = field(default_factory=dict)
    problem: str = ""
    flags: str = ""
    first_error: str = ""

    @property
    def points(self) -> float:
        return sum(r.points or 0 for r in self.results.values() if r.max_points is not None)

    @property
    def by_hand(self) -> list[str]:
        return [e for e, r in self.results.items() if r.max_points is None]

    @property
    def left_to_hand(self) -> list[str]:
        """Autograded exercises the grader left to the instructor in this notebook (points
        empty, maximum given: mha_grade.compare.leave_to_instructor)."""
        return [e for e, r in self.results.items()
                if r.points is None and r.max_points is not None]


def load_results(folder: Path) -> list[Notebook]:
    """The notebooks of ``grades.csv`` and ``grading_log.csv`` in ``folder`` (the grader's
    ``--out``), with their points, statuses, messages and problems."""
    if not (folder / "grades.csv").exists():
        raise ValueError(f"no grades.csv in {folder}: grade the folder first (mha-grade grade), "
                         "or name the grader's --out with --grades")
    grades = read_csv(folder / "grades.csv")
    log = read_csv(folder / "grading_log.csv")
    notebooks: dict[str, Notebook] = {}
    for row in log:
        name = uncell(row.get("notebook") or "")
        book = notebooks.setdefault(name, Notebook(name))
        book.problem = uncell(row.get("problem") or "")
        book.flags = uncell(row.get("flags") or "")
        book.first_error = uncell(row.get("first_error") or "")
        exercise = row.get("exercise") or ""
        if EXERCISE.match(exercise):  # not "" (a notebook of no chapter), not "0.2 stub"
            book.results[exercise] = Result(exercise, None, None, uncell(row.get("status") or ""),
                                            uncell(row.get("message") or ""),
                                            read_parts(uncell(row.get("parts") or "")))
    for row in grades:
        name = uncell(row.get("notebook") or "")
        exercise = row.get("exercise") or ""
        if not EXERCISE.match(exercise):
            continue
        book = notebooks.setdefault(name, Notebook(name))
        result = book.results.setdefault(exercise, Result(exercise, None, None))
        try:
            result.points, result.max_points = number(row["points"]), number(row["max_points"])
        except (KeyError, ValueError) as error:
            raise ValueError(f"grades.csv: a bad row for {name}, exercise {exercise}: "
                             f"{error}") from None
        if result.points is not None and not (
                0 <= result.points <= (result.max_points if result.max_points is not None
                                       else float("inf"))):
            raise ValueError(f"grades.csv: {name}, exercise {exercise} has "
                             f"{fmt_points(result.points)} points, of "
                             f"{fmt_points(result.max_points) or 'none'}: not from this grader")
    for book in notebooks.values():
        chapters = {chapter_of_exercise(e) for e in book.results}
        if len(chapters) > 1:
            raise ValueError(f"grades.csv: {book.name} has exercises of chapters "
                             f"{sorted(chapters)}")
        book.chapter = chapters.pop() if chapters else ""
    return sorted(notebooks.values(), key=lambda b: b.name)


def read_parts(text: str) -> list[dict] | None:
    """grading_log.csv's ``parts`` column: a list of parts, or None (empty, or not such a list:
    the report then treats the message as one that may hold hidden parts' messages)."""
    if not text:
        return None
    try:
        parts = json.loads(text)
    except ValueError:
        return None
    fields = {"name": str, "points": (int, float), "max_points": (int, float), "hidden": bool,
              "message": str}
    if not isinstance(parts, list) or not all(
            isinstance(p, dict) and all(isinstance(p.get(k), t) for k, t in fields.items())
            for p in parts):
        return None
    return parts


# ---------------------------------------------------------------------------------------------
# Students

@dataclass
class Student:
    key: str  # unique here; the "student" column of gradebook.csv and of the by-hand points
    name: str
    id: str = ""  # Canvas's user id
    sis_user_id: str = ""
    login: str = ""
    section: str = ""
    on_roster: bool = False
    notebooks: dict[str, Notebook] = field(default_factory=dict)  # chapter -> the one counted
    others: list[Notebook] = field(default_factory=list)  # copies, not counted
    notes: list[str] = field(default_factory=list)
    # by-hand exercise -> (points or None, the instructor's comment)
    hand: dict[str, tuple[float | None, str]] = field(default_factory=dict)


def norm(text: str) -> str:
    """Letters and digits only, lower case, accents dropped: how names are compared."""
    text = unicodedata.normalize("NFKD", text)
    return "".join(c for c in text.casefold() if c.isalnum() and not unicodedata.combining(c))


ROSTER_COLUMNS = {
    "name": ("student", "name", "student name", "full name", "sortable name"),
    "id": ("id", "canvas id", "canvas user id", "user id"),
    "sis_user_id": ("sis user id", "sis_user_id", "student id", "student number", "sid"),
    "login": ("sis login id", "login", "login id", "username", "email", "e-mail"),
    "section": ("section", "sections"),
}


def read_roster(path: Path) -> tuple[list[Student], list[str], dict[str, str]]:
    """The students of a roster CSV, notes, and the assignment columns of a Canvas export
    (``"03_attention_with_weights (12345)"``: name -> header) to reuse their ids."""
    rows = read_csv(path)
    if not rows:
        raise ValueError(f"{path.name}: no students")
    header = {k.strip().casefold(): k for k in rows[0] if k is not None}
    columns = {}
    for field_name, names in ROSTER_COLUMNS.items():
        columns[field_name] = next((header[n] for n in names if n in header), None)
    if columns["name"] is None and columns["id"] is None and columns["login"] is None:
        raise ValueError(f"{path.name}: no column name, id or login (columns: "
                         f"{', '.join(header.values())})")
    assignments = {m.group(1).strip(): k for k in header.values()
                   if (m := re.match(r"^(.*?)\s*\((\d+)\)\s*$", k))}
    students, notes = [], []
    for number_, row in enumerate(rows, start=2):
        get = {f: (row.get(c) or "").strip() if c else "" for f, c in columns.items()}
        if get["name"].endswith("Points Possible") or get["name"] == "Muted":
            continue  # Canvas's second row
        if get["name"] == "Student, Test":
            notes.append(f"{path.name} line {number_}: Canvas's test student, left out")
            continue
        if not any(get.values()):
            continue
        students.append(Student("", get["name"] or get["login"] or get["id"], get["id"],
                                get["sis_user_id"], get["login"], get["section"], True))
    return students, notes, assignments


GRADESCOPE_METADATA = "submission_metadata.yml"


def gradescope_names(folder: Path) -> tuple[dict[str, list[Owner]], list[str]]:
    """Gradescope's export: its ``submission_metadata.yml`` names the students of each
    ``submission_NNN`` folder (every member of a group). A student is then known by their
    e-mail (or SIS id), the same in every assignment's export. Returns the owners by key
    (``submission_NNN``, or ``ch03/submission_NNN``) and notes.

    Only metadata no student can write is read: Gradescope's own file at the top of its export,
    beside the ``submission_NNN`` folders. The export is SUBMISSIONS itself (its file is read,
    and no other), or one folder in SUBMISSIONS per assignment (``ch03/submission_NNN``): then
    every folder of SUBMISSIONS must hold one, since a folder of a student (an LMS download,
    or a submission's own files) could hold a file of that name written by the student. A key
    names a ``submission_NNN`` folder beside the file, nothing else."""
    roots, notes = gradescope_exports(folder)
    found: dict[str, list[Owner]] = {}
    for root in roots:
        found.update(_read_metadata(folder / root, f"{root}/" if root else "", notes) or {})
    return found, notes


def gradescope_exports(folder: Path) -> tuple[list[str], list[str]]:
    """The folders of SUBMISSIONS that are Gradescope exports, as ``gradescope_names`` tells
    them (``[""]``: SUBMISSIONS itself; else every folder in it, or none), and notes."""
    if os.path.lexists(folder / GRADESCOPE_METADATA):
        return [""], []
    try:
        folders = sorted(e.name for e in os.scandir(folder)
                         if e.is_dir(follow_symlinks=False) and not e.name.startswith("."))
    except OSError:
        return [], []
    exports = [name for name in folders if os.path.lexists(folder / name / GRADESCOPE_METADATA)]
    if exports and exports != folders:
        return [], [f"{GRADESCOPE_METADATA} in {', '.join(exports[:5])}"
                    f"{', ...' if len(exports) > 5 else ''} not read: only Gradescope's own, "
                    "at the top of SUBMISSIONS or of every folder in it (one export per "
                    "assignment), names students; a student's folder is the student's"]
    return exports, []


def _read_metadata(place: Path, prefix: str, notes: list[str]) -> dict[str, list[Owner]] | None:
    """The submitters of each ``submission_NNN`` named by ``place``'s metadata file; ``None``
    if there is no such file."""
    import yaml

    try:
        text = read_regular(place / GRADESCOPE_METADATA, MAX_CSV_BYTES).decode(
            "utf-8", errors="replace")
    except ValueError:
        return None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as error:
        notes.append(f"{prefix}{GRADESCOPE_METADATA} is not YAML ({error}): not read")
        return {}
    found: dict[str, list[Owner]] = {}
    for name, entry in data.items() if isinstance(data, dict) else []:
        people = entry.get(":submitters") if isinstance(entry, dict) else None
        if not isinstance(name, str) or not GRADESCOPE_FOLDER.match(name) \
                or not isinstance(people, list):
            continue
        owners = []
        for person in people:
            if isinstance(person, dict):
                email, sid = str(person.get(":email") or ""), str(person.get(":sid") or "")
                owners.append(Owner(email or sid or f"{prefix}{name}",
                                    str(person.get(":name") or email or sid or name),
                                    sis_id=sid, email=email))
        if owners:
            found[f"{prefix}{name}"] = owners
    return found


def identity(owner: Owner) -> str:
    """Who an owner is, exactly: their key (a folder, a Canvas user id, a name prefix), an
    e-mail compared without case. Two keys that differ in any other way are two students."""
    return owner.key.casefold() if owner.email and owner.key == owner.email else owner.key


class Matcher:
    """Finds a submission's student on the roster, unambiguously: exactly by Canvas id, SIS id,
    login or e-mail (without case; an e-mail's user part for a login that is no e-mail), else by
    name ("Smith, John", "John Smith": smithjohn and johnsmith, letters and digits only)."""

    def __init__(self, students: list[Student]):
        self.by_id: dict[str, list[Student]] = {}
        self.by_exact: dict[str, list[Student]] = {}
        self.by_name: dict[str, list[Student]] = {}
        for student in students:
            if student.id:
                self.by_id.setdefault(student.id, []).append(student)
            for token in {student.sis_user_id.casefold(), student.login.casefold()} - {""}:
                self.by_exact.setdefault(token, []).append(student)
            name = student.name
            if "," in name:
                last, _, first = name.partition(",")
            else:
                first, _, last = name.rpartition(" ")
            for token in {norm(name), norm(last + first), norm(first + last)} - {""}:
                self.by_name.setdefault(token, []).append(student)

    def find(self, owner: Owner) -> tuple[Student | None, bool, str]:
        """The roster's student, whether the match was exact (not by name), and why none."""
        if owner.canvas_id and len(self.by_id.get(owner.canvas_id, [])) == 1:
            return self.by_id[owner.canvas_id][0], True, ""
        user = owner.email.partition("@")[0] if "@" in owner.email else ""
        exact = [owner.sis_id, owner.email, owner.key, user]
        for table, tokens, is_exact in ((self.by_exact, exact, True),
                                        (self.by_name, [norm(owner.key), norm(owner.name)],
                                         False)):
            for token in tokens:
                token = token.casefold() if is_exact else token
                found = {id(s): s for s in table.get(token, [])
                         if token and (table is not self.by_exact or token != user
                                       or "@" not in s.login)}
                if len(found) == 1:
                    return next(iter(found.values())), is_exact, ""
                if len(found) > 1:
                    return None, is_exact, f"matches {len(found)} roster entries: not matched"
        return None, False, ""


@dataclass
class Chapter:
    number: str  # "03"
    name: str  # "03_attention_with_weights", or "03" without the instructor's notebook
    exercises: list[str]  # in order
    max_points: dict[str, float | None]  # None: by hand

    @property
    def auto_max(self) -> float:
        return sum(m or 0 for m in self.max_points.values())

    @property
    def by_hand(self) -> list[str]:
        return [e for e in self.exercises if self.max_points[e] is None]


@dataclass
class Gradebook:
    chapters: list[Chapter]
    students: list[Student]
    ungraded: list[Notebook]  # notebooks graded as no chapter (not a notebook, no match...)
    notes: list[str]
    hand_max: dict[str, float]  # by-hand exercise (and written answer) -> its points
    roster: bool
    # the written answers to autograded exercises ("1.2 written" -> "01"): on a page, and by
    # hand in points.csv; they count (as by-hand exercises) once points are entered (``written``)
    written: dict[str, str] = field(default_factory=dict)
    ignored: list[Notebook] = field(default_factory=list)  # copies the grader did not grade
    penalty: late.Penalty = field(default_factory=late.Penalty)  # the class's rule for late work
    handed_in_late: dict[str, late.Lateness] = field(default_factory=dict)  # notebook -> how late

    def add_written(self, exercise: str, chapter: str, points: float) -> None:
        """``exercise``'s written answer ("1.2 written"), worth ``points`` once graded."""
        self.written[exercise] = chapter
        self.hand_max.setdefault(exercise, points)

    def count_written(self) -> None:
        """Every written answer with points entered becomes a by-hand exercise of its chapter."""
        for exercise, number_ in self.written.items():
            chapter = next(c for c in self.chapters if c.number == number_)
            if exercise not in chapter.max_points and any(
                    s.hand.get(exercise, (None, ""))[0] is not None for s in self.students):
                chapter.exercises.append(exercise)
                chapter.max_points[exercise] = None
                chapter.exercises.sort(key=exercise_key)

    def student(self, key: str) -> Student | None:
        return next((s for s in self.students if s.key == key), None)

    def handed_in_nothing(self) -> list[Student]:
        return [s for s in self.students if not s.notebooks]

    def not_on_roster(self) -> list[Student]:
        return [s for s in self.students if self.roster and not s.on_roster]

    def chapter_max(self, chapter: Chapter) -> float:
        return chapter.auto_max + sum(self.hand_max.get(e, 0) for e in chapter.by_hand)

    def hand_graded(self, student: Student, chapter: Chapter) -> list[str]:
        """The exercises of ``chapter`` the instructor grades for ``student``: the by-hand
        ones, and the autograded ones the grader left to the instructor in their notebook."""
        book = student.notebooks.get(chapter.number)
        if book is None:
            return []
        return [e for e in chapter.exercises if chapter.max_points[e] is None
                or e in book.left_to_hand]

    def left_to_hand(self) -> dict[str, float]:
        """Autograded exercises left to the instructor in some student's notebook -> their
        points."""
        return {e: c.max_points[e] for s in self.students for c in self.chapters
                for e in self.hand_graded(s, c) if c.max_points[e] is not None}

    def points(self, student: Student, chapter: Chapter, exercise: str) -> float | None:
        """Points of one exercise; ``None`` for a by-hand one (or one the grader left to the
        instructor) not graded yet."""
        book = student.notebooks.get(chapter.number)
        if chapter.max_points[exercise] is None or (
                book is not None and exercise in book.left_to_hand):
            if exercise in student.hand and student.hand[exercise][0] is not None:
                return student.hand[exercise][0]
            return 0.0 if book is None else None
        if book is None or exercise not in book.results:
            return 0.0
        return book.results[exercise].points or 0.0

    def chapter_points(self, student: Student, chapter: Chapter) -> float:
        """The chapter's points before any late penalty (``chapter_total``: after it)."""
        return sum(self.points(student, chapter, e) or 0 for e in chapter.exercises)

    def lateness(self, student: Student, chapter: Chapter) -> late.Lateness | None:
        """How late the notebook counted for ``chapter`` was handed in, if the LMS says."""
        book = student.notebooks.get(chapter.number)
        return self.handed_in_late.get(book.name) if book is not None else None

    def late_deduction(self, student: Student, chapter: Chapter) -> float:
        """The points the class's late penalty takes off the chapter (mha_grade.late)."""
        return self.penalty.deduction(self.chapter_points(student, chapter),
                                      self.lateness(student, chapter))

    def chapter_total(self, student: Student, chapter: Chapter) -> float:
        """The chapter's points after the late penalty: what the gradebook and Canvas get."""
        return self.penalty.after(self.chapter_points(student, chapter),
                                  self.lateness(student, chapter))

    def late_notes(self, student: Student) -> list[str]:
        """One line per chapter handed in late: how late, by whose word, and the penalty."""
        return [f"chapter {c.number}: " + self.penalty.note(self.chapter_points(student, c),
                                                            self.lateness(student, c))
                for c in self.chapters if self.lateness(student, c) is not None]


class Ambiguous(ValueError):
    """Submissions that cannot be told apart, or matched to the roster, without a guess."""


def confusable(key: str) -> str:
    """What two keys that look alike share: NFKC (full-width letters are letters), case
    folded, runs of spaces as one and none at the ends."""
    return " ".join(unicodedata.normalize("NFKC", key).casefold().split())


def build(notebooks: list[Notebook], chapter_names: dict[str, str], *,
          roster: list[Student] | None = None,
          gradescope: dict[str, list[Owner]] | None = None,
          hand_max: dict[str, float] | None = None, default_hand_max: float = 1.0,
          rule: str = copies.DEFAULT_RULE, handed_in: dict[str, tuple] | None = None,
          chosen: dict[str, str] | None = None, exports: list[str] = (),
          penalty: late.Penalty | None = None,
          lateness: dict[str, late.Lateness] | None = None) -> Gradebook:
    """The gradebook of a class: ``chapter_names`` maps "03" to the chapter notebook's stem;
    ``rule`` says which of a student's copies of a chapter counts (copies.RULES), by
    ``handed_in`` (notebook -> copies.handed_in, for copies on disk); ``chosen`` is the
    instructor's word on a submission the roster cannot place (its key -> a roster login, id
    or SIS id, or "" for none); ``exports`` the Gradescope exports in SUBMISSIONS
    (``gradescope_exports``); ``penalty`` the class's rule for late work and ``lateness`` how
    late each notebook was (mha_grade.late): ``best`` compares copies after the penalty.
    ``Ambiguous`` names every submission to resolve."""
    penalty = penalty or late.Penalty()
    lateness = lateness or {}
    ordered, notes = chapters_found(notebooks, chapter_names)
    hands = {e: (hand_max or {}).get(e, default_hand_max) for c in ordered for e in c.by_hand}
    owners = functools.partial(book_owners, chapter_names=chapter_names,
                               gradescope=gradescope, exports=exports)
    students = list(roster or [])
    matcher = Matcher(students) if roster is not None else None
    owned = [(book, member) for book in notebooks if book.chapter for member in owners(book)]
    found = _match(owned, matcher, students, chosen or {})
    by_key: dict[str, Student] = {}
    handed: dict[tuple[int, str], list[Notebook]] = {}
    for book, owner in owned:
        student = _student(owner, found[identity(owner)], students, by_key, matcher is not None)
        handed.setdefault((id(student), book.chapter), []).append(book)
    ignored = ignored_copies(notebooks, owners, by_key)
    by_id = {id(s): s for s in students}
    when = handed_in or {}
    for (student_id, chapter), books in handed.items():
        _count(by_id[student_id], chapter, books, rule,
               lambda b: when.get(b.name) or copies.handed_in(b.name, None),
               lambda b: penalty.after(b.points, lateness.get(b.name)))
    _unique_keys(students)
    ungraded = [b for b in notebooks if not b.chapter and b not in ignored]
    book = Gradebook(ordered, students, ungraded, notes, hands, roster is not None,
                     ignored=ignored, penalty=penalty, handed_in_late=lateness)
    for exercise, most in book.left_to_hand().items():  # graded by hand for its own points
        book.hand_max.setdefault(exercise, most)
    return book


def chapters_found(notebooks: list[Notebook], chapter_names: dict[str, str]
                   ) -> tuple[list[Chapter], list[str]]:
    """(the chapters graded, by number, each with its exercises in order and their points;
    notes on an exercise with other points in another notebook)."""
    notes: list[str] = []
    chapters: dict[str, Chapter] = {}
    for book in notebooks:
        if not book.chapter:
            continue
        chapter = chapters.setdefault(book.chapter, Chapter(
            book.chapter, chapter_names.get(book.chapter, book.chapter), [], {}))
        for exercise, result in book.results.items():
            if exercise not in chapter.max_points:
                chapter.exercises.append(exercise)
                chapter.max_points[exercise] = result.max_points
            elif result.max_points is not None and chapter.max_points[exercise] is not None \
                    and result.max_points != chapter.max_points[exercise]:
                notes.append(f"exercise {exercise} has {fmt_points(result.max_points)} points "
                             f"in {book.name} but {fmt_points(chapter.max_points[exercise])} "
                             "in another notebook: graded by different versions?")
    for chapter in chapters.values():
        chapter.exercises.sort(key=exercise_key)
    return [chapters[k] for k in sorted(chapters)], notes


def book_owners(book: Notebook, chapter_names: dict[str, str],
                gradescope: dict[str, list[Owner]] | None, exports: list[str]) -> list[Owner]:
    """Who handed ``book`` in: the members Gradescope's metadata names for its submission
    folder, else the owner its path names."""
    owner = owner_of(book.name, chapter_names.get(book.chapter, ""), exports)
    parts = book.name.split("/")
    # the submission_NNN folder (or ch03/submission_NNN) the notebook sits in
    group = next((gradescope[k] for k in ("/".join(parts[:2]), parts[0])
                  if len(parts) > k.count("/") + 1 and k in (gradescope or {})), None)
    return group or [owner]


def left_out_because(book: Notebook) -> str:
    """Why the grader left a copy out, as the gradebook and the summary say it: handed in
    earlier, or at the same time as the graded one, whose name then chose (copies.counted;
    instructor 49: "earlier" for a tie read as a later blank upload)."""
    if "at the same time" in book.problem:
        return ("a copy handed in at the same time as the graded one, not graded (the name "
                "chose: check it is the one meant)")
    return "a copy handed in earlier, not graded"


def ignored_copies(notebooks: list[Notebook], owners, by_key: dict[str, Student]
                   ) -> list[Notebook]:
    """The copies the grader left out, each noted under its student (when known)."""
    ignored = []
    for book in notebooks:  # a copy the grader left out, named under its student
        if not book.chapter and book.problem.startswith(copies.IGNORED):
            ignored.append(book)
            for owner in owners(book):
                student = by_key.get(identity(owner))
                if student is not None:
                    student.notes.append(f"{book.name}: {left_out_because(book)}")
    return ignored


def _match(owned: list[tuple[Notebook, Owner]], matcher: Matcher | None,
           roster: list[Student], chosen: dict[str, str]) -> dict[str, Student | None]:
    """Each owner's roster student (identity -> student, or None: not on the roster), exactly
    or not at all: ``Ambiguous`` if an owner matches several roster entries, if a roster entry
    is matched by several owners (exactly or by name), or if two owners' keys differ only in
    case, width or spaces; ``chosen`` (identity -> a roster login, id or SIS id, or "") settles
    an owner as the instructor says, and leaves it out of those checks."""
    keys = {identity(owner): owner for _, owner in owned}
    unknown = sorted(set(chosen) - set(keys))
    if unknown:
        raise ValueError("--match names no submission: " + ", ".join(
            repr(display(k)) for k in unknown) + " (write the key as the report names it)")
    tokens: dict[str, list[Student]] = {}
    for student in roster:
        for token in {student.id, student.sis_user_id, student.login} - {""}:
            tokens.setdefault(token, []).append(student)
    found: dict[str, Student | None] = {}
    exact: set[str] = set()  # matched by a login, id or SIS id, not by name
    problems: list[str] = []
    for key, owner in keys.items():
        if key in chosen:
            token = chosen[key]
            if token and len({id(s) for s in tokens.get(token, [])}) != 1:
                raise ValueError(f"--match {display(key)}={display(token)}: "
                                 f"{display(token)!r} is not one roster entry's login, id or "
                                 "SIS id")
            found[key] = tokens[token][0] if token else None
            continue
        student, is_exact, why = matcher.find(owner) if matcher is not None else (None, False, "")
        if why:
            problems.append(f"'{display(key)}' {why.removesuffix(': not matched')}")
        found[key] = student
        if is_exact:
            exact.add(key)
    chapters: dict[str, set[str]] = {}
    for book, owner in owned:
        chapters.setdefault(identity(owner), set()).add(book.chapter)
    claims: dict[int, list[str]] = {}
    for key, student in found.items():
        if student is not None and key not in chosen:  # the instructor's word settles it
            claims.setdefault(id(student), []).append(key)
    for matched in claims.values():
        if len(matched) > 1 and not _one_student(matched, exact, chapters):
            student = found[matched[0]]
            problems.append(", ".join(f"'{display(k)}'" for k in matched) + " all match "
                            f"{display(student.name)} "
                            f"({display(student.login or student.id or student.sis_user_id)})"
                            " on the roster")
    alike: dict[str, list[str]] = {}
    for key in keys:
        if key not in chosen:
            alike.setdefault(confusable(key), []).append(key)
    problems += [", ".join(f"'{display(k)}'" for k in group) + " differ only in case, width "
                 "or spaces" for group in alike.values() if len(group) > 1]
    if problems:
        raise Ambiguous(
            "submissions that cannot be matched to one student without a guess (nothing was "
            "written):\n" + "\n".join(f"  {p}" for p in problems) + "\nResolve each with "
            "--match KEY=LOGIN (the roster's login, id or SIS id) or --match KEY= (nobody on "
            "the roster: a row of its own), or remove the copy that is not the student's, "
            "then run the report again.")
    return found


def _one_student(keys: list[str], exact: set[str], chapters: dict[str, set[str]]) -> bool:
    """Whether the keys that match one roster entry are that student's, each from another
    layout of the class folder (a Canvas download's id for one chapter, a folder named by the
    login for another: instructor 47): each matched by a login or an id (not by name), no two
    alike but for case, width or spaces (look-alike folders: issue 35), and no chapter under
    two of them (a copy under one would displace the other's)."""
    held = [chapters.get(key, set()) for key in keys]
    return all(key in exact for key in keys) \
        and len({confusable(key) for key in keys}) == len(keys) \
        and sum(len(c) for c in held) == len(set().union(*held))


def _student(owner: Owner, match: Student | None, students: list[Student],
             by_key: dict[str, Student], with_roster: bool) -> Student:
    """The student ``owner`` is: on the roster, or seen before, or new."""
    student = match or by_key.get(identity(owner))
    if student is None:
        student = Student(owner.key, owner.name, owner.canvas_id, owner.sis_id, owner.email)
        if with_roster:
            student.notes.append("not on the roster")
        students.append(student)
    by_key[identity(owner)] = student
    return student


def _count(student: Student, chapter: str, books: list[Notebook], rule: str, when,
           points) -> None:
    """The copy of ``chapter`` that counts for ``student``, by ``rule`` (copies.counted), by
    ``points(copy)`` (after any late penalty) for ``best``."""
    books = list({id(b): b for b in books}.values())  # a group's notebook once per member
    if len(books) == 1:
        student.notebooks[chapter] = books[0]
        return
    best, why = copies.counted(books, rule, when, points)
    student.notebooks[chapter] = best
    others = [b for b in books if b is not best]
    student.others += others
    if rule == "latest":
        why += f", by {copies.order_name(best.name)}"
    student.notes.append(f"chapter {chapter} handed in {len(books)} times: {best.name} counted "
                         f"({why}; --copies {rule}), {', '.join(b.name for b in others)} not")


def _unique_keys(students: list[Student]) -> None:
    """Every student a key of their own: the roster's login, id or name, else the
    submission's; a second "Li Wei" becomes "Li Wei (2)"."""
    seen: set[str] = set()
    for student in students:
        base = student.key or student.login or student.id or student.sis_user_id or \
            student.name or "student"
        key, count = base, 1
        while key in seen:
            count += 1
            key = f"{base} ({count})"
        student.key = key
        seen.add(key)


# ---------------------------------------------------------------------------------------------
# Writing

def gradebook_rows(book: Gradebook) -> tuple[list[str], list[list[object]]]:
    """gradebook.csv: a header, a row of maximum points, then one row per student."""
    header = ["student", "name", "id", "sis_user_id", "login", "section"]
    top: list[object] = ["max points", "", "", "", "", ""]
    for chapter in book.chapters:
        for exercise in chapter.exercises:
            most = chapter.max_points[exercise]
            header.append(exercise + (" (by hand)" if most is None else ""))
            top.append(fmt_points(book.hand_max[exercise] if most is None else most))
        header.append(f"{chapter.name} total")
        top.append(fmt_points(book.chapter_max(chapter)))
    penalised = book.penalty.active  # a column for the points taken off, when a rule is set
    header += ["autograded", "by hand"] + ["late penalty (points off)"] * penalised + [
        "total", "chapters handed in", "notes", "feedback"]
    auto_max = sum(c.auto_max for c in book.chapters)
    hand_max = sum(book.hand_max[e] for c in book.chapters for e in c.by_hand)
    top += [fmt_points(auto_max), fmt_points(hand_max)] + [""] * penalised + [
        fmt_points(auto_max + hand_max), str(len(book.chapters)), "", ""]
    rows = [top]
    for student in book.students:
        row: list[object] = [student.key, student.name, student.id, student.sis_user_id,
                             student.login, student.section]
        auto = hand = 0.0
        for chapter in book.chapters:
            for exercise in chapter.exercises:
                value = book.points(student, chapter, exercise)
                row.append(fmt_points(value))
                if chapter.max_points[exercise] is None:
                    hand += value or 0
                else:
                    auto += value or 0
            row.append(fmt_points(book.chapter_total(student, chapter)))
        off = sum(book.late_deduction(student, c) for c in book.chapters)
        notes = list(student.notes) + book.late_notes(student)
        missing = [e for c in book.chapters for e in book.hand_graded(student, c)
                   if book.points(student, c, e) is None]
        if missing:
            notes.append(f"by hand, not graded yet: {', '.join(missing)}")
        if not student.notebooks:
            notes.append("handed in nothing")
        for _, nb in sorted(student.notebooks.items()):
            if nb.flags:
                notes.append(f"{nb.name}: review: {nb.flags}")
        row += [fmt_points(auto), fmt_points(hand)] + [fmt_points(off)] * penalised + [
                fmt_points(auto + hand - off), str(len(student.notebooks)), "; ".join(notes),
                f"feedback/{feedback_file(student.key)}"]
        rows.append(row)
    return header, rows


CANVAS_HEADER = ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"]
POINTS_POSSIBLE = "    Points Possible"  # Canvas's export writes it so (four spaces)


def canvas_rows(book: Gradebook, columns: dict[str, str], blank_missing: bool = False
                ) -> tuple[list[list[object]], list[str]]:
    """Canvas's gradebook import: Student, ID, SIS User ID, SIS Login ID, Section, then one
    column per chapter, ``"Name (assignment id)"`` for an assignment Canvas has (``columns``:
    "03" or the chapter's name -> that header), else the chapter's name (Canvas then makes a
    new assignment); the second row holds the points possible. Students Canvas cannot find
    (no id, SIS id or login), and with a roster students not on it, are left out and named
    in the notes. A chapter a student handed in no notebook of is 0 (Canvas then replaces its
    "missing"), or blank with ``blank_missing`` (Canvas then leaves the grade as it is)."""
    header = list(CANVAS_HEADER)
    for chapter in book.chapters:
        header.append(columns.get(chapter.number) or columns.get(chapter.name) or chapter.name)
    rows: list[list[object]] = [header, [POINTS_POSSIBLE, "", "", "", ""] + [
        fmt_points(book.chapter_max(c)) for c in book.chapters]]
    left_out, off_roster = [], []
    for student in book.students:
        if not (student.id or student.sis_user_id or student.login):
            left_out.append(student.key)
            continue
        if book.roster and not student.on_roster:
            # its id comes from a file name, not from Canvas: it could be anybody's
            off_roster.append(student.key)
            continue
        rows.append([student.name, student.id, student.sis_user_id, student.login,
                     student.section] + [
            "" if blank_missing and c.number not in student.notebooks
            else fmt_points(book.chapter_total(student, c)) for c in book.chapters])
    notes = [f"canvas_import.csv leaves out {len(left_out)} student(s) with no Canvas id, SIS "
             f"id or login (a roster gives them: Canvas's gradebook export): "
             f"{', '.join(left_out[:10])}{', ...' if len(left_out) > 10 else ''}"
             ] if left_out else []
    if off_roster:
        notes.append(f"canvas_import.csv leaves out {len(off_roster)} student(s) not on the "
                     "roster (their ids would come from file names; add them to the roster, or "
                     f"--match them, to include them): {', '.join(off_roster[:10])}"
                     f"{', ...' if len(off_roster) > 10 else ''}")
    return [[cell(v) for v in row] for row in rows], notes
