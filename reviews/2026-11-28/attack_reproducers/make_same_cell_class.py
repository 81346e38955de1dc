"""Where in a cell the answer is captured: the grader runs the whole cell (check calls taken
out) and only then captures every call of that cell, in order, keeping the first. So:
- twice: check(wrong) then check(right) in one cell: the notebook's last verdict is ✓, graded 0
  (the first call of the last cell counts, not "its last call");
- reused: check(answer) then the name reused below it in the cell: notebook ✓, graded 0;
- fixed_after: check(wrong answer), then the right one assigned below it in the cell:
  notebook ✗, graded 1 (the grade does not follow what the notebook showed).

Run: cd /work/wt/attack && .venv/bin/python /work/wt/reviews-r3/attack/make_same_cell_class.py CLASS
     .venv/bin/mha-grade grade CLASS --source tests/fixtures/00_example_exercises.ipynb --jobs 1 --no-calibrate
"""
import json
import sys
from pathlib import Path

sys.path[:0] = ["/work/wt/attack/tests"]
from exercise_notebooks import EXAMPLE, fmt, student_edition  # noqa: E402

RIGHT = "def scaled_scores(q, k):\n    return q @ k.T / math.sqrt(q.shape[-1])"
WRONG = "def scaled_scores(q, k):\n    return q @ k.T"
CHECK = {
    "twice": (RIGHT, "mha.checks.ch00.scaled_scores(lambda q, k: q @ k.T)\n"
                     "mha.checks.ch00.scaled_scores(scaled_scores)"),
    "reused": (RIGHT, "mha.checks.ch00.scaled_scores(scaled_scores)\n"
                      "scaled_scores = 'checked, see above'"),
    "fixed_after": (WRONG, "mha.checks.ch00.scaled_scores(scaled_scores)\n"
                           "scaled_scores = lambda q, k: q @ k.T / math.sqrt(q.shape[-1])"),
}
out = Path(sys.argv[1])
for who, (answer, check) in CHECK.items():
    nb = student_edition.student_edition(fmt.load(EXAMPLE))
    for c in nb["cells"]:
        text = "".join(c["source"]) if isinstance(c["source"], list) else c["source"]
        if c["cell_type"] == "code" and "def scaled_scores" in text:
            c["source"] = answer
        elif c["cell_type"] == "code" and "checks.ch00.scaled_scores" in text:
            c["source"] = check
    (out / who).mkdir(parents=True, exist_ok=True)
    (out / who / EXAMPLE.name).write_text(json.dumps(nb))
