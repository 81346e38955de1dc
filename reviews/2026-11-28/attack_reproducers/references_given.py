"""For each exercise with reference_names: which of them the flag still looks for (the others
are used by the student edition's own code, so an answer using them is never flagged).
Run: cd /work/wt/attack && .venv/bin/python /work/wt/reviews-r3/attack/references_given.py"""
import importlib
from pathlib import Path

from mha_grade.assignments import load_assignment

for path in sorted(Path("/work/wt/attack/notebooks").glob("*.ipynb")):
    a = load_assignment(path)
    module = importlib.import_module(f"mha.checks.ch{path.name[:2]}")
    for name in dir(module):
        check = getattr(module, name)
        names = getattr(check, "reference_names", None)
        if names:
            left = a.references.get(check.exercise, ())
            print(f"{check.exercise}: declared {names}; flagged only for {left}")
