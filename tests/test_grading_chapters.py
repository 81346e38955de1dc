"""Every chapter, graded once in the sandbox: full marks, and its student edition's stubs zero.

One run of `mha-grade grade` over a folder holding every chapter notebook (two at a time, as
`make grade` runs them), each in the bubblewrap sandbox with the read-only, non-editable copy
of `mha` (no src/ on the path, no repository around it: what a student in Colab has), so it
shows at once that each chapter runs outside the repository and that its solutions score full
marks, without an error or a flag. Then, in the same process after the chapter has run, the
student edition's stub of every checked exercise (mha_grade.student_edition) is fed to its
check and must score zero ("not done"). Besides nbval's, this is the only execution of a
chapter in the tests (the student edition itself is checked statically in
test_student_edition.py). One run, not one per chapter: the grader's own start (its process
and a grading process, each importing torch) is paid once.

Chapter 3 is handed in with every cell's metadata removed (no tags: the check cells are found by
the calls they make), as a student's editor may leave it; its points must be what its committed
outputs print (which nbval reproduces), with the hidden parts on top.

The hidden-input seed is fixed here (``--seed``), unlike in a real grading run, so that a
failure can be reproduced.
"""

import copy
import csv
import json
import subprocess
import sys

import pytest
from exercise_notebooks import WITH_EXERCISES, fmt, printed_points, student_edition

from conventions import ROOT

GRADER = [sys.executable, "-m", "mha_grade", "grade"]
CHAPTER_3 = ROOT / "notebooks" / "03_attention_with_weights.ipynb"


def notebooks_to_grade(items) -> list:
    """The notebooks the selected tests of this module grade (all of them in `make test`, one
    chapter's in `make chapter`): a test's `path`, else the chapter it is marked with."""
    wanted = set()
    for item in items:
        if getattr(item, "module", None) is None or item.module.__name__ != __name__ \
                or "graded" not in item.fixturenames:
            continue
        if hasattr(item, "callspec") and "path" in item.callspec.params:
            wanted.add(item.callspec.params["path"])
        chapters = {m.args[0] for m in item.iter_markers("chapter")}
        wanted.update(p for p in WITH_EXERCISES if int(p.name[:2]) in chapters)
    return [p for p in WITH_EXERCISES if p in wanted]


@pytest.fixture(scope="module")
def graded(request, tmp_path_factory):
    """The grades and the log of one sandboxed run over the notebooks the tests look at."""
    folder = tmp_path_factory.mktemp("chapters") / "submissions"
    folder.mkdir()
    sources = []
    for path in notebooks_to_grade(request.session.items):
        nb = fmt.load(path)
        if path == CHAPTER_3:
            for cell in nb["cells"]:
                cell["metadata"] = {}
        (folder / path.name).write_text(json.dumps(nb))
        sources += ["--source", str(path)]
    run = subprocess.run([*GRADER, str(folder), *sources,
                          "--jobs", "2", "--with-stubs", "--seed", "20261124",
                          "--no-calibrate"],  # the instructor's notebook is what is graded
                         capture_output=True, text=True, timeout=1800)
    assert run.returncode == 0, run.stdout + run.stderr
    with (folder / "grades.csv").open() as handle:
        grades = list(csv.DictReader(handle))
    with (folder / "grading_log.csv").open() as handle:
        log = list(csv.DictReader(handle))
    return grades, log, run.stdout


@pytest.mark.parametrize("path", WITH_EXERCISES, ids=lambda p: p.name)
def test_scores_full_marks_and_its_stubs_zero(graded, path):
    all_grades, all_log, out = graded
    grades = [r for r in all_grades if r["notebook"] == path.name]
    log = [r for r in all_log if r["notebook"] == path.name]
    assert grades and all(r["points"] == r["max_points"] for r in grades), out
    exercises = {r["exercise"]: r for r in log}
    for row in log:
        if row["exercise"].endswith(" stub"):
            continue
        assert row["errors"] == "0" and row["flags"] == "" and row["problem"] == "", row
    for exercise in fmt.parse(fmt.load(path)):
        if exercise.checks:
            assert exercises[exercise.name]["status"] == "correct"
            stub = exercises[f"{exercise.name} stub"]["status"]
            assert stub == ",".join(["not done:0"] * len(exercise.checks)), (exercise.name, stub)
        else:
            assert exercises[exercise.name]["status"] == "by hand"


@pytest.mark.chapter(3)
def test_the_instructors_chapter_3_without_any_tag_gets_full_marks(graded):
    # its committed outputs: what its own checks print, and the hidden parts on top
    shown = {e: f"{float(p) + hidden:g}" for e, (p, hidden) in
             printed_points(fmt.load(CHAPTER_3)).items()}
    not_one = {e: p for e, p in shown.items() if p != "1"}
    assert shown and not not_one, (
        f"{not_one}: every checked exercise of chapter 3 is worth 1 point, its hidden parts "
        "included (CONTRIBUTING.md, 'Adding an exercise')")
    grades, _, _ = graded
    assert {r["exercise"]: r["points"] for r in grades
            if r["notebook"] == CHAPTER_3.name and r["points"] != ""} == shown


def completed_edition(nb):
    """What a student who solved everything hands in: the solutions without their markers."""
    done = copy.deepcopy(nb)
    for cell in done["cells"]:
        if cell["cell_type"] == "code":
            cell["source"] = "\n".join(line for line in fmt.source(cell).split("\n")
                                       if line.strip() not in (fmt.BEGIN, fmt.END))
    return done


@pytest.mark.parametrize("path", WITH_EXERCISES, ids=lambda p: p.name)
def test_no_flag_on_the_instructors_notebook_or_the_student_editions(path):
    from mha_grade.assignments import load_assignment
    from mha_grade.flags import flags
    from mha_grade.run import without_check_calls
    from mha_grade.submissions import read_notebook

    nb = fmt.load(path)
    assignment = load_assignment(path)
    for edition in [nb, student_edition.student_edition(nb), completed_edition(nb)]:
        read = read_notebook(json.dumps(edition).encode())
        assert flags(read, assignment) == []
        assert flags(without_check_calls(read, assignment), assignment) == []  # as run.py reads
