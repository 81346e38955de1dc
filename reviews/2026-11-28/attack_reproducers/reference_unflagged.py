"""The "calls the reference" flag misses ordinary imports: a star import, inspect/operator, or
a module attribute read through a dict the flag regexes do not list. Each answer below returns
mha's own pool_kv_heads (exercise 9.5's reference) and would score the point; the grader's
flags() is what the instructor would read.

Run: cd /work/wt/attack && .venv/bin/python /work/wt/reviews-r3/attack/reference_unflagged.py
"""
import sys
from pathlib import Path

sys.path[:0] = ["/work/wt/attack/tests"]
from exercise_notebooks import fmt, student_edition  # noqa: E402

from mha_grade.assignments import load_assignment  # noqa: E402
from mha_grade.flags import flags  # noqa: E402

CHAPTER = Path("/work/wt/attack/notebooks/09_decoders.ipynb")
assignment = load_assignment(CHAPTER)
print("9.5 references the flag looks for:", assignment.references.get("9.5"))
ANSWERS = {
    "plain import (flagged, as documented)":
        "from mha import pool_kv_heads\npool_kv_heads_answer = pool_kv_heads",
    "star import": "from mha import *\npool_kv_heads_answer = pool_kv_heads",
    "star import of the submodule": "from mha.kv_sharing import *\n"
                                    "pool_kv_heads_answer = pool_kv_heads",
    "inspect.getmembers": "import inspect\npool_kv_heads_answer = dict(inspect.getmembers(mha))"
                          "['pool_kv_heads']",
    "operator.attrgetter": "import operator\npool_kv_heads_answer = operator.attrgetter("
                           "'pool_kv_heads')(mha)",
}
for what, code in ANSWERS.items():
    nb = student_edition.student_edition(fmt.load(CHAPTER))
    nb["cells"].append({"cell_type": "code", "source": code, "metadata": {}, "outputs": [],
                        "execution_count": None})
    for c in nb["cells"]:
        c["source"] = "".join(c["source"]) if isinstance(c["source"], list) else c["source"]
    print(f"{what:40s} -> flags: {flags(nb, assignment)}")
