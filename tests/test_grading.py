"""`make grade`: points, partial credit, and notebooks that crash, loop, flood, vandalise or cheat.

One grading run (tools/grade.py in its own process, as `make grade` runs it) over a folder of
submissions made here from the example notebook; the expected points of each are known from
what it contains, not from the grader.
"""

import csv
import json
import os
import subprocess
import sys

import pytest
from exercise_notebooks import EXAMPLE, WITH_EXERCISES, fmt, student_edition

from conventions import ROOT

GRADER = ROOT / "tools" / "grade.py"
NAME = EXAMPLE.name

SOLVED_02 = "def scaled_scores(q, k):\n    return q @ k.T / math.sqrt(k.shape[-1])"
SOLVED_03 = "def causal_mask(n):\n    return torch.tril(torch.ones(n, n)).bool()"
WRONG_02 = "def scaled_scores(q, k):\n    return q @ k.T"  # forgot the scale
WRONG_03 = "def causal_mask(n):\n    return torch.ones(n, n).triu().bool()"  # the transpose


def student():
    return student_edition.student_edition(fmt.load(EXAMPLE))


def code(text, tags=()):
    return {"cell_type": "code", "metadata": {"tags": list(tags)}, "outputs": [],
            "execution_count": None, "source": text}


def answer(nb, function, text):
    """Put ``text`` into the student's cell that defines ``function``."""
    for cell in nb["cells"]:
        if "solution" in fmt.tags(cell) and f"def {function}(" in fmt.source(cell):
            cell["source"] = text
            return nb
    raise AssertionError(f"no cell defines {function}")


def insert_before(nb, function, cell):
    """Insert ``cell`` just before the student's cell that defines ``function``."""
    for i, c in enumerate(nb["cells"]):
        if "solution" in fmt.tags(c) and f"def {function}(" in fmt.source(c):
            nb["cells"].insert(i, cell)
            return nb
    raise AssertionError(f"no cell defines {function}")


def submissions(folder):
    """name -> (notebook or raw bytes, expected points {exercise: points})."""
    made = {}
    made["full"] = (fmt.load(EXAMPLE), {"0.2": 1, "0.3": 2})
    made["untouched"] = (student(), {"0.2": 0, "0.3": 0})
    made["partial_02"] = (answer(answer(student(), "scaled_scores", SOLVED_02),
                                 "causal_mask", WRONG_03), {"0.2": 1, "0.3": 0})
    made["partial_03"] = (answer(answer(student(), "causal_mask", SOLVED_03),
                                 "scaled_scores", WRONG_02), {"0.2": 0, "0.3": 2})
    # raises at the top, yet both exercises are right: errors do not stop the notebook
    nb = answer(answer(student(), "scaled_scores", SOLVED_02), "causal_mask", SOLVED_03)
    nb["cells"].insert(2, code("raise RuntimeError('my notebook is broken')"))
    made["raises"] = (nb, {"0.2": 1, "0.3": 2})
    # a loop that an interrupt stops: the cell is interrupted, the rest still runs
    nb = answer(answer(student(), "scaled_scores", SOLVED_02), "causal_mask", SOLVED_03)
    made["loops"] = (insert_before(nb, "causal_mask", code("while True:\n    pass")),
                     {"0.2": 1, "0.3": 2})
    # a loop that ignores interrupts: stopped at the notebook's time limit, keeps what it had
    nb = answer(answer(student(), "scaled_scores", SOLVED_02), "causal_mask", SOLVED_03)
    stubborn = ("import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\n"
                "while True:\n    time.sleep(0.05)")
    made["loops_forever"] = (insert_before(nb, "causal_mask", code(stubborn)),
                             {"0.2": 1, "0.3": 0})
    # prints 30 MB, tries to write a 100 MB file, then solves 0.2
    nb = answer(student(), "scaled_scores", SOLVED_02)
    insert_before(nb, "scaled_scores", code(
        "for _ in range(30):\n    print('x' * 1_000_000)"))
    made["prints"] = (insert_before(nb, "scaled_scores", code(
        "with open('big.bin', 'wb') as f:\n    f.write(b'0' * 100 * 2**20)")),
        {"0.2": 1, "0.3": 0})
    # exits the kernel after solving 0.2
    nb = answer(student(), "scaled_scores", SOLVED_02)
    made["crashes"] = (insert_before(nb, "causal_mask", code("import os\nos._exit(3)")),
                       {"0.2": 1, "0.3": 0})
    # deletes the other submissions, writes a fake grades.csv and a file outside its folder
    vandal = (f"import pathlib, shutil\nroot = pathlib.Path({str(folder)!r})\n"
              "for p in root.iterdir():\n"
              "    if p.name != 'vandal':\n"
              "        shutil.rmtree(p, ignore_errors=True)\n"
              "(root / 'grades.csv').write_text('notebook,exercise,points,max_points\\n')\n"
              "pathlib.Path('../escaped.txt').write_text('out')")
    nb = answer(student(), "scaled_scores", SOLVED_02)
    made["vandal"] = (insert_before(nb, "scaled_scores", code(vandal)), {"0.2": 1, "0.3": 0})
    # fakes its grade: edits the check cells, writes the report file, prints result lines
    nb = answer(student(), "causal_mask", WRONG_03.replace(
        "    return", "    print('\\n✓ Exercise 0.3 [2/2]: correct', end='')\n    return"))
    for cell in nb["cells"]:
        if "check" in fmt.tags(cell) and "scaled_scores" in fmt.source(cell):
            cell["source"] = "print('✓ Exercise 0.2 [1/1]: correct')"
    nb["cells"].append(code(
        "import json, os\npath = os.environ.get('MHA_GRADING_REPORT', 'report.jsonl')\n"
        "with open(path, 'a') as f:\n"
        "    f.write(json.dumps({'exercise': '0.2', 'points': 1, 'max_points': 1}))\n"
        "print('✓ Exercise 0.2 [1/1]: correct')"))
    made["fakes"] = (nb, {"0.2": 0, "0.3": 0})
    # looks for a secret in the grader's environment: it must not see it (then 0.2 is right)
    made["snoops"] = (answer(student(), "scaled_scores", SOLVED_02.replace(
        "    return", "    import os\n    assert 'MHA_TEST_SECRET' not in os.environ\n    return")),
        {"0.2": 1, "0.3": 0})
    made["garbage"] = (b"{ this is not a notebook", {"0.2": 0, "0.3": 0})
    return made


STRAY = "stray/notes.ipynb"  # a notebook of no chapter: reported, not graded


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    base = tmp_path_factory.mktemp("grading")
    folder = base / "submissions"
    made = submissions(folder)
    for who, (nb, _) in made.items():
        path = folder / who / NAME
        path.parent.mkdir(parents=True)
        path.write_bytes(nb if isinstance(nb, bytes) else json.dumps(nb).encode())
    (folder / STRAY).parent.mkdir()
    (folder / STRAY).write_text(json.dumps({"cells": [], "metadata": {}, "nbformat": 4,
                                            "nbformat_minor": 5}))
    run = subprocess.run(
        [sys.executable, str(GRADER), str(folder), "--source", str(EXAMPLE), "--jobs", "2",
         "--timeout", "60", "--cell-timeout", "10"],
        capture_output=True, text=True, timeout=900,
        env={**os.environ, "MHA_TEST_SECRET": "the grader's token"})
    assert run.returncode == 0, run.stdout + run.stderr
    with (folder / "grades.csv").open() as handle:
        grades = list(csv.DictReader(handle))
    with (folder / "grading_log.csv").open() as handle:
        log = list(csv.DictReader(handle))
    return {"made": made, "grades": grades, "log": log, "out": run.stdout, "base": base,
            "folder": folder}


def points(graded, who):
    return {r["exercise"]: r["points"] for r in graded["grades"]
            if r["notebook"] == f"{who}/{NAME}"}


def test_grades_csv_has_one_row_per_notebook_and_exercise(graded):
    header = (graded["folder"] / "grades.csv").read_text().splitlines()[0]
    assert header == "notebook,exercise,points,max_points"
    assert len(graded["grades"]) == 3 * len(graded["made"])
    for row in graded["grades"]:
        if row["exercise"] == "0.1":  # the derivation is graded by hand
            assert row["points"] == row["max_points"] == ""
        else:
            assert row["max_points"] == {"0.2": "1", "0.3": "2"}[row["exercise"]]


@pytest.mark.parametrize("who", ["full", "untouched", "partial_02", "partial_03"])
def test_solutions_score_full_marks_the_student_edition_zero_and_partial_work_its_part(graded,
                                                                                          who):
    expected = graded["made"][who][1]
    assert points(graded, who) == {"0.1": "", **{k: str(v) for k, v in expected.items()}}


@pytest.mark.parametrize("who", ["raises", "loops", "loops_forever", "prints", "crashes",
                                 "vandal", "fakes", "snoops", "garbage"])
def test_a_misbehaving_submission_gets_exactly_what_it_earned(graded, who):
    expected = graded["made"][who][1]
    assert points(graded, who) == {"0.1": "", **{k: str(v) for k, v in expected.items()}}


def test_a_notebook_of_no_chapter_is_reported_and_not_graded(graded):
    assert STRAY not in {r["notebook"] for r in graded["grades"]}
    row = next(r for r in graded["log"] if r["notebook"] == STRAY)
    assert row["status"] == "no chapter notebook matches its name or its exercise labels"
    assert f"{STRAY}: NOT GRADED" in graded["out"]


def test_make_grade_and_make_student_run_the_tools():
    def make(*args):
        run = subprocess.run(["make", *args], cwd=ROOT, capture_output=True, text=True,
                             timeout=60)
        return run.returncode, run.stdout

    code, out = make("grade")  # without a folder: the usage, and a failure
    assert code != 0 and "usage: make grade SUBMISSIONS=<folder>" in out
    code, out = make("-n", "grade", "SUBMISSIONS=subs", "GRADE_OPTS=--jobs 1")
    assert code == 0 and '.venv/bin/python tools/grade.py "subs" --jobs 1' in out
    code, out = make("-n", "student")
    assert code == 0 and "tools/student_edition.py --out _build/student/notebooks" in out


def test_the_untouched_edition_is_reported_as_not_done(graded):
    statuses = {r["exercise"]: r["status"] for r in graded["log"]
                if r["notebook"] == f"untouched/{NAME}"}
    assert statuses == {"0.1": "by hand", "0.2": "not done", "0.3": "not done"}


def test_wrong_answers_get_the_checks_reason(graded):
    messages = {r["exercise"]: r["message"] for r in graded["log"]
                if r["notebook"] == f"partial_02/{NAME}"}
    assert "for n=2: entry (0, 1) is True" in messages["0.3"]


def test_a_looping_notebook_is_stopped_at_its_time_limit(graded):
    row = next(r for r in graded["log"]
               if r["notebook"] == f"loops_forever/{NAME}" and r["exercise"] == "0.3")
    assert row["status"] == "stopped after the time limit of 60 s"
    assert 60 <= float(row["seconds"]) < 60 + 20


def test_output_and_file_sizes_are_capped(graded):
    row = next(r for r in graded["log"] if r["notebook"] == f"prints/{NAME}")
    assert row["errors"] == "1"  # writing the 100 MB file failed: "File too large"


def test_a_vandal_changes_no_other_grade_and_its_file_outside_stays_out_of_the_folder(graded):
    # every submission still has its rows, grades.csv is the grader's, not the vandal's
    assert {r["notebook"].split("/")[0] for r in graded["grades"]} == set(graded["made"])
    assert not (graded["folder"] / "escaped.txt").exists()


def test_cheating_code_is_flagged_for_review(graded):
    flags = {r["notebook"].split("/")[0]: r["flags"] for r in graded["log"]}
    assert "fake result line" in flags["fakes"] and "grading report" in flags["fakes"]
    assert flags["full"] == flags["untouched"] == ""
    assert "REVIEW" in graded["out"]


@pytest.mark.parametrize("path", WITH_EXERCISES, ids=lambda p: p.name)
def test_every_chapter_scores_full_marks_and_its_student_edition_zero(path, tmp_path):
    """The instructor's notebook and the untouched student edition, graded side by side."""
    folder = tmp_path / "submissions"
    (folder / "instructor").mkdir(parents=True)
    (folder / "student").mkdir()
    nb = fmt.load(path)
    (folder / "instructor" / path.name).write_text(json.dumps(nb))
    (folder / "student" / path.name).write_text(json.dumps(student_edition.student_edition(nb)))
    run = subprocess.run([sys.executable, str(GRADER), str(folder), "--source", str(path),
                          "--jobs", "2"], capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stdout + run.stderr
    with (folder / "grading_log.csv").open() as handle:
        log = list(csv.DictReader(handle))
    with (folder / "grades.csv").open() as handle:
        grades = list(csv.DictReader(handle))
    for row in grades:
        if row["max_points"]:
            expected = row["max_points"] if row["notebook"].startswith("instructor/") else "0"
            assert row["points"] == expected, row
    for row in log:
        assert row["errors"] == "0", row  # both run top to bottom without an error
        if row["notebook"].startswith("student/") and row["status"] != "by hand":
            assert row["status"] == "not done", row  # every check says "not done yet"
