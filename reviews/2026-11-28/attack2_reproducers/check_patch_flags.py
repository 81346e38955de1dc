"""Round 4: the "patches the grading" flag after without_check_calls blanks honest check imports.
Each cell replaces or tampers with the capturing wrapper of 0.2 (ch00.scaled_scores); the guide
and run_notebook's docstring say a replaced check falls back to the end of the notebook and
is flagged. No sandbox: flags() on the example chapter's solved notebook plus one cell.

Run: cd /work/wt/attack2 && .venv/bin/python /work/wt/reviews-r3/attack2/check_patch_flags.py
"""
import sys
from pathlib import Path

sys.path[:0] = [str(Path.cwd() / "tests")]
from exercise_notebooks import EXAMPLE, fmt  # noqa: E402

from mha_grade.assignments import load_assignment  # noqa: E402
from mha_grade.flags import flags  # noqa: E402
from mha_grade.run import without_check_calls  # noqa: E402

assignment = load_assignment(EXAMPLE)
CELLS = {
    "control: mha.checks.ch00.scaled_scores = print":
        "mha.checks.ch00.scaled_scores = print",
    "from mha.checks import ch00; ch00.x = print":
        "from mha.checks import ch00\nch00.scaled_scores = print",
    "import mha.checks.ch00 as c; c.x = print":
        "import mha.checks.ch00 as c\nc.scaled_scores = print",
    "from mha.checks.ch00 import scaled_scores as s; closure swap":
        "from mha.checks.ch00 import scaled_scores as s\n"
        "cap = [c for c in s.__closure__ if getattr(c.cell_contents, '__name__', '') == 'capture'][0]\n"
        "srv = [c for c in cap.cell_contents.__closure__ if getattr(c.cell_contents, '__name__', '') == 'serve'][0]\n"
        "srv.cell_contents = lambda request, table: {'value': 0}",
    "busy flag via closure: every later call captures nothing":
        "from mha.checks import ch00\n"
        "[c.cell_contents.append(True) for c in ch00.scaled_scores.__closure__ "
        "if c.cell_contents == []]",
}
for what, code in CELLS.items():
    nb = fmt.load(EXAMPLE)
    for c in nb["cells"]:
        c["source"] = "".join(c["source"]) if isinstance(c["source"], list) else c["source"]
    nb["cells"].append({"cell_type": "code", "source": code, "metadata": {}, "outputs": [],
                        "execution_count": None})
    print(f"{what:60s} -> {flags(without_check_calls(nb, assignment), assignment)}")
