"""attack4: no-flag check over the chapters (as tests/test_grading_chapters.py now does) and honest
non-ASCII snippets; then the size rule at the limit. Run from /work/wt/attack4:
  OMP_NUM_THREADS=1 PYTHONPATH=src:tests /work/main/.venv/bin/python /work/wt/reviews-r3/attack4/false_flags.py"""
import json
from pathlib import Path
from exercise_notebooks import WITH_EXERCISES, fmt, student_edition
from test_grading_chapters import completed_edition
from mha_grade.assignments import load_assignment
from mha_grade.flags import flags, MAX_READ
from mha_grade.run import without_check_calls
from mha_grade.submissions import read_notebook

for path in WITH_EXERCISES:
    nb = fmt.load(path); a = load_assignment(path)
    for name, ed in [("instructor", nb), ("student", student_edition.student_edition(nb)),
                     ("completed", completed_edition(nb))]:
        read = read_notebook(json.dumps(ed).encode())
        print(f"{path.stem:32s} {name:10s} {flags(without_check_calls(read, a), a)}")

path = Path("notebooks/04_multi_head_attention.ipynb")
a = load_assignment(path)
def run(what, code):
    nb = read_notebook(json.dumps(completed_edition(fmt.load(path))).encode())
    nb["cells"].append({"cell_type": "code", "source": code, "metadata": {"tags": ["solution"]},
                        "outputs": [], "execution_count": None})
    print(f"{what:62s} -> {flags(without_check_calls(nb, a), a)}")

HONEST = {
    "Greek identifiers α = 0.1; β₁ = 0.9": "α = 0.1\nβ₁ = 0.9\nθ = α * β₁",
    "ligature in comment # ﬁrst ﬂag": "# ﬁrst we ﬂatten the heads\nx = 1",
    "ℓ, µ, x² in names/comments": "ℓ = 3  # length ℓ, mean µ, x²\nµ = 0.5",
    "fullwidth/Japanese comment": "# ｈｅａｄの数\nn_heads = 4",
    "string with ✓": "print('all shapes match ✓')",
    "string 'Exercise 4.2 [done]'": "print('Exercise 4.2 [done]')",
    "'getattr(model, \"w_q\")' honest": "w = getattr(model, 'w_q', None)",
    "'exec' in a comment (# we exec(ute) ...)": "# exec(ute) the cell twice\nx = 1",
    "environment var mention in comment": "# no environ needed\nx = 1",
    "model.modules[...] via list": "mods = list(model.modules())\nfirst = mods[0]",
    "self.modules[0] attribute named modules": "class M:\n    def __init__(self):\n        self.modules = [1]\n    def f(self):\n        return self.modules[0]",
    "killed = 0 (word kill in name?)": "kill = 0\nskill = 1",
    "daemon/spawn words in names": "spawn_rate = 0.1",
}
for what, code in HONEST.items():
    run("honest " + what, code)

TAMPER = "import mha.checks.ch04 as c\nc.split_heads = print\n"
run("control: tamper", TAMPER)
pad = MAX_READ - len(TAMPER)
run(f"tamper + pad to exactly MAX_READ ({MAX_READ})", TAMPER + "#" * pad)
run("tamper + pad to MAX_READ+1", TAMPER + "#" * (pad + 1))
run("tamper fullwidth + pad to MAX_READ (NFKC after size)", TAMPER.replace("checks", "ｃｈｅｃｋｓ") + "#" * pad)
run("cell of ﷺ x MAX_READ + tamper (expands to 1.1M after NFKC)", TAMPER + "\ufdfa" * pad)
