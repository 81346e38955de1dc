"""Round 5 (attack3): test_no_flag_on_the_instructors_notebook_or_the_student_editions's logic, but
through without_check_calls as grading does (run.py:257), on every chapter; then honest snippets
added to chapter 4's completed edition. Run from /work/wt/attack3:
  PYTHONPATH=src:tests /work/main/.venv/bin/python /work/wt/reviews-r3/attack3/false_flags.py
"""
import json
from pathlib import Path
from exercise_notebooks import WITH_EXERCISES, fmt, student_edition
from test_grading_chapters import completed_edition
from mha_grade.assignments import load_assignment
from mha_grade.flags import flags
from mha_grade.run import without_check_calls
from mha_grade.submissions import read_notebook

for path in WITH_EXERCISES:
    nb = fmt.load(path); a = load_assignment(path)
    for name, ed in [("instructor", nb), ("student", student_edition.student_edition(nb)),
                     ("completed", completed_edition(nb))]:
        read = read_notebook(json.dumps(ed).encode())
        f1, f2 = flags(read, a), flags(without_check_calls(read, a), a)
        print(f"{path.stem:32s} {name:10s} flags={f1} via without_check_calls={f2}")

HONEST = {
    "model.modules()": "n = sum(1 for m in model.modules())",
    "modules = nn.ModuleList; modules[0]": "import torch.nn as nn\nmodules = nn.ModuleList([nn.Linear(2, 2)])\nfirst = modules[0]",
    "dict(model.named_modules())['x']": "d = dict(model.named_modules())\nx = d.get('x')",
    "torch.nn.functional as F": "import torch.nn.functional as F\ny = F.softmax(x, dim=-1)",
    "functools.reduce(operator.mul, shape)": "import functools, operator\nn = functools.reduce(operator.mul, (2, 3), 1)",
    "honest check import + call, two checks": "from mha.checks import ch04 as checks\nchecks.split_heads(split_heads)",
    "from mha.checks import ch04, two names on one line": "from mha.checks import ch04, ch03\n",
    "from mha.checks import (ch04)": "from mha.checks import (ch04)\n",
    "import mha.checks.ch04 (binds mha), call": "import mha.checks.ch04\nmha.checks.ch04.split_heads(split_heads)",
    "check alias + keyword in same cell: checks.x(f); cfg.heads = 2": "from mha.checks import ch04 as checks\ncfg = type('C', (), {})()\ncfg.heads = 2",
    "alias named like a later attribute owner: as c, then c.x = 1 where c rebound": "from mha.checks import ch04 as c\nc = {}\nfor c in [type('O', (), {})()]:\n    c.x = 1",
}
path = Path("notebooks/04_multi_head_attention.ipynb")
a = load_assignment(path)
for what, code in HONEST.items():
    nb = read_notebook(json.dumps(completed_edition(fmt.load(path))).encode())
    nb["cells"].append({"cell_type": "code", "source": code, "metadata": {"tags": ["solution"]},
                        "outputs": [], "execution_count": None})
    print(f"honest {what:60s} -> {flags(without_check_calls(nb, a), a)}")
