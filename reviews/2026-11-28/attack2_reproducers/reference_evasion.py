"""Round 4: ways to reach exercise 9.5's reference (mha.pool_kv_heads) that the reworked flags
(any import form, star imports, inspect/operator/dir) still do not see. No sandbox: runs
mha_grade.flags.flags() on the student edition of chapter 9 plus one answer cell.

Run: cd /work/wt/attack2 && .venv/bin/python /work/wt/reviews-r3/attack2/reference_evasion.py
"""
import sys
from pathlib import Path

ROOT = Path.cwd()
sys.path[:0] = [str(ROOT / "tests")]
from exercise_notebooks import fmt, student_edition  # noqa: E402

from mha_grade.assignments import load_assignment  # noqa: E402
from mha_grade.flags import flags  # noqa: E402
from mha_grade.run import without_check_calls  # noqa: E402

CHAPTER = ROOT / "notebooks/09_decoders.ipynb"
assignment = load_assignment(CHAPTER)
ANSWERS = {
    "control: from mha import pool_kv_heads": "from mha import pool_kv_heads as p\nmean_pool_kv = p",
    "import mha.kv_sharing as ks":
        "import mha.kv_sharing as ks\nmean_pool_kv = ks.pool_kv_heads",
    "from mha import kv_sharing; attribute":
        "from mha import kv_sharing\nmean_pool_kv = kv_sharing.pool_kv_heads",
    "module __getattribute__ with split name":
        "mean_pool_kv = mha.__getattribute__('pool_kv' + '_heads')",
    "sys.modules via a local name":
        "import sys as s\nmean_pool_kv = s.modules['mha.kv_sharing'].pool_kv_heads",
    "check module import (blanked as honest) + its globals":
        "from mha.checks import ch09\n"
        "mean_pool_kv = ch09.mean_pool_kv.__wrapped__.__globals__['torch'] and "
        "ch09.torch.nn.functional.avg_pool1d",
    "getattr with a name from a list":
        "names = ['pool', 'kv', 'heads']\nmean_pool_kv = getattr(mha, '_'.join(names))",
    "functools.reduce getattr":
        "import functools\nmean_pool_kv = functools.reduce(getattr, ['pool_kv_heads'], mha)",
}
print("9.5 references the flag looks for:", assignment.references.get("9.5"))
for what, code in ANSWERS.items():
    nb = student_edition.student_edition(fmt.load(CHAPTER))
    nb["cells"].append({"cell_type": "code", "source": code, "metadata": {"tags": ["solution"]},
                        "outputs": [], "execution_count": None})
    for c in nb["cells"]:
        c["source"] = "".join(c["source"]) if isinstance(c["source"], list) else c["source"]
    print(f"{what:55s} -> {flags(without_check_calls(nb, assignment), assignment)}")
