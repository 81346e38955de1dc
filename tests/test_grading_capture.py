"""The grade follows what the notebook does, not where its cells sit.

The grader captures an answer at the moment the submission calls its check, in whatever syntax
(the sandbox's ``mha.checks`` functions capture their argument when called; the last call
counts), or at the end of the run if the submission never calls it. So a notebook that passes
its own checks top to bottom gets the same points from the grader. The reference here is the
notebook's own checks: each variant is run in a plain Jupyter kernel (nbclient; these notebooks
are ours, not untrusted) and the points its check cells print (``✓ Exercise 0.2 [1/1]: ...``)
are read from its outputs. (The instructor's chapter 3 without any tag is graded with the other
chapters, in test_grading_chapters.py.)"""

import copy
import csv
import json
import subprocess
import sys

import nbformat
import pytest
from exercise_notebooks import EXAMPLE, fmt, printed_points, student_edition
from nbclient import NotebookClient

from mha_grade import sandbox

GRADER = [sys.executable, "-m", "mha_grade", "grade"]
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
    # the check called in other syntax than a bare statement (the outside attack's finding 4)
    mine = "def my_scores(q, k):\n    return q @ k.T / math.sqrt(q.shape[-1])"
    for who, call in [
            ("one_liner", "scaled_scores = lambda q, k: q @ k.T / math.sqrt(q.shape[-1]); "
                          "mha.checks.ch00.scaled_scores(scaled_scores)"),
            ("time_magic", "%%time\nmha.checks.ch00.scaled_scores(my_scores)"),
            ("alias", "from mha.checks import ch00\nch00.scaled_scores(my_scores)"),
            ("printed", "print(mha.checks.ch00.scaled_scores(my_scores))")]:
        nb = only("scaled_scores")
        if who != "one_liner":
            nb["cells"][position(nb, "def scaled_scores(", "solution")]["source"] = mine
        nb["cells"][position(nb, "mha.checks.ch00.scaled_scores", "check")]["source"] = call
        made[who] = nb
    # the same check twice in a cell, or code after it in its cell (finding 5): the answer is
    # taken at the call, and the last call counts
    wrong = "def scaled_scores(q, k):\n    return q @ k.T"
    for who, answer, call in [
            ("called_twice", SOLVED_02, "mha.checks.ch00.scaled_scores(lambda q, k: q @ k.T)\n"
                                        "mha.checks.ch00.scaled_scores(scaled_scores)"),
            ("name_reused_after", SOLVED_02, "mha.checks.ch00.scaled_scores(scaled_scores)\n"
                                             "scaled_scores = 'checked, see above'"),
            ("fixed_after_its_call", wrong,
             "mha.checks.ch00.scaled_scores(scaled_scores)\n"
             "scaled_scores = lambda q, k: q @ k.T / math.sqrt(q.shape[-1])")]:
        nb = only("scaled_scores")
        nb["cells"][position(nb, "def scaled_scores(", "solution")]["source"] = answer
        nb["cells"][position(nb, "mha.checks.ch00.scaled_scores", "check")]["source"] = call
        made[who] = nb
    return made


# what each variant must score: full marks, but where the answer is wrong where its check runs
WRONG_WHERE_CHECKED = {"checks_at_the_end": {"0.3": "0"}, "fixed_after_its_call": {"0.2": "0"}}
# the plan the grader's sandbox reads: the capture key of each graded check is in it
FORGE = """import json, os, sys
key = json.load(open(sys.argv[1]))["checks"]["ch00.scaled_scores"]
for fd in range(3, 64):
    for line in [{"ready": key, "types": ["builtins.function"], "status": "correct",
                  "points": 1}, {"value": {"tensor": []}}, {"finished": False},
                 {"ready": key, "status": "correct", "points": 1, "max_points": 1}]:
        try:
            os.write(fd, json.dumps(line).encode() + b"\\n")
        except OSError:
            pass
"""


def tampered():
    """name -> notebook: code that goes around the capturing check, with a wrong answer."""
    made = {}
    # the check replaced by the student's own: no capture where it is called, so the answer is
    # taken at the end of the run from the name the instructor's check cell passes
    nb = solved()
    nb["cells"][position(nb, "mha.checks.ch00.scaled_scores", "check")]["source"] = (
        "mha.checks.ch00.scaled_scores = lambda answer: print('✓ Exercise 0.2 [1/1]: correct')\n"
        "mha.checks.ch00.scaled_scores(lambda q, k: q @ k.T)")
    made["replaced_check"] = nb
    nb = copy.deepcopy(nb)
    nb["cells"][position(nb, "def scaled_scores(", "solution")]["source"] = (
        "def scaled_scores(q, k):\n    return q @ k.T")
    made["replaced_check_wrong_at_the_end"] = nb
    # messages forged on the grader's channel around an honest call of a wrong answer
    nb = only("scaled_scores")
    nb["cells"][position(nb, "def scaled_scores(", "solution")]["source"] = (
        "def scaled_scores(q, k):\n    return q @ k.T")
    at = position(nb, "mha.checks.ch00.scaled_scores", "check")
    nb["cells"][at]["source"] = FORGE + "\n" + fmt.source(nb["cells"][at]) + "\n" + FORGE
    made["forged_messages"] = nb
    # the answer raises what is no Exception (KeyboardInterrupt) when the grader calls it: an
    # error for that answer, and the notebook goes on (outside attack, round 4, "base_exc")
    nb = only("scaled_scores")
    nb["cells"][position(nb, "def scaled_scores(", "solution")]["source"] = (
        "def scaled_scores(q, k):\n    raise KeyboardInterrupt")
    made["answer_raises_keyboard_interrupt"] = nb
    # the answer calls its own check while the grader calls it: the inner call captures
    # nothing, the outer one is graded (round 4, "recurse")
    nb = only("scaled_scores")
    nb["cells"][position(nb, "def scaled_scores(", "solution")]["source"] = (
        "def scaled_scores(q, k):\n    mha.checks.ch00.scaled_scores(scaled_scores)\n"
        "    return q @ k.T / math.sqrt(k.shape[-1])")
    made["answer_calls_its_own_check"] = nb
    # a thread calls the check with a wrong answer after the honest call: it is the last call,
    # so it counts (round 4, "thread")
    nb = solved()
    nb["cells"].append(code("import threading\nworker = threading.Thread(target=lambda: "
                            "mha.checks.ch00.scaled_scores(lambda q, k: q @ k.T))\n"
                            "worker.start()\nworker.join()"))
    made["wrong_call_from_a_thread_last"] = nb
    return made


def own_points(nb: dict) -> dict[str, tuple[str, float]]:
    """The points the notebook's own check cells print, run top to bottom in a kernel."""
    nb = copy.deepcopy(nb)
    for cell in nb["cells"]:
        cell["source"] = fmt.source(cell)
    notebook = nbformat.from_dict(nb)
    NotebookClient(notebook, timeout=120, kernel_name="python3",
                   allow_errors=True).execute()
    return printed_points(notebook)


def grade(folder, source, flags=None):
    # no calibration (test_grading_limits.py tests it): it grades the instructor's notebook once
    # more before the submissions
    run = subprocess.run([*GRADER, str(folder), "--source", str(source), "--jobs", "2",
                          "--no-calibrate"], capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stdout + run.stderr
    if flags is not None:  # notebook folder -> its flags, from the grading log
        with (folder / "grading_log.csv").open() as handle:
            flags.update({r["notebook"].split("/")[0]: r["flags"]
                          for r in csv.DictReader(handle)})
    with (folder / "grades.csv").open() as handle:
        return [r for r in csv.DictReader(handle) if r["points"] != ""]


@pytest.fixture(scope="module")
def example(tmp_path_factory):
    folder = tmp_path_factory.mktemp("capture") / "submissions"
    made = variants() | tampered()
    nb = solved()  # the check cell deleted: captured at the end of the run
    del nb["cells"][position(nb, "mha.checks.ch00.causal_mask", "check")]
    made["check_deleted"] = nb
    for who, nb in made.items():
        (folder / who).mkdir(parents=True)
        (folder / who / EXAMPLE.name).write_text(json.dumps(nb))
    flags = {}
    rows = grade(folder, EXAMPLE, flags)
    graded = {}
    for row in rows:
        graded.setdefault(row["notebook"].split("/")[0], {})[row["exercise"]] = row["points"]
    return made, graded, flags


@pytest.mark.parametrize("who", list(variants()))
def test_the_grade_is_what_the_notebooks_own_checks_show(example, who):
    made, graded, _ = example
    shown = own_points(made[who])
    assert set(shown) == {"0.2", "0.3"}
    # the points shown, and at most the hidden parts' on top (exact values: the next test)
    for exercise, (points, hidden) in shown.items():
        assert float(points) <= float(graded[who][exercise]) <= float(points) + hidden, exercise


def test_the_variants_are_right_where_their_checks_run(example):
    """The variants are correct answers (so they must score full marks), except the one whose
    answer is redefined wrongly before its check runs."""
    _, graded, _ = example
    for who in variants():
        expected = {"0.2": "1", "0.3": "2"} | WRONG_WHERE_CHECKED.get(who, {})
        assert graded[who] == expected, who


def test_an_honest_call_in_any_syntax_is_not_flagged(example):
    """Calling the check is what the notebook asks for: in a %%time cell, through an alias or
    inside print(...) it is no sign of patching the grading."""
    _, _, flags = example
    for who in variants():
        assert "patches the grading" not in flags[who], (who, flags[who])


def test_a_replaced_check_captures_nothing_and_the_end_of_the_run_counts(example):
    """Student code that replaces the capturing check (and prints its own ✓) is flagged, and
    the answer is graded as the notebook defines it at its end: right there, full marks; wrong
    there, nothing, whatever the replacement printed."""
    made, graded, flags = example
    assert own_points(made["replaced_check_wrong_at_the_end"])["0.2"] == ("1", 0)  # fake ✓
    assert graded["replaced_check"] == {"0.2": "1", "0.3": "2"}
    assert graded["replaced_check_wrong_at_the_end"] == {"0.2": "0", "0.3": "2"}
    for who in ("replaced_check", "replaced_check_wrong_at_the_end"):
        assert "patches the grading" in flags[who]


def test_messages_forged_on_the_grader_channel_earn_nothing(example):
    """The channel is the sandbox's own stdout, which student code can write to: a forged
    ``ready`` with a verdict in it, a forged reply or ``finished`` gets a wrong answer no
    point (the grader computes verdicts from the values the answer returns)."""
    _, graded, _ = example
    assert graded["forged_messages"]["0.2"] == "0"
    assert int(graded["forged_messages"]["0.3"]) <= 2


def test_a_deleted_check_is_graded_on_the_answer_at_the_end(example):
    """No check cell, so no ✓ in the notebook: the grader still grades the answer, as the
    notebook defines it at its end (book/instructors.md says so)."""
    _, graded, _ = example
    assert graded["check_deleted"] == {"0.2": "1", "0.3": "2"}


def test_an_answer_that_raises_keyboard_interrupt_or_calls_its_own_check_is_graded_alone(
        example):
    """What the grader's call of an answer does stays in that call: a KeyboardInterrupt is the
    answer's error (0.2 scores nothing, 0.3 is still graded), and the answer calling its own
    check while the grader calls it captures nothing more (full marks, no hang)."""
    _, graded, _ = example
    assert graded["answer_raises_keyboard_interrupt"] == {"0.2": "0", "0.3": "2"}
    assert graded["answer_calls_its_own_check"] == {"0.2": "1", "0.3": "2"}


def test_a_check_called_last_from_a_thread_counts_as_the_last_call(example):
    """The last call of a check counts, from whichever thread it comes: a wrong answer passed
    after the right one scores nothing, and the thread is flagged."""
    _, graded, flags = example
    assert graded["wrong_call_from_a_thread_last"] == {"0.2": "0", "0.3": "2"}
    assert "threads" in flags["wrong_call_from_a_thread_last"]


LEAK = '''SEEN = []


def causal_mask(n):
    SEEN.append(int(n))
    return torch.tril(torch.ones(n, n)).bool()'''


def test_the_hidden_parts_inputs_reach_no_shown_message_or_error(tmp_path):
    """The hidden parts run after the notebook's last cell (run_notebook): a last cell that
    raises with every input its answer received, or a later check whose answer raises with
    them, shows the visible cases' inputs only (sizes 2 to 11); the hidden part's (1, and 12 to
    19) stay out of the first error and of every message a student sees before the due date."""
    import re

    nb = solved()
    nb["cells"][position(nb, "def causal_mask(", "solution")]["source"] = LEAK
    nb["cells"].append(code("def leak(q, k):\n    raise ValueError('SEEN=' + repr(SEEN))\n\n"
                            "mha.checks.ch00.scaled_scores(leak)"))
    nb["cells"].append(code("raise ValueError('SEEN=' + repr(SEEN))"))
    folder = tmp_path / "submissions"
    (folder / "leaky").mkdir(parents=True)
    (folder / "leaky" / EXAMPLE.name).write_text(json.dumps(nb))
    rows = {r["exercise"]: r for r in grade(folder, EXAMPLE)}
    assert rows["0.3"]["points"] == "2"  # the hidden part ran, after the last cell
    with (folder / "grading_log.csv").open() as handle:
        log = {r["exercise"]: r for r in csv.DictReader(handle)}
    assert "one token (n = 1)" in log["0.3"]["parts"]  # the hidden part is in the log
    shown = [log["0.3"]["first_error"], log["0.2"]["message"]]
    leaks = [[int(n) for n in re.findall(r"\d+", found)]
             for text in shown for found in re.findall(r"SEEN=\[([\d, ]*)\]", text)]
    assert len(leaks) == 2, shown  # the first error and 0.2's message both say what was seen
    assert all(len(seen) == 3 and all(2 <= n < 12 for n in seen) for seen in leaks), leaks
