"""`make pytest STRICT_ARRAYS=1` fails a notebook that hands a torch tensor to matplotlib.

numpy 2 warns (a DeprecationWarning, hidden by default) when matplotlib converts a tensor,
whose __array__ takes no `copy` keyword. The Makefile's ARRAY_WARNING filter, passed in
PYTHONWARNINGS, reaches the notebook's kernel and turns that warning into an error, so nbval
reports the cell; the same figure from a numpy array passes.
"""

import os
import re
import subprocess
import sys

import nbformat
from nbformat.v4 import new_code_cell, new_notebook

from conventions import ROOT

SETUP = "import matplotlib\nmatplotlib.use('Agg')\nimport matplotlib.pyplot as plt\nimport torch"


def array_warning_filter() -> str:
    match = re.search(r"^ARRAY_WARNING := (.+)$", (ROOT / "Makefile").read_text(), re.MULTILINE)
    assert match, "the Makefile defines ARRAY_WARNING"
    return match.group(1)


def test_the_filter_names_numpys_warning_exactly():
    action, message, category = array_warning_filter().split(":")
    assert (action, category) == ("error", "DeprecationWarning")
    assert "," not in message  # PYTHONWARNINGS separates filters with commas
    import warnings

    import matplotlib
    import numpy as np
    import torch

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        plt.imshow(torch.rand(2, 2))
        plt.close("all")
    assert any(str(w.message).startswith(message) and w.category is DeprecationWarning
               for w in caught), "numpy's message changed: update ARRAY_WARNING in the Makefile"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        plt.imshow(np.random.rand(2, 2))
        plt.close("all")
    assert not any(str(w.message).startswith(message) for w in caught)


def test_nbval_fails_the_cell_that_passes_a_tensor(tmp_path):
    nb = new_notebook(cells=[
        new_code_cell(SETUP, execution_count=1),
        new_code_cell("_ = plt.imshow(torch.rand(2, 2).numpy())", execution_count=2),
        new_code_cell("_ = plt.imshow(torch.rand(2, 2))", execution_count=3),
    ], metadata={"kernelspec": {"name": "python3", "display_name": "Python 3",
                                "language": "python"}})
    path = tmp_path / "figures.ipynb"
    nbformat.write(nb, path)
    env = {**os.environ, "PYTHONWARNINGS": array_warning_filter()}
    run = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q",
                          "-rA", "--nbval", "--nbval-current-env", str(path)],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    out = run.stdout
    assert run.returncode == 1, out
    assert re.search(r"PASSED .*figures\.ipynb::Cell 1", out), out  # a numpy array is fine
    assert re.search(r"FAILED .*figures\.ipynb::Cell 2", out), out  # a tensor is not
    assert "DeprecationWarning" in out and "copy keyword" in out
