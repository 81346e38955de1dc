"""Every chapter, graded once in the sandbox: full marks, and its student edition's stubs zero.

One run of `mha-grade grade` per chapter notebook, in the bubblewrap sandbox with the read-only,
non-editable copy of `mha` (no src/ on the path, no repository around it: what a student in Colab
has), so it shows at once that the chapter runs outside the repository and that its solutions
score full marks, without an error or a flag. Then, in the same process after the chapter has
run, the student edition's stub of every checked exercise (mha_grade.student_edition) is fed to
its check and must score zero ("not done"). Besides nbval's, this is the only execution of a
chapter in the tests (the student edition itself is checked statically in
test_student_edition.py).

The hidden-input seed is fixed here (``--seed``), unlike in a real grading run, so that a
failure can be reproduced.
"""

import copy
import csv
import json
import subprocess
import sys

import pytest
from exercise_notebooks import WITH_EXERCISES, fmt, student_edition

GRADER = [sys.executable, "-m", "mha_grade", "grade"]


def grade_chapter(path, tmp_path):
    """One sandboxed run of the chapter; then the student edition's stubs, in the same process."""
    folder = tmp_path / "submissions"
    folder.mkdir()
    (folder / path.name).write_bytes(path.read_bytes())
    run = subprocess.run([*GRADER, str(folder), "--source", str(path),
                          "--jobs", "1", "--with-stubs", "--seed", "20261124",
                          "--no-calibrate"],  # the instructor's notebook is what is graded
                         capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stdout + run.stderr
    out = run.stdout
    with (folder / "grades.csv").open() as handle:
        grades = list(csv.DictReader(handle))
    with (folder / "grading_log.csv").open() as handle:
        log = list(csv.DictReader(handle))
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


# One test class per chapter: the Makefile's `--dist loadscope` hands each class to whichever
# worker is free, so the chapters' runs spread over both workers (a parametrized function would
# be one scope, run on one worker).
for _path in WITH_EXERCISES:
    _name = "TestChapter" + _path.stem.split("_")[0]
    globals()[_name] = type(_name, (), {
        "path": _path,
        "test_scores_full_marks_and_its_stubs_zero":
            lambda self, tmp_path: grade_chapter(self.path, tmp_path),
    })


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
