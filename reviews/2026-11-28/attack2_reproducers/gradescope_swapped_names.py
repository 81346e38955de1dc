"""Round 4: Gradescope chapter selection with names and labels that disagree. The chapter-0 zip
gets two notebooks: the solved chapter 3 saved as 00_example_exercises.ipynb (chapter 3's
labels), and the solved chapter 0 saved as 03_attention_with_weights.ipynb (chapter 0's
labels). Expected: one chapter-0 grade (3 points, from the file named 03), the other ignored,
score <= 3.

Run (as root, ~1 min): cd /work/wt/attack2 && OMP_NUM_THREADS=1 .venv/bin/python \
    /work/wt/reviews-r3/attack2/gradescope_swapped_names.py
"""
import json
import shutil
import sys
import tempfile
from pathlib import Path

sys.path[:0] = [str(Path.cwd() / "tests")]
import gradescope_root  # noqa: E402
from exercise_notebooks import EXAMPLE, fmt  # noqa: E402

OTHER = Path.cwd() / "notebooks/03_attention_with_weights.ipynb"
tmp = Path(tempfile.mkdtemp(prefix="attack2-gs-"))
root = gradescope_root.unpack(tmp, chapters=False)
shutil.copy(OTHER, root / "source" / "notebooks" / OTHER.name)
(root / "submission" / OTHER.name).write_text(json.dumps(fmt.load(EXAMPLE)))
shutil.copy(OTHER, root / "submission" / EXAMPLE.name)
run = gradescope_root.run_autograder(root, tmp / "canary", userns=False, timeout=600)
print(run.stdout[-1500:], run.stderr[-1500:])
report = json.loads((root / "results" / "results.json").read_text())
print("results.json score:", report["score"])
for test in report["tests"]:
    print(f"  {test.get('score')}/{test.get('max_score')}  {test['name'][:70]} {test.get('output','')[:150]!r}")
