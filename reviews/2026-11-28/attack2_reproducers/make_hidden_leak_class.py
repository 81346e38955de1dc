"""Round 4: hidden inputs come back to the student through their own error message. The answer
to 0.3 records every n the grader asks for while its check's capture is served (visible part:
2 and two sizes from the hidden seed; hidden part: 1 and a longer size from the hidden seed);
a later cell raises an error whose message is that list. first_error (grading_log.csv, the
feedback page, Gradescope's output) shows it, although hidden parts' messages are withheld.
The same record tells the notebook which inputs a part stopped at, i.e. which part failed.

Run: cd /work/wt/attack2 && .venv/bin/python /work/wt/reviews-r3/attack2/make_hidden_leak_class.py CLASS
     .venv/bin/mha-grade grade CLASS --source tests/fixtures/00_example_exercises.ipynb --jobs 1 --no-calibrate
     .venv/bin/mha-grade report CLASS --source tests/fixtures/00_example_exercises.ipynb --out OUT
     grep -o "asked for[^<]*" OUT/feedback/*.html
"""
import json
import sys
from pathlib import Path

sys.path[:0] = [str(Path.cwd() / "tests")]
from exercise_notebooks import EXAMPLE, fmt  # noqa: E402

RECORD = ("seen = []\n_real_mask = causal_mask\n"
          "def causal_mask(n):\n    seen.append(n)\n    return _real_mask(n)\n"
          "import mha.checks.ch00\nmha.checks.ch00.causal_mask(causal_mask)\n")
LEAK = "raise ValueError(f'asked for n = {seen}')"
out = Path(sys.argv[1])
nb = fmt.load(EXAMPLE)
for c in nb["cells"]:
    c["source"] = "".join(c["source"]) if isinstance(c["source"], list) else c["source"]
nb["cells"] += [{"cell_type": "code", "source": s, "metadata": {}, "outputs": [],
                 "execution_count": None} for s in (RECORD, LEAK)]
(out / "leaky").mkdir(parents=True, exist_ok=True)
(out / "leaky" / EXAMPLE.name).write_text(json.dumps(nb))
