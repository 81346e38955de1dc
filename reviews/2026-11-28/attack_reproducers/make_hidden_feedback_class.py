"""The feedback pages of `mha-grade report` print hidden parts' messages (the hidden case's name
and the size the hidden seed drew) with no visibility control, unlike Gradescope's
after_due_date. A causal_mask that .squeeze()s fails the hidden part (n = 1).

Run: cd /work/wt/attack && .venv/bin/python /work/wt/reviews-r3/attack/make_hidden_feedback_class.py CLASS
     .venv/bin/mha-grade grade CLASS --source tests/fixtures/00_example_exercises.ipynb --jobs 1 --no-calibrate
     .venv/bin/mha-grade report CLASS --source tests/fixtures/00_example_exercises.ipynb --out OUT
     grep -o "hidden part[^<]*" OUT/feedback/*.html
"""
import json
import sys
from pathlib import Path

sys.path[:0] = ["/work/wt/attack/tests"]
from exercise_notebooks import EXAMPLE, fmt, student_edition  # noqa: E402

out = Path(sys.argv[1])
nb = student_edition.student_edition(fmt.load(EXAMPLE))
for c in nb["cells"]:
    text = "".join(c["source"]) if isinstance(c["source"], list) else c["source"]
    if c["cell_type"] == "code" and "def causal_mask" in text:
        c["source"] = "def causal_mask(n):\n    return torch.ones(n, n, dtype=torch.bool).tril().squeeze()"
(out / "dana").mkdir(parents=True, exist_ok=True)
(out / "dana" / EXAMPLE.name).write_text(json.dumps(nb))
