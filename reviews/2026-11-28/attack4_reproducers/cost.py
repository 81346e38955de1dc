"""attack4: cost of flags(without_check_calls(nb, a), a) on crafted cells <= 64 KB, one cell and many.
Run from /work/wt/attack4: OMP_NUM_THREADS=1 PYTHONPATH=src:tests /work/main/.venv/bin/python /work/wt/reviews-r3/attack4/cost.py [ncells]"""
import json, sys, time, signal
from pathlib import Path
from exercise_notebooks import fmt
from test_grading_chapters import completed_edition
from mha_grade.assignments import load_assignment
from mha_grade.flags import flags, MAX_READ
from mha_grade.run import without_check_calls
from mha_grade.submissions import read_notebook

path = Path("notebooks/04_multi_head_attention.ipynb")
a = load_assignment(path)
base = read_notebook(json.dumps(completed_edition(fmt.load(path))).encode())
N = MAX_READ
def al(n): return "".join(f"from mha.checks import ch04 as a{i}\n" for i in range(n))
CELLS = {
    "getattr( x 8000 (no ')')": ("getattr(" * (N // 8))[:N],
    "newlines only": "\n" * N,
    "'from mha import ' one line": ("from mha import " * (N // 16))[:N],
    "32 aliases + filler a0.x": (al(32) + "a0.x " * N)[:N],
    "32 aliases + a0.x.x.x chain": (al(32) + "a0" + ".x" * N)[:N],
    "deep chain a.x.x (RecursionError)": ("a" + ".x" * N)[:N],
    "ﷺ (NFKC x18)": "\ufdfa" * N,
    "getattr( x4096 + ﷺ x32768": "getattr(" * 4096 + "\ufdfa" * (N - 8 * 4096),
}
import os
if os.environ.get("ONLY"):
    CELLS = {k: v for k, v in CELLS.items() if any(o in k for o in os.environ["ONLY"].split(","))}
class T(Exception): pass
def alarm(*_): raise T
signal.signal(signal.SIGALRM, alarm)
ncells = [int(x) for x in sys.argv[1:]] or [1]
for k in ncells:
    for what, cell in CELLS.items():
        nb = dict(base); nb["cells"] = base["cells"] + [{"cell_type": "code", "source": cell, "metadata": {}, "outputs": [], "execution_count": None} for _ in range(k)]
        size = len(json.dumps(nb).encode()) / 2**20
        t = time.perf_counter(); signal.alarm(120)
        try:
            w = without_check_calls(nb, a); t1 = time.perf_counter() - t
            f = flags(w, a); res = f
        except T:
            res = "TIMEOUT >120 s"; t1 = float("nan")
        except Exception as e:
            res = f"RAISED {type(e).__name__}"; t1 = float("nan")
        signal.alarm(0)
        print(f"{k:4d} x {what:36s} len={len(cell):6d} {size:6.2f} MB  wcc {t1:6.2f} s  total {time.perf_counter()-t:7.2f} s  {res}", flush=True)
