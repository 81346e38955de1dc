"""`make grade`: points, partial credit, notebooks that crash, loop or flood, and every chapter.

One grading run (`mha-grade grade` in its own process, as `make grade` runs it) over a folder of
submissions made here from the example notebook, whose expected points are known from what each
contains, not from the grader. Attacks are in test_grading_attacks.py, the chapters in
test_grading_chapters.py.
"""

import csv
import json
import subprocess
import sys

import pytest
from exercise_notebooks import EXAMPLE, fmt, student_edition

from conventions import ROOT

GRADER = [sys.executable, "-m", "mha_grade", "grade"]  # as the console command `mha-grade`
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


def solved():
    return answer(answer(student(), "scaled_scores", SOLVED_02), "causal_mask", SOLVED_03)


def grade(folder, *options, env=None, timeout=600):
    run = subprocess.run([*GRADER, str(folder), *options],
                         capture_output=True, text=True, timeout=timeout, env=env)
    assert run.returncode == 0, run.stdout + run.stderr
    with (folder / "grades.csv").open() as handle:
        grades = list(csv.DictReader(handle))
    with (folder / "grading_log.csv").open() as handle:
        log = list(csv.DictReader(handle))
    return grades, log, run.stdout


def submissions():
    """name -> (notebook or raw bytes, expected points {exercise: points})."""
    made = {}
    made["full"] = (fmt.load(EXAMPLE), {"0.2": 1, "0.3": 2})
    made["untouched"] = (student(), {"0.2": 0, "0.3": 0})
    made["partial_02"] = (answer(answer(student(), "scaled_scores", SOLVED_02),
                                 "causal_mask", WRONG_03), {"0.2": 1, "0.3": 0})
    made["partial_03"] = (answer(answer(student(), "causal_mask", SOLVED_03),
                                 "scaled_scores", WRONG_02), {"0.2": 0, "0.3": 2})
    # raises at the top, yet both exercises are right: errors do not stop the notebook
    nb = solved()
    nb["cells"].insert(2, code("raise RuntimeError('my notebook is broken')"))
    made["raises"] = (nb, {"0.2": 1, "0.3": 2})
    # a loop that the cell's time limit stops: the rest still runs
    made["loops"] = (insert_before(solved(), "causal_mask", code("while True:\n    pass")),
                     {"0.2": 1, "0.3": 2})
    # a loop that ignores the cell's limit: stopped at the notebook's limit, keeps what it had
    stubborn = ("import signal, time\nsignal.signal(signal.SIGALRM, signal.SIG_IGN)\n"
                "signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
                "while True:\n    time.sleep(0.05)")
    made["loops_forever"] = (insert_before(solved(), "causal_mask", code(stubborn)),
                             {"0.2": 1, "0.3": 0})
    # prints 30 MB, tries to write a 100 MB file, then solves 0.2
    nb = answer(student(), "scaled_scores", SOLVED_02)
    insert_before(nb, "scaled_scores", code("for _ in range(30):\n    print('x' * 1_000_000)"))
    made["prints"] = (insert_before(nb, "scaled_scores", code(
        "with open('big.bin', 'wb') as f:\n    f.write(b'0' * 100 * 2**20)")),
        {"0.2": 1, "0.3": 0})
    # exits after solving 0.2
    made["crashes"] = (insert_before(answer(student(), "scaled_scores", SOLVED_02),
                                     "causal_mask", code("import os\nos._exit(3)")),
                       {"0.2": 1, "0.3": 0})
    # its answer comes after its check: the notebook's own check says "not done", and so does
    # the grader (tests/test_grading_capture.py: answers elsewhere but above the check count)
    nb = student()
    nb["cells"].append(code(SOLVED_03))
    made["answer_at_the_end"] = (nb, {"0.2": 0, "0.3": 0})
    # the check is called on the answer as it is where the check stands, not redefined later
    nb = answer(student(), "causal_mask", SOLVED_03)
    nb["cells"].append(code(WRONG_03))
    made["redefined_later"] = (nb, {"0.2": 0, "0.3": 2})
    made["garbage"] = (b"{ this is not a notebook", {"0.2": 0, "0.3": 0})
    # its first cell asks for input (no one answers under grading), then all is right
    nb = solved()
    nb["cells"].insert(0, code("name = input('your name? ')"))
    made["asks_input"] = (nb, {"0.2": 1, "0.3": 2})
    # a progress bar before the answers: its monitor thread must not count as the answer's
    made["progress_bar"] = (insert_before(solved(), "scaled_scores", code(
        "from tqdm import tqdm\nfor _ in tqdm(range(3)):\n    pass")), {"0.2": 1, "0.3": 2})
    # a SyntaxError in the student's own answer cell (instructor's term, M2)
    made["syntax_error"] = (answer(solved(), "scaled_scores", SOLVED_02.replace(":", "", 1)),
                            {"0.2": 0, "0.3": 2})
    # handed out before exercise 0.3 was added to the chapter: its prompt is not there at all
    nb = answer(student(), "scaled_scores", SOLVED_02)
    nb["cells"] = nb["cells"][:next(i for i, c in enumerate(nb["cells"])
                                    if ":label: ex-00-3" in fmt.source(c))]
    made["before_0_3_existed"] = (nb, {"0.2": 1, "0.3": 0})
    return made


STRAY = "stray/notes.ipynb"  # a notebook of no chapter: reported, not graded


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    folder = tmp_path_factory.mktemp("grading") / "submissions"
    made = submissions()
    for who, (nb, _) in made.items():
        path = folder / who / NAME
        path.parent.mkdir(parents=True)
        path.write_bytes(nb if isinstance(nb, bytes) else json.dumps(nb).encode())
    (folder / STRAY).parent.mkdir()
    (folder / STRAY).write_text(json.dumps({"cells": [], "metadata": {}, "nbformat": 4,
                                            "nbformat_minor": 5}))
    grades, log, out = grade(folder, "--source", str(EXAMPLE), "--jobs", "2", "--timeout", "15",
                             "--no-calibrate",
                             "--cell-timeout", "5", "--memory-gb", "1.5", "--disk-mb", "256")
    return {"made": made, "grades": grades, "log": log, "out": out, "folder": folder}


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
    assert not list(graded["folder"].glob("*.part"))  # replaced by the final files


@pytest.mark.parametrize("who", ["full", "untouched", "partial_02", "partial_03",
                                 "answer_at_the_end", "redefined_later"])
def test_solutions_score_full_marks_the_student_edition_zero_and_partial_work_its_part(graded,
                                                                                          who):
    expected = graded["made"][who][1]
    assert points(graded, who) == {"0.1": "", **{k: str(v) for k, v in expected.items()}}


@pytest.mark.parametrize("who", ["raises", "loops", "loops_forever", "prints", "crashes",
                                 "garbage", "asks_input"])
def test_a_misbehaving_submission_gets_exactly_what_it_earned(graded, who):
    expected = graded["made"][who][1]
    assert points(graded, who) == {"0.1": "", **{k: str(v) for k, v in expected.items()}}


def nth(n):
    return {1: "1st", 2: "2nd", 3: "3rd"}.get(n, f"{n}th")


def test_the_log_says_which_cell_raised_first_and_what(graded):
    """``first_error``: the first cell that raised, counted as the student sees it (code cells
    from 1), with how it starts, the exception's type and its message."""
    nb = graded["made"]["raises"][0]
    code_cells = [c for c in nb["cells"] if c["cell_type"] == "code"]
    n = next(i for i, c in enumerate(code_cells, 1) if "my notebook is broken" in c["source"])
    rows = {r["first_error"] for r in graded["log"] if r["notebook"] == f"raises/{NAME}"}
    assert rows == {f"the {nth(n)} code cell (raise RuntimeError('my notebook is broken')): "
                    "RuntimeError: my notebook is broken"}
    # input() has no one to answer it: EOFError, in the 1st code cell, and the rest is graded
    rows = {r["first_error"] for r in graded["log"] if r["notebook"] == f"asks_input/{NAME}"}
    assert rows == {"the 1st code cell (name = input('your name? ')): "
                    "EOFError: EOF when reading a line"}
    rows = {r["first_error"] for r in graded["log"] if r["notebook"] == f"full/{NAME}"}
    assert rows == {""}


def test_an_honest_answer_after_a_progress_bar_raises_no_flag(graded):
    """Outside attack, round 5: tqdm's monitor thread outlives its bar, and the watch on the
    answer took it for work done beside the answer (ESCAPED: flagged, and wrong where a check
    forbids ops). Under grading tqdm runs without that thread."""
    rows = [r for r in graded["log"] if r["notebook"] == f"progress_bar/{NAME}"]
    assert rows and all(r["flags"] == "" for r in rows), rows


def test_an_exercise_whose_prompt_is_not_in_the_notebook_is_said_to_be_missing(graded):
    """Instructor 46: an exercise added to the chapter after a notebook was handed out got
    "the answer is not defined" there, as if the student had left it out."""
    row = next(r for r in graded["log"] if r["notebook"] == f"before_0_3_existed/{NAME}"
               and r["exercise"] == "0.3")
    assert row["message"].startswith("exercise 0.3 is not in this notebook (no prompt of it)")
    assert points(graded, "before_0_3_existed") == {"0.1": "", "0.2": "1", "0.3": "0"}


def test_an_answer_cell_that_does_not_compile_is_named_in_the_checks_message(graded):
    """M2: the check's cell ran, so "its check is never called" was wrong; the message says the
    answer was never received and points to the SyntaxError that left it undefined."""
    row = next(r for r in graded["log"] if r["notebook"] == f"syntax_error/{NAME}"
               and r["exercise"] == "0.2")
    assert row["message"].startswith("the answer is not defined: its check never received it")
    assert "never called" not in row["message"]
    assert "(def scaled_scores(q, k)): SyntaxError: expected ':'" in row["message"]
    assert "SyntaxError: expected ':'" in row["first_error"]


def test_a_notebook_of_no_chapter_is_reported_and_not_graded(graded):
    assert STRAY not in {r["notebook"] for r in graded["grades"]}
    row = next(r for r in graded["log"] if r["notebook"] == STRAY)
    assert row["problem"] == "no chapter notebook matches its name or its exercise labels"
    assert f"{STRAY}: NOT GRADED" in graded["out"]


def test_make_grade_and_make_student_run_the_tools():
    def make(*args):
        # -o: the environment counts as made (a checkout whose stamps are older than the lock
        # would otherwise rebuild .venv from inside this test, and be cut off at the timeout)
        run = subprocess.run(["make", "-o", ".venv/.locked", "-o", ".venv/.installed", *args],
                             cwd=ROOT, capture_output=True, text=True, timeout=60)
        return run.returncode, run.stdout

    code_, out = make("grade")  # without a folder: the usage, and a failure
    assert code_ != 0 and "usage: make grade SUBMISSIONS=<folder>" in out
    code_, out = make("-n", "grade", "SUBMISSIONS=subs", "GRADE_OPTS=--jobs 1")
    assert code_ == 0 and '.venv/bin/mha-grade grade "subs" --jobs 1' in out
    code_, out = make("-n", "student")
    assert code_ == 0 and "tools/student_jupyter_edition.py --out _build/student/notebooks" in out


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
    assert row["problem"].startswith("stopped after the time limit of 15 s")
    assert 15 <= float(row["seconds"]) < 15 + 15


def test_output_and_file_sizes_are_capped(graded):
    row = next(r for r in graded["log"] if r["notebook"] == f"prints/{NAME}")
    assert row["errors"] == "1"  # writing the 100 MB file failed: "File too large"


def test_honest_notebooks_raise_no_flag(graded):
    flags = {r["notebook"].split("/")[0]: r["flags"] for r in graded["log"]}
    for who in ["full", "untouched", "partial_02", "partial_03", "raises", "loops"]:
        assert flags[who] == "", who


def test_without_a_sandbox_the_grader_refuses_unless_told(tmp_path, monkeypatch):
    from mha_grade import grade as grader
    from mha_grade import sandbox

    monkeypatch.setattr(sandbox, "unavailable", lambda user=None: "this is Darwin")
    (tmp_path / "subs").mkdir()
    assert grader.main([str(tmp_path / "subs")]) == 2
    assert not (tmp_path / "subs" / "grades.csv").exists()


def test_an_interrupted_run_is_resumed_without_grading_again(tmp_path):
    folder = tmp_path / "submissions"
    for who in ["done", "todo"]:
        (folder / who).mkdir(parents=True)
        (folder / who / NAME).write_text(json.dumps(fmt.load(EXAMPLE)))
    # what a run killed after its first notebook leaves: .part files, "done" in both
    (folder / "grades.csv.part").write_text(
        "notebook,exercise,points,max_points\n"
        f"done/{NAME},0.1,,\ndone/{NAME},0.2,0,1\ndone/{NAME},0.3,0,2\n"
        f"todo/{NAME},0.1,,\n")  # todo's grades without its log rows: not done
    (folder / "grading_log.csv.part").write_text(
        "notebook,exercise,status,message,seconds,errors,flags,problem\n"
        + "".join(f"done/{NAME},{e},kept,,1.0,0,,\n" for e in ["0.1", "0.2", "0.3"]))
    grades, log, out = grade(folder, "--source", str(EXAMPLE), "--resume", "--timeout", "60")
    assert "resuming: 1 notebook(s) already graded" in out
    assert points({"grades": grades}, "done") == {"0.1": "", "0.2": "0", "0.3": "0"}
    assert points({"grades": grades}, "todo") == {"0.1": "", "0.2": "1", "0.3": "2"}
    assert len(grades) == 6 and {r["status"] for r in log if "done/" in r["notebook"]} == {"kept"}
