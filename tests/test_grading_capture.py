"""The grade follows what the notebook does, not where its cells sit.

The grader captures an answer where the submission calls its check (the cell that calls
``mha.checks...``, found by that call, whatever its tags or place), or at the end of the run if
the submission no longer calls it. So a notebook that passes its own checks top to bottom gets
the same points from the grader. The reference here is the notebook's own checks: each variant
is run in a plain Jupyter kernel (nbclient; these notebooks are ours, not untrusted) and the
points its check cells print (``✓ Exercise 0.2 [1/1]: ...``) are read from its outputs; for the
instructor's chapter 3 they are its committed outputs (which nbval reproduces).
"""

import copy
import csv
import json
import re
import subprocess
import sys

import nbformat
import pytest
from exercise_notebooks import EXAMPLE, fmt, student_edition
from nbclient import NotebookClient

from mha_grade import sandbox

from conventions import ROOT

GRADER = [sys.executable, "-m", "mha_grade", "grade"]
CHAPTER_3 = ROOT / "notebooks" / "03_attention_with_weights.ipynb"
VERDICT = re.compile(r"[✓✗] Exercise (\d+\.\d+) \[(\d+)/(\d+)\]")
pytestmark = pytest.mark.skipif(sandbox.unavailable() is not None,
                                reason=str(sandbox.unavailable()))

SOLVED_02 = "def scaled_scores(q, k):\n    return q @ k.T / math.sqrt(k.shape[-1])"
SOLVED_03 = "def causal_mask(n):\n    return torch.tril(torch.ones(n, n)).bool()"


def code(text):
    return {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None,
            "source": text}


def position(nb, needle, tag=None):
    for i, cell in enumerate(nb["cells"]):
        if (cell["cell_type"] == "code" and needle in fmt.source(cell)
                and (tag is None or tag in fmt.tags(cell))):
            return i
    raise AssertionError(f"no cell with {needle!r}")


def student():
    return student_edition.student_edition(fmt.load(EXAMPLE))


def solved():
    nb = student()
    nb["cells"][position(nb, "def scaled_scores(", "solution")]["source"] = SOLVED_02
    nb["cells"][position(nb, "def causal_mask(", "solution")]["source"] = SOLVED_03
    return nb


def only(function):
    """The student edition with the other exercise's answer in its own cell."""
    nb = student()
    other, text = (("causal_mask", SOLVED_03) if function == "scaled_scores"
                   else ("scaled_scores", SOLVED_02))
    nb["cells"][position(nb, f"def {other}(", "solution")]["source"] = text
    return nb


def variants():
    """name -> notebook: correct answers written elsewhere than the student edition's cells."""
    made = {}
    # the stub left as it is, the answer in a new cell below it (above the check)
    nb = only("scaled_scores")
    nb["cells"].insert(position(nb, "def scaled_scores(", "solution") + 1, code(SOLVED_02))
    made["answer_below_the_stub"] = nb
    # the solution calls a helper defined in a cell below it (above the check)
    nb = only("causal_mask")
    nb["cells"][position(nb, "def causal_mask(", "solution")]["source"] = (
        "def causal_mask(n):\n    return lower_triangle(n)")
    nb["cells"].insert(position(nb, "mha.checks.ch00.causal_mask", "check"), code(
        "def lower_triangle(n):\n    return torch.tril(torch.ones(n, n)).bool()"))
    made["helper_below_the_solution"] = nb
    # every tag removed: the check cells are found by the calls they make
    nb = solved()
    for cell in nb["cells"]:
        cell["metadata"] = {}
    made["no_tags"] = nb
    # the check cells moved to the end, after the answers were redefined wrongly: the check
    # sees what the notebook holds where it is called
    nb = solved()
    checks = [c for c in nb["cells"] if "check" in fmt.tags(c)]
    nb["cells"] = [c for c in nb["cells"] if "check" not in fmt.tags(c)]
    nb["cells"].append(code("def causal_mask(n):\n    return torch.ones(n, n).bool()"))
    nb["cells"].extend(checks)
    made["checks_at_the_end"] = nb
    # the answer in the check cell itself, above the call
    nb = only("scaled_scores")
    at = position(nb, "mha.checks.ch00.scaled_scores", "check")
    nb["cells"][at]["source"] = SOLVED_02 + "\n\n" + fmt.source(nb["cells"][at])
    made["answer_in_the_check_cell"] = nb
    return made


def own_points(nb: dict) -> dict[str, str]:
    """The points the notebook's own check cells print, run top to bottom in a kernel."""
    nb = copy.deepcopy(nb)
    for cell in nb["cells"]:
        cell["source"] = fmt.source(cell)
    notebook = nbformat.from_dict(nb)
    NotebookClient(notebook, timeout=120, kernel_name="python3",
                   allow_errors=True).execute()
    return printed_points(notebook)


def printed_points(nb) -> dict[str, str]:
    points = {}
    for cell in nb["cells"]:
        for output in cell.get("outputs", []):
            text = output.get("text", "")
            for m in VERDICT.finditer("".join(text) if isinstance(text, list) else text):
                points[m.group(1)] = m.group(2)
    return points


def grade(folder, source):
    run = subprocess.run([*GRADER, str(folder), "--source", str(source), "--jobs", "2"],
                         capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stdout + run.stderr
    with (folder / "grades.csv").open() as handle:
        return [r for r in csv.DictReader(handle) if r["points"] != ""]


@pytest.fixture(scope="module")
def example(tmp_path_factory):
    folder = tmp_path_factory.mktemp("capture") / "submissions"
    made = variants()
    nb = solved()  # the check cell deleted: captured at the end of the run
    del nb["cells"][position(nb, "mha.checks.ch00.causal_mask", "check")]
    made["check_deleted"] = nb
    for who, nb in made.items():
        (folder / who).mkdir(parents=True)
        (folder / who / EXAMPLE.name).write_text(json.dumps(nb))
    rows = grade(folder, EXAMPLE)
    graded = {}
    for row in rows:
        graded.setdefault(row["notebook"].split("/")[0], {})[row["exercise"]] = row["points"]
    return made, graded


@pytest.mark.parametrize("who", list(variants()))
def test_the_grade_is_what_the_notebooks_own_checks_show(example, who):
    made, graded = example
    shown = own_points(made[who])
    assert set(shown) == {"0.2", "0.3"}
    assert graded[who] == shown


def test_the_variants_are_right_where_their_checks_run(example):
    """The variants are correct answers (so they must score full marks), except the one whose
    answer is redefined wrongly before its check runs."""
    _, graded = example
    for who in variants():
        expected = {"0.2": "1", "0.3": "0" if who == "checks_at_the_end" else "2"}
        assert graded[who] == expected, who


def test_a_deleted_check_is_graded_on_the_answer_at_the_end(example):
    """No check cell, so no ✓ in the notebook: the grader still grades the answer, as the
    notebook defines it at its end (book/instructors.md says so)."""
    _, graded = example
    assert graded["check_deleted"] == {"0.2": "1", "0.3": "2"}


def test_the_instructors_chapter_3_without_any_tag_gets_full_marks(tmp_path):
    nb = fmt.load(CHAPTER_3)
    shown = printed_points(nb)  # its committed outputs: what its own checks print
    assert shown and all(p == "1" for p in shown.values())
    for cell in nb["cells"]:
        cell["metadata"] = {}
    folder = tmp_path / "submissions"
    folder.mkdir()
    (folder / CHAPTER_3.name).write_text(json.dumps(nb))
    rows = grade(folder, CHAPTER_3)
    assert {r["exercise"]: r["points"] for r in rows} == shown
