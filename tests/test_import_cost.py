"""`import mha` stays cheap: every notebook, grading sandbox and subprocess of the tests pays it
(scipy.stats alone added 0.6 s to it), so the heavy libraries load only where they are used."""

import subprocess
import sys

HEAVY = ["scipy", "transformers", "sklearn", "plotly", "matplotlib", "sympy", "IPython"]


def test_import_mha_loads_torch_and_numpy_but_no_heavy_library():
    code = f"import sys, mha; print([m for m in {HEAVY!r} if m in sys.modules])"
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "[]"
