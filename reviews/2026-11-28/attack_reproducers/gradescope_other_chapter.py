"""Gradescope, one assignment per chapter (book/instructors.md's advice): a student hands in,
to the chapter-0 assignment, their chapter-0 notebook *and* a notebook of another chapter
(here the instructor's solved 03, standing for a chapter they did before). run_autograder
grades every chapter it finds and results.json's score is the sum of both.

Run (as root, ~1-2 min): cd /work/wt/attack && OMP_NUM_THREADS=1 .venv/bin/python \
    /work/wt/reviews-r3/attack/gradescope_other_chapter.py
"""
import json
import shutil
import sys
import tempfile
from pathlib import Path

sys.path[:0] = ["/work/wt/attack/tests"]
import gradescope_root  # noqa: E402
from exercise_notebooks import EXAMPLE, fmt  # noqa: E402

OTHER = Path("/work/wt/attack/notebooks/03_attention_with_weights.ipynb")
tmp = Path(tempfile.mkdtemp(prefix="attack-gs-"))
root = gradescope_root.unpack(tmp, chapters=False)  # the example chapter ...
shutil.copy(OTHER, root / "source" / "notebooks" / OTHER.name)  # ... and chapter 3 in the zip
(root / "submission" / EXAMPLE.name).write_text(json.dumps(fmt.load(EXAMPLE)))  # 3 points
shutil.copy(OTHER, root / "submission" / OTHER.name)  # a chapter of another assignment
run = gradescope_root.run_autograder(root, tmp / "canary", userns=False, timeout=600)
print(run.stdout[-1500:], run.stderr[-1500:])
report = json.loads((root / "results" / "results.json").read_text())
print("results.json score:", report["score"])
for test in report["tests"]:
    print(f"  {test.get('score')}/{test.get('max_score')}  {test['name'][:90]}")
