"""A Gradescope autograder for the course, built on the grader (``mha-grade grade``).

    mha-grade gradescope build --chapter 03_attention_with_weights [OUT.zip]   # one assignment
    mha-grade gradescope build --all [OUT.zip]   # one assignment for the whole course
    mha-grade gradescope prepare             # setup.sh: the unprivileged user
    mha-grade gradescope run [--root DIR]    # run_autograder: grade, write results.json

``build`` writes a zip with Gradescope's two entry points at its top (tools/autograder/setup.sh,
tools/autograder/run_autograder) and what they need: the source of the course package and of the
grader, ``mha`` and ``mha_grade`` (both installed, not editable, by setup.sh), the instructor's
chapter notebooks (the checks' reference) and what grading imports (requirements-grading.txt).

``run`` grades ``/autograder/submission`` the way ``mha-grade grade`` grades a class, with what a
Gradescope container needs on top (the grader runs as root there):

- the notebook runs as the unprivileged user ``student`` (made by ``prepare``), inside a
  bubblewrap sandbox when the container lets that user make namespaces, else without one (the
  output says which); ``/autograder``'s grader, notebooks, submission and results are root's
  alone (mode 700), so that user can neither read nor change them;
- every process of that user is killed before anything is written, however it detached itself
  (by root, through /proc, so nothing the user runs can stop the killing); Gradescope's
  ``submission_metadata.json`` (names, e-mails, earlier results) is made root's alone too;
- a ``results.json`` is always written, with a test saying what went wrong if grading failed;
- ``results.json`` (Gradescope's documented format: one test per exercise with name, score,
  max_score, output) is built from the grader's own in-memory results, never from a file;
- the zip grades the chapter it was built for (``--chapter``; one Gradescope assignment per
  chapter, one zip each) and nothing else: a notebook of another chapter gets a test worth 0
  saying it was ignored, so one chapter's work scores in its own assignment only, and the score
  never exceeds the chapter's points (``--all``: every chapter, for one assignment that covers
  the course);
- one chapter handed in more than once (``09_decoders.ipynb``, ``final_09_decoders.ipynb``, or
  a ``copy.ipynb`` whose exercise labels are chapter 9's) counts once, by the rule of local
  grading (mha_grade.copies, ``build --copies``): by default the copy modified last is graded
  and the others get a test saying they were ignored and why; with ``best`` every copy is
  graded and the one with the most points counts;
- late work (``build --late-penalty``, mha_grade.late; default none): how late comes from
  Gradescope's ``submission_metadata.json`` (``created_at`` against the due date), read as
  root after it is made root's and before any student code runs; the penalty lowers the score
  and a test worth nothing says how late and what was taken off.
"""

from __future__ import annotations

import argparse
import json
import os
import pwd
import secrets
import subprocess
import sys
import time
import zipfile
from pathlib import Path

from mha.exercises import set_grading_seed
from mha_grade import ROOT, copies, escape, files, late, outputs, sandbox, submissions, workers
from mha_grade import assignments as chapters
from mha_grade.compare import LEFT_TO_INSTRUCTOR, Outcome
from mha_grade.exercise_format import chapter_notebooks
from mha_grade.run import Settings
from mha_grade.submissions import Found

USER = "student"
# what the autograder needs, relative to the repository
CONTENTS = ["pyproject.toml", "README.md", "requirements-grading.txt", "src/mha", "src/mha_grade",
            "notebooks", "tools/reachable.py"]


# Gradescope's documented test visibilities (results.json): "visible" always; "hidden" never
# shown to students; "after_due_date" once the due date (or the late due date) has passed;
# "after_published" once the instructor publishes the grades
VISIBILITIES = ("visible", "hidden", "after_due_date", "after_published")
SETTINGS_FILE = "gradescope_settings.json"  # written into the zip by build: the instructor's
DEFAULT_HIDDEN_VISIBILITY = "after_due_date"
ALL = "all"  # the zip's chapter for one assignment that grades every chapter


def course_chapters() -> list[str]:
    """The chapters a zip can be built for: the course's notebooks that have graded exercises."""
    return [p.stem for p in chapter_notebooks(ROOT)
            if chapters.load_assignment(p).exercises]


def chapter_named(chapter: str, known: list[str]) -> str:
    """``chapter`` as one of ``known``: its full name, or its number ("03"); ValueError else."""
    found = [k for k in known if chapter in (k, k[:2])]
    if len(found) != 1:
        raise ValueError(f"chapter must be one of {', '.join(known)} (or its number, or "
                         f"'{ALL}'), got {chapter!r}")
    return found[0]


def build(out: Path, chapter: str, hidden_visibility: str = DEFAULT_HIDDEN_VISIBILITY,
          rule: str = copies.DEFAULT_RULE, late_penalty: str = late.NONE) -> Path:
    """The zip for one Gradescope assignment: ``chapter`` is the chapter it grades (its name or
    number; ALL for every chapter); ``hidden_visibility`` (one of VISIBILITIES) is when students
    see the tests of the checks' hidden parts; ``rule`` which copy of a chapter handed in more
    than once counts (copies.RULES); ``late_penalty`` the rule for late work (late.Penalty).
    All are kept in the zip's SETTINGS_FILE."""
    if hidden_visibility not in VISIBILITIES:
        raise ValueError(f"hidden_visibility must be one of {VISIBILITIES}")
    if rule not in copies.RULES:
        raise ValueError(f"rule must be one of {copies.RULES}, not {rule!r}")
    penalty = late.Penalty.parse(late_penalty, "late_penalty")
    if chapter != ALL:
        chapter = chapter_named(chapter, course_chapters())
    out.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as bundle:
        bundle.writestr(SETTINGS_FILE, json.dumps({"chapter": chapter, "copies": rule,
                                                   "hidden_visibility": hidden_visibility,
                                                   "late_penalty": str(penalty)}))
        for name in ("setup.sh", "run_autograder"):
            info = zipfile.ZipInfo(name)
            info.external_attr = 0o100755 << 16  # a regular, executable file, as Gradescope needs
            bundle.writestr(info, (ROOT / "tools" / "autograder" / name).read_bytes())
        for entry in CONTENTS:
            path = ROOT / entry
            files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file()
                                                         and "__pycache__" not in p.parts)
            for file in files:
                bundle.write(file, file.relative_to(ROOT))
    return out


def prepare(name: str = USER) -> sandbox.User:
    """The unprivileged user the notebooks run as, made if missing (a system user: no home, no
    login shell, a group of its own)."""
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        subprocess.run(["useradd", "--system", "--user-group", "--no-create-home",
                        "--home-dir", "/nonexistent", "--shell", "/usr/sbin/nologin", name],
                       check=True)
        entry = pwd.getpwnam(name)
    if entry.pw_uid == 0:
        raise SystemExit(f"the user {name} is root: not a user to run submissions as")
    return sandbox.User(name, entry.pw_uid, entry.pw_gid)


def lock_down(root: Path) -> None:
    """Make ``root``'s grader, notebooks, submission and results root's alone; ``root`` itself
    only traversable, so the user still reaches the Python environment installed in it."""
    for path in (root / "source", root / "submission", root / "results"):
        path.mkdir(exist_ok=True)
        os.chown(path, 0, 0)
        path.chmod(0o700)
    # Gradescope's own file: the submitters' names, e-mails and earlier results
    metadata = root / "submission_metadata.json"
    if metadata.exists() and not metadata.is_symlink():
        os.chown(metadata, 0, 0)
        metadata.chmod(0o600)
    os.chown(root, 0, 0)
    root.chmod(0o711)


def this_chapter(found: list[Found], assignments: list[chapters.Assignment], chapter: str
                 ) -> tuple[list[Found], list[tuple[Found, str]]]:
    """The notebooks the assignment of ``chapter`` grades (those of no known chapter too: they
    are reported, worth nothing), and [(a notebook of another chapter, why it is ignored)]."""
    if chapter == ALL:
        return found, []
    kept: list[Found] = []
    ignored: list[tuple[Found, str]] = []
    for item in found:
        assignment = submissions.chapter_of_file(item.relative, item.path, assignments)
        if assignment is None or assignment.name == chapter:
            kept.append(item)
        else:
            ignored.append((item, f"ignored: this is chapter {assignment.chapter}'s notebook "
                                  f"({assignment.name}); this assignment grades chapter "
                                  f"{chapter[:2]} only ({chapter}.ipynb). Hand it in to "
                                  f"chapter {assignment.chapter}'s assignment."))
    return kept, ignored


def one_per_chapter(found: list[Found], assignments: list[chapters.Assignment],
                    rule: str = copies.DEFAULT_RULE
                    ) -> tuple[list[Found], list[tuple[Found, str]]]:
    """The copies of each chapter to grade, by ``rule`` (mha_grade.copies): (the ones to grade,
    [(ignored, why)]). With "latest", the copy modified last; with "best", the last
    ``MAX_COPIES_GRADED`` (then ``best_copies`` keeps the one with the most points)."""
    by_chapter: dict[str, list[Found]] = {}
    for item in found:  # the chapter each is graded as: by its name or its exercise labels
        assignment = submissions.chapter_of_file(item.relative, item.path, assignments)
        if assignment is not None:
            by_chapter.setdefault(assignment.name, []).append(item)
    ignored: list[tuple[Found, str]] = []
    for name, items in by_chapter.items():
        if len(items) < 2:
            continue

        def when(i):
            return copies.handed_in(i.relative, i.path)

        if rule == "best":
            older = sorted(items, key=when)[:-submissions.MAX_COPIES_GRADED]
            ignored.extend((i, f"ignored: chapter {name} was handed in {len(items)} times; only "
                               f"the last {submissions.MAX_COPIES_GRADED} are graded")
                           for i in older)
            continue
        chosen, why = copies.counted(items, rule, when)
        shown = escape.display(chosen.relative)
        others = [i for i in items if i is not chosen]
        chosen.problem = (f"graded: chapter {name} was handed in {len(items)} times; this one "
                          f"is graded because it was {why} (by the files' modification "
                          f"times); ignored: "
                          + submissions.named(others))
        ignored.extend((i, f"ignored: chapter {name} was handed in {len(items)} times and "
                           f"{shown} is graded, because it was {why} (by the files' "
                           f"modification times)")
                       for i in others)
    dropped = {id(i) for i, _ in ignored}
    return [i for i in found if id(i) not in dropped], ignored


def best_copies(outcomes: list[Outcome], found: list[Found]
                ) -> tuple[list[Outcome], list[tuple[Found, str]]]:
    """``--copies best``, once every copy is graded: per chapter the outcome with the most
    points (a tie: the copy modified last), and [(each other copy, why it is ignored)]."""
    by_shown = {escape.display(f.relative): f for f in found}
    by_chapter: dict[str, list[Outcome]] = {}
    for outcome in outcomes:
        if outcome.assignment is not None:
            by_chapter.setdefault(outcome.assignment.name, []).append(outcome)
    ignored: list[tuple[Found, str]] = []
    for name, graded in by_chapter.items():
        if len(graded) < 2:
            continue

        def when(o: Outcome) -> tuple:
            item = by_shown.get(o.notebook)
            return copies.handed_in(o.notebook, item.path if item else None)

        chosen, why = copies.counted(graded, "best", when, lambda o: sum(o.points.values()))
        chosen.problem = "; ".join(filter(None, [
            f"counted: chapter {name} was handed in {len(graded)} times, every copy graded; "
            f"this one counts: {why}", chosen.problem]))
        for outcome in graded:
            if outcome is not chosen and outcome.notebook in by_shown:
                ignored.append((by_shown[outcome.notebook],
                                f"ignored: chapter {name} was handed in {len(graded)} times; "
                                f"{chosen.notebook} counts: {why} "
                                f"({sum(outcome.points.values()):g} points here)"))
    dropped = {id(o) for o in outcomes for item, _ in ignored
               if o.notebook == escape.display(item.relative)}
    return [o for o in outcomes if id(o) not in dropped], ignored


def total_points(assignment: chapters.Assignment) -> float:
    """What a chapter's autograded exercises are worth together."""
    return float(sum(assignment.max_points(e) or 0 for e in assignment.exercises))


def report(outcomes: list[Outcome], ignored: list[tuple[Found, str]],
           notes: list[str], hidden_visibility: str = DEFAULT_HIDDEN_VISIBILITY,
           cap: float | None = None) -> dict:
    """Gradescope's results.json, from the grader's outcomes.

    One test per exercise; an exercise whose check has parts (mha.exercises) gets one test per
    part instead, named after it, so that one edge case wrong shows as that part's 0. A
    hidden part's test has ``hidden_visibility``: students see neither its points nor its
    message before then (Gradescope's documented meaning of each value, VISIBILITIES). The
    score is at most ``cap`` (the assignment's points), whatever the tests add up to."""
    if hidden_visibility not in VISIBILITIES:
        raise ValueError(f"hidden_visibility must be one of {VISIBILITIES}, got "
                         f"{hidden_visibility!r}")
    tests = []
    for outcome in outcomes:
        if outcome.assignment is None:
            continue
        for exercise in outcome.assignment.exercises:
            most = outcome.assignment.max_points(exercise)
            declared = [part for index in exercise.checks for part in getattr(
                outcome.assignment.checkers[index], "parts", ())]
            # left to the instructor (not plain code): no score, graded by hand on Gradescope
            left = outcome.status.get(exercise.name) == LEFT_TO_INSTRUCTOR
            if most is not None and declared and not left:
                tests.extend(_part_tests(outcome, exercise.name, declared, hidden_visibility))
                continue
            test = {"name": f"{outcome.notebook}: exercise {exercise.name}",
                    "output": student_text(outcome.status.get(exercise.name, ""),
                                          outcome.message.get(exercise.name, ""),
                                          outcome.problem),
                    "visibility": "visible"}
            if most is not None and not left:  # exercises graded by hand have no points here
                test.update(score=float(outcome.points.get(exercise.name, 0)),
                            max_score=float(most))
            tests.append(test)
    for item, why in ignored:
        tests.append({"name": f"{escape.display(item.relative)}: ignored", "score": 0.0,
                      "max_score": 0.0, "output": why})
    skipped = [f"{o.notebook}: {o.problem}" for o in outcomes if o.assignment is None]
    if not any(o.assignment for o in outcomes) and not ignored:
        # (a notebook of another chapter is named among the ignored: instructor 48)
        notes = [*notes, "No notebook of the course was found in the submission."]
    score = sum(t.get("score", 0.0) for t in tests)
    if cap is not None and score > cap:  # cannot happen with one notebook per chapter
        notes = [*notes, f"The tests add up to {score:g} points, more than the assignment's "
                         f"{cap:g}: the score is {cap:g}."]
        score = cap
    return {"score": score, "tests": tests,
            "output": "\n".join([*notes, *skipped]), "visibility": "visible",
            "stdout_visibility": "hidden"}


def _part_tests(outcome: Outcome, exercise: str, declared: list, hidden_visibility: str
                ) -> list[dict]:
    """One test per declared part: its points if it ran, else 0 and why the check did not."""
    ran = {part["name"]: part for part in outcome.parts.get(exercise, [])}
    tests = []
    for part in declared:
        got = ran.get(part.name)
        kind = "hidden part" if part.hidden else "part"
        status, message = ((got["status"], got["message"]) if got else
                           (outcome.status.get(exercise, ""), outcome.message.get(exercise, "")))
        tests.append({"name": f"{outcome.notebook}: exercise {exercise}, {kind} '{part.name}'",
                      "score": float(got["points"]) if got else 0.0,
                      "max_score": float(part.points),
                      "output": student_text(status, message, outcome.problem),
                      "visibility": hidden_visibility if part.hidden else "visible"})
    return tests


def student_text(status: str, message: str, problem: str = "") -> str:
    """A test's text for the student: the status, then the check's message unless it only says
    the status again ("correct", not "correct correct"), the notebook's problem on a line of
    its own."""
    said = message if not status or message.startswith(status) else \
        ": ".join(filter(None, [status, message]))
    return "\n".join(filter(None, [said, problem]))


METADATA = "submission_metadata.json"  # Gradescope's, in the autograder's root
MAX_METADATA_BYTES = 64 * 2**20  # it holds earlier submissions' results too


def submitted_late(root: Path) -> tuple[late.Lateness | None, str]:
    """How late Gradescope's metadata says this submission is (None: on time, or not known),
    and a line for the instructor's log saying which."""
    try:
        metadata = json.loads(files.read_regular(root / METADATA, MAX_METADATA_BYTES))
        lateness = late.gradescope_lateness(metadata)
    except ValueError as error:  # missing, not JSON, or not as Gradescope documents it
        return None, f"lateness not known, no late penalty: {METADATA}: {error}"
    return lateness, ("handed in on time (or no due date), by " + METADATA if lateness is None
                      else f"handed in {lateness.words()}")


def with_late_penalty(result: dict, penalty: late.Penalty, lateness: late.Lateness | None
                      ) -> None:
    """Takes the zip's late penalty off ``result``'s score (never below 0, never up) and adds
    a test worth nothing, and a line of output, saying how late and what was taken off."""
    if lateness is None or not penalty.active:
        return
    said = penalty.note(result["score"], lateness)
    result["score"] = penalty.after(result["score"], lateness)
    result["tests"].append({"name": "late penalty", "score": 0.0, "max_score": 0.0,
                            "output": said[0].upper() + said[1:] + ".",
                            "visibility": "visible"})
    result["output"] = "\n".join(filter(None, [f"Late: {said}.", result["output"]]))


def zip_settings(source: Path) -> dict:
    """The instructor's choices written into the zip by ``build`` (defaults if none; a zip
    that names no chapter has ``chapter`` None, and grades nothing)."""
    path = source / SETTINGS_FILE
    chosen = json.loads(path.read_text()) if path.is_file() else {}
    return {"chapter": chosen.get("chapter"),
            "copies": chosen.get("copies", copies.DEFAULT_RULE),
            "hidden_visibility": chosen.get("hidden_visibility", DEFAULT_HIDDEN_VISIBILITY),
            "late_penalty": chosen.get("late_penalty", late.NONE)}


def run(root: Path, isolation: str = "auto", timeout: float = 300.0,
        cell_timeout: float = 120.0, hidden_visibility: str | None = None,
        chapter: str | None = None) -> dict:
    """Grade ``root/submission`` and write ``root/results/results.json``; returns the report.
    ``chapter`` (else the zip's) is the one chapter graded, or ALL.
    Whatever fails, a results.json is written: with a test saying what went wrong."""
    try:
        return _run(root, isolation, timeout, cell_timeout, hidden_visibility, chapter)
    except BaseException as error:
        result = failed(error)
        try:
            sandbox.kill_user(prepare())
        except BaseException as again:  # noqa: BLE001 (the row is written whatever happens)
            result["output"] += f"\nand the student's processes may not all be killed: {again!r}"
        (root / "results").mkdir(exist_ok=True)
        with files.create(root / "results" / "results.json", 0o644) as handle:
            json.dump(result, handle, indent=1)
        print(f"wrote results.json after an error: {error!r}", flush=True)
        if isinstance(error, Exception):
            return result
        raise


def failed(error: BaseException) -> dict:
    """results.json for a run that could not grade: 0 points and a test saying why."""
    why = (f"The autograder failed ({type(error).__name__}: {str(error)[:300]}); "
           "nothing was graded. Ask your instructor to grade this submission by hand.")
    return {"score": 0.0, "tests": [{"name": "autograder", "score": 0.0, "max_score": 0.0,
                                     "output": why}], "output": why,
            "visibility": "visible", "stdout_visibility": "hidden"}


def _run(root: Path, isolation: str, timeout: float, cell_timeout: float,
         hidden_visibility: str | None = None, chapter: str | None = None) -> dict:
    """``run``'s work: settle the chapter, take the machine from the student's user, grade
    the submission's notebooks as that user, then write results.json from this process."""
    start = time.monotonic()
    settings_of_zip = zip_settings(root / "source")
    chapter = chapter or settings_of_zip["chapter"]
    if chapter is None:
        raise ValueError("the autograder zip names no chapter: build it again with "
                         "'mha-grade gradescope build --chapter NAME' (or --all)")
    penalty = late.Penalty.parse(settings_of_zip["late_penalty"], SETTINGS_FILE)
    user = prepare()
    lock_down(root)
    lateness, said = submitted_late(root)  # Gradescope's word, read before any student code
    print(said, flush=True)
    sandbox.kill_user(user)  # nothing of the user's may be running when grading starts
    why, how = isolation_of(user, isolation)
    seed = secrets.randbits(48)
    set_grading_seed(seed)
    chapter, sources, assignments = graded_chapters(root, chapter)
    rule = settings_of_zip["copies"]
    found, ignored, assignments = submitted_copies(root, assignments, chapter, rule)
    settings = Settings(timeout, cell_timeout, why is None, sandbox.Limits(), False, user)
    outcomes = grade_submission(root, found, assignments, settings, seed, sources)
    killed = sandbox.kill_user(user)  # before anything is written: nothing of theirs is left
    outcomes, ignored = counted_outcomes(outcomes, found, ignored, rule)
    notes = [how] + ([f"{killed} process(es) of '{user.name}' still running after grading "
                      "were killed."] if killed else [])
    if chapter != ALL and not any(o.assignment for o in outcomes):
        notes.append(f"No notebook of chapter {chapter[:2]} ({chapter}.ipynb), the chapter "
                     "of this assignment, was found in the submission.")
    result = report(outcomes, ignored, notes,
                    hidden_visibility or settings_of_zip["hidden_visibility"],
                    cap=sum(map(total_points, assignments)))
    with_late_penalty(result, penalty, lateness)
    with files.create(root / "results" / "results.json", 0o644) as handle:
        json.dump(result, handle, indent=1)
    print(f"wrote results.json: {result['score']:g} points ({time.monotonic() - start:.1f} s)")
    return result


def isolation_of(user: sandbox.User, isolation: str) -> tuple[str | None, str]:
    """(why bubblewrap is not used, or None; how the notebook runs, for the student), the
    latter printed for the instructor's log with the former."""
    why = "not asked for (--isolation user)" if isolation == "user" else sandbox.unavailable(user)
    if why is None:  # bubblewrap works: Python must start in it, or the notebook would score 0
        broken = sandbox.cannot_start_python_in_sandbox(user)  # for the grader's own failure
        if broken:
            raise RuntimeError(f"cannot grade: {broken}")
    how = (f"The notebook ran as the unprivileged user '{user.name}' inside a bubblewrap sandbox."
           if why is None else f"The notebook ran as the unprivileged user '{user.name}', "
           "without bubblewrap.")
    # why bubblewrap could not start is the instructor's (the log, hidden from students)
    print(how if why is None else f"{how[:-1]} ({why}).", flush=True)
    return why, how


def graded_chapters(root: Path, chapter: str) -> tuple[str, list[Path], list]:
    """(the chapter's name, or ALL; the instructor's notebooks graded against, from the zip;
    every chapter with exercises)."""
    sources = chapter_notebooks(root / "source")  # the instructor's chapters, in the zip
    assignments = [a for a in map(chapters.load_assignment, sources) if a.exercises]
    if chapter != ALL:  # only this chapter's notebook is graded: the others are worth nothing
        chapter = chapter_named(chapter, [a.name for a in assignments])
        sources = [p for p in sources if p.stem == chapter]
    return chapter, sources, assignments


def submitted_copies(root: Path, assignments: list, chapter: str, rule: str
                     ) -> tuple[list[Found], list[tuple[Found, str]], list]:
    """(the submission's notebooks to grade, those ignored and why, the chapters graded): one
    copy per chapter by ``rule`` (every copy with best), other chapters' notebooks ignored."""
    # one student's submission: its copies of a chapter are chosen below, not as a class's
    found, elsewhere = this_chapter(submissions.find_submissions(root / "submission",
                                                                 assignments, rule=None),
                                    assignments, chapter)
    assignments = [a for a in assignments if chapter in (ALL, a.name)]
    found, ignored = one_per_chapter(found, assignments, rule)
    return found, elsewhere + ignored, assignments


def grade_submission(root: Path, found: list[Found], assignments: list, settings: Settings,
                     seed: int, sources: list[Path]) -> list[Outcome]:
    """Grade ``found``, one notebook at a time, in a sandbox prefix removed afterwards."""
    outcomes: list[Outcome] = []
    prefix = sandbox.Prefix()
    try:
        workers.grade_all(found, assignments, settings, seed=seed, sources=sources, prefix=prefix,
                          hide=[str(prefix.root), str(root)], jobs=1,
                          on_outcome=outcomes.append)
    finally:
        prefix.remove()
    return outcomes


def counted_outcomes(outcomes: list[Outcome], found: list[Found],
                     ignored: list[tuple[Found, str]], rule: str
                     ) -> tuple[list[Outcome], list[tuple[Found, str]]]:
    """The outcomes that count (with best: each chapter's best copy; the others join the
    ignored), each printed for the instructor's log."""
    if rule == "best":
        outcomes, worse = best_copies(outcomes, found)
        ignored += worse
    for outcome in outcomes:
        print("  " + escape.terminal(outputs.summary_line(outcome)), flush=True)
    return outcomes, ignored


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="mha-grade gradescope",
                                     description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    make = commands.add_parser("build", help="write the autograder zip")
    make.add_argument("out", type=Path, nargs="?", default=None,
                      help="the zip to write (default: _build/gradescope-<chapter>.zip, so that "
                           "each assignment's zip keeps its own name)")
    which = make.add_mutually_exclusive_group(required=True)
    which.add_argument("--chapter", help="the chapter the assignment grades, by its name "
                       "(03_attention_with_weights) or number (03): one zip per assignment")
    which.add_argument("--all", action="store_true",
                       help="grade every chapter: one assignment for the whole course")
    make.add_argument("--copies", choices=copies.RULES, default=copies.DEFAULT_RULE,
                      help="a chapter handed in more than once: grade the copy modified last "
                           "(latest, the default), or every copy, the one with the most points "
                           "to count (best), as mha-grade grade --copies")
    make.add_argument("--late-penalty", default=late.NONE, metavar="RULE",
                      help=late.HELP.replace("Canvas's '_late' in a bulk download's names, ", "")
                      + " (Gradescope's own late-penalty setting too: use one of the two)")
    make.add_argument("--hidden-visibility", choices=VISIBILITIES,
                      default=DEFAULT_HIDDEN_VISIBILITY,
                      help="when students see the tests of the checks' hidden parts "
                           "(Gradescope's test visibility; default: after_due_date)")
    commands.add_parser("prepare", help="make the unprivileged user (setup.sh, as root)")
    grading = commands.add_parser("run", help="grade the submission (run_autograder, as root)")
    grading.add_argument("--root", type=Path, default=Path("/autograder"))
    grading.add_argument("--isolation", choices=["auto", "user"], default="auto",
                         help="auto: bubblewrap if the container allows it, else the user alone")
    grading.add_argument("--timeout", type=float, default=300.0)
    grading.add_argument("--cell-timeout", type=float, default=120.0)
    grading.add_argument("--hidden-visibility", choices=VISIBILITIES, default=None,
                         help="overrides the zip's setting (see build)")
    grading.add_argument("--chapter", default=None,
                         help=f"overrides the zip's chapter (see build; '{ALL}': every one)")
    args = parser.parse_args(argv)
    if args.command == "build":
        try:
            chapter = ALL if args.all else args.chapter
            out = args.out or ROOT / "_build" / f"gradescope-{chapter}.zip"
            bundle = build(out, chapter, args.hidden_visibility, args.copies,
                           args.late_penalty)
        except ValueError as error:
            parser.error(str(error))
        print(f"wrote {bundle}")
    elif args.command == "prepare":
        user = prepare()
        print(f"user {user.name}: uid {user.uid}, gid {user.gid}")
    else:
        if os.geteuid() != 0:
            raise SystemExit("run_autograder runs as root (as on Gradescope): it needs to run "
                             "the notebook as another user")
        run(args.root, args.isolation, args.timeout, args.cell_timeout, args.hidden_visibility,
            args.chapter)
    return 0


if __name__ == "__main__":
    sys.exit(main())
