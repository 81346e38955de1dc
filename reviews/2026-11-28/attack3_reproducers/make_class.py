"""Round 5 (attack3): the example chapter's solved notebook plus one last cell per student,
each tampering with 0.2's capturing wrapper in a form the new flag patterns do not read:
- gc_swap: swaps serve in capture's closure through gc.get_referents + setattr (no __closure__,
  no cell_contents, no getattr), then calls 0.2's check with a WRONG answer;
- fullwidth_swap: attack2's closure swap spelled with fullwidth letters (Python reads
  __ｃlosure__ as __closure__, NFKC), then the same wrong call;
- setattr_patch: setattr(ch00, 'scaled_scores', print), then the wrong call (prints it);
- control_wrong: the same wrong call, nothing tampered (expected: 0.2 0/1).
Run from /work/wt/attack3:
  PYTHONPATH=src:tests /work/main/.venv/bin/python /work/wt/reviews-r3/attack3/make_class.py CLASS
  PYTHONPATH=src:tests /work/main/.venv/bin/python -m mha_grade grade CLASS \
      --source tests/fixtures/00_example_exercises.ipynb --jobs 1 --no-calibrate --seed 5
"""
import json
import sys
from pathlib import Path

from exercise_notebooks import EXAMPLE, fmt

WRONG = "lambda q, k: q @ k.T"
GC = """from mha.checks import ch00
import gc
def cells_of(f):
    return next(r for r in gc.get_referents(f)
                if type(r) is tuple and r and type(r[0]).__name__ == 'cell')
def content(c):
    inside = gc.get_referents(c)
    return inside[0] if inside else None
def named(f, name):
    return next(c for c in cells_of(f) if callable(content(c)) and content(c).__name__ == name)
srv = named(content(named(ch00.scaled_scores, 'capture')), 'serve')
real = content(srv)
def fake(request, table):
    return real(request, [scaled_scores])
setattr(srv, 'cell_' + 'contents', fake)
ch00.scaled_scores(%s)""" % WRONG
FULLWIDTH = ("from mha.checks import ch00\n"
             "cells = {c.ｃell_contents.__name__: c for c in ch00.scaled_scores.__ｃlosure__"
             " if callable(c.ｃell_contents)}\n"
             "inner = {c.ｃell_contents.__name__ if callable(c.ｃell_contents) else i: c for i, c"
             " in enumerate(cells['capture'].ｃell_contents.__ｃlosure__)}\n"
             "real = inner['serve'].ｃell_contents\n"
             "def fake(request, table):\n    return real(request, [scaled_scores])\n"
             "inner['serve'].ｃell_contents = fake\n"
             f"ch00.scaled_scores({WRONG})")
EXTRA = {
    "gc_swap": GC,
    "fullwidth_swap": FULLWIDTH,
    "setattr_patch": "from mha.checks import ch00\nsetattr(ch00, 'scaled_scores', print)\n"
                     f"ch00.scaled_scores({WRONG})",
    "control_wrong": f"from mha.checks import ch00\nch00.scaled_scores({WRONG})",
}
out = Path(sys.argv[1])
for who, extra in EXTRA.items():
    nb = fmt.load(EXAMPLE)
    for c in nb["cells"]:
        c["source"] = "".join(c["source"]) if isinstance(c["source"], list) else c["source"]
    nb["cells"].append({"cell_type": "code", "source": extra, "metadata": {}, "outputs": [],
                        "execution_count": None})
    (out / who).mkdir(parents=True, exist_ok=True)
    (out / who / EXAMPLE.name).write_text(json.dumps(nb))
print(sorted(EXTRA))
