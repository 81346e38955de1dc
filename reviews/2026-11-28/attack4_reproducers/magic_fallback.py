"""attack4 (pre-existing, seen while checking _trees): a cell magic makes ast.parse fail, the per-line
fallback misses a multi-line import of a reference. Run from /work/wt/attack4:
  PYTHONPATH=src:tests /work/main/.venv/bin/python /work/wt/reviews-r3/attack4/magic_fallback.py"""
import json
from pathlib import Path
from exercise_notebooks import fmt
from test_grading_chapters import completed_edition
from mha_grade.assignments import load_assignment
from mha_grade.flags import flags
from mha_grade.run import without_check_calls
from mha_grade.submissions import read_notebook
path = Path("notebooks/09_decoders.ipynb")
a = load_assignment(path)
print(a.references)
ref = "mha.kv_sharing.pool_kv_heads"
mod, name = ref.rsplit(".", 1)
for what, code in {
    "one-line import": f"from {mod} import {name} as f\n",
    "multi-line import": f"from {mod} import (\n    {name} as f,\n)\n",
    "%%time + multi-line import": f"%%time\nfrom {mod} import (\n    {name} as f,\n)\n",
    "%%capture + multi-line import": f"%%capture\nfrom {mod} import (\n    {name} as f,\n)\n",
}.items():
    nb = read_notebook(json.dumps(completed_edition(fmt.load(path))).encode())
    nb["cells"].append({"cell_type": "code", "source": code, "metadata": {}, "outputs": [], "execution_count": None})
    print(f"{what:32s} -> {flags(without_check_calls(nb, a), a)}")
