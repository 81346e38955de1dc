"""Submissions of the example chapter (tests/fixtures/00_example_exercises.ipynb) that an honest
or a crafty student could write, to see where the grader captures each answer.

Run: cd /work/wt/attack && .venv/bin/python /work/wt/reviews-r3/attack/make_capture_class.py CLASS
then .venv/bin/mha-grade grade CLASS --source tests/fixtures/00_example_exercises.ipynb --jobs 1
"""
import json
import sys
from pathlib import Path

sys.path[:0] = ["/work/wt/attack/tests"]
from exercise_notebooks import EXAMPLE, fmt, student_edition  # noqa: E402

out = Path(sys.argv[1])
NAME = EXAMPLE.name
RIGHT_02 = "def scaled_scores(q, k):\n    return q @ k.T / math.sqrt(q.shape[-1])"
RIGHT_03 = "def causal_mask(n):\n    return torch.ones(n, n, dtype=torch.bool).tril()"


def make(who, edit):
    nb = student_edition.student_edition(fmt.load(EXAMPLE))
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    edit(code)
    (out / who).mkdir(parents=True, exist_ok=True)
    (out / who / NAME).write_text(json.dumps(nb))


def src(cell):
    return "".join(cell["source"])


def find(code, text):
    return next(c for c in code if text in src(c))


def honest(code):
    find(code, "def scaled_scores")["source"] = RIGHT_02
    find(code, "def causal_mask")["source"] = RIGHT_03


def one_liner(code):
    # the answer and its check on one line: the notebook shows ✓ for 0.2
    honest(code)
    find(code, "def scaled_scores")["source"] = "pass"
    find(code, "checks.ch00.scaled_scores")["source"] = (
        "scaled_scores = lambda q, k: q @ k.T / math.sqrt(q.shape[-1]); "
        "mha.checks.ch00.scaled_scores(scaled_scores)")


def cell_magic(code):
    # a %%time check cell, called with the student's own function name: the notebook shows ✓
    honest(code)
    find(code, "def scaled_scores")["source"] = (
        "def my_scores(q, k):\n    return q @ k.T / math.sqrt(q.shape[-1])")
    find(code, "checks.ch00.scaled_scores")["source"] = (
        "%%time\nmha.checks.ch00.scaled_scores(my_scores)")


def alias(code):
    # the check called through an alias, with the student's own function: the notebook shows ✓
    honest(code)
    find(code, "def scaled_scores")["source"] = (
        "def my_scores(q, k):\n    return q @ k.T / math.sqrt(q.shape[-1])")
    find(code, "checks.ch00.scaled_scores")["source"] = (
        "from mha.checks import ch00\nch00.scaled_scores(my_scores)")


def printed(code):
    # the check's verdict printed: print(check(answer)) -- the notebook shows ✓
    honest(code)
    find(code, "def scaled_scores")["source"] = (
        "def my_scores(q, k):\n    return q @ k.T / math.sqrt(q.shape[-1])")
    find(code, "checks.ch00.scaled_scores")["source"] = (
        "print(mha.checks.ch00.scaled_scores(my_scores))")


for who, edit in [("honest", honest), ("one_liner", one_liner), ("cell_magic", cell_magic),
                  ("alias", alias), ("printed", printed)]:
    make(who, edit)
print("wrote", sorted(p.name for p in out.iterdir()))
