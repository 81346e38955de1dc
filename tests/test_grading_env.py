"""What grading needs, and Python 3.10 (Gradescope's default base image, Ubuntu 22.04).

requirements-grading.txt is what tools/autograder/setup.sh installs: a lock of what grading
imports and nothing of Jupyter, the book or the tests, at the course's versions where they run
on the Python at hand (tests/test_locks.py). The course package must keep working on 3.10:
every module compiles and imports under pyenv's 3.10 (CI's machine has it), setup.sh installs
the lock there, and the Gradescope zip's setup.sh and run_autograder run there
(tests/test_gradescope_tamper.py, 'Python 3.10 root').
"""

import ast
import json
import shlex
import subprocess
import sys
import zipfile

import gradescope_root
import lockfiles
import pytest
import tomllib
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from conventions import ROOT

PY310 = gradescope_root.python310()
needs_310 = pytest.mark.skipif(PY310 is None, reason="no Python 3.10 on this machine "
                               "(pyenv install 3.10, as CI's machine has)")


def test_grading_installs_what_mha_and_the_graded_chapters_import_and_no_course_tools():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    needed = [*project["dependencies"], *project["optional-dependencies"]["lab"]]
    names = lockfiles.locked(lockfiles.GRADING, "3.10.12").keys()
    for dependency in map(Requirement, needed):
        assert dependency.name.lower() in names, f"mha needs {dependency.name}"
    # the notebook runner's imports beyond the standard library: IPython alone
    runner = ast.parse((ROOT / "src" / "mha_grade" / "run_notebook.py").read_text())
    imported = {a.name.split(".")[0] for node in ast.walk(runner)
                if isinstance(node, ast.Import | ast.ImportFrom)
                for a in (node.names if isinstance(node, ast.Import)
                          else [ast.alias(node.module or "")])}
    assert "IPython" in imported and "ipython" in names
    tools = {"jupyter-book", "jupyterlab", "ipykernel", "nbclient", "nbval", "pytest", "ruff",
             "playwright", "hypothesis", "sphinx-exercise"}
    assert not tools & names


def test_the_gradescope_zip_holds_the_grading_requirements(tmp_path):
    bundle = tmp_path / "gradescope.zip"
    subprocess.run([sys.executable, "-m", "mha_grade", "gradescope", "build", "--all", str(bundle)],
                   check=True, capture_output=True)
    names = set(zipfile.ZipFile(bundle).namelist())
    assert {"requirements-grading.txt", "tools/reachable.py", "pyproject.toml"} <= names
    assert not any(n.startswith("binder/") or n == "requirements.txt" for n in names)
    setup = (ROOT / "tools" / "autograder" / "setup.sh").read_text()
    assert "requirements-grading.txt" in setup and "binder" not in setup


@needs_310
def test_every_module_compiles_under_python_3_10():
    """Syntax 3.10 lacks (except*, PEP 695, PEP 701's f-strings) fails here; ruff's target
    py310 says the same. Compiled in memory: no .pyc written."""
    files = sorted(p for folder in ("src", "tools") for p in (ROOT / folder).rglob("*.py"))
    script = ("import sys\nfor path in sys.argv[1:]:\n"
              "    compile(open(path, encoding='utf-8').read(), path, 'exec')\n")
    run = subprocess.run([str(PY310), "-c", script, *map(str, files)], capture_output=True,
                         text=True)
    assert run.returncode == 0, run.stderr
    assert len(files) > 40


@needs_310
def test_on_python_3_10_setup_installs_the_grading_lock_and_every_module_imports(tmp_path):
    """setup.sh in a Python 3.10 root installs the lock's versions, and pip finds nothing
    broken; then standard-library names 3.10 lacks (tomllib, typing.Self, datetime.UTC,
    enum.StrEnum, itertools.batched...) fail the imports."""
    why = gradescope_root.unavailable()
    if why:
        pytest.skip(why)
    system = gradescope_root.SystemPython(PY310)
    root = gradescope_root.unpack(tmp_path, chapters=False)
    setup = system.setup(root)
    assert setup.returncode == 0, setup.stdout + setup.stderr
    pip = "/autograder/venv/bin/python -m pip"
    run = system.run(root, f"{pip} check && {pip} list --format=json")
    assert run.returncode == 0, run.stdout + run.stderr
    installed = {canonicalize_name(d["name"]): d["version"]
                 for d in json.loads(run.stdout.splitlines()[-1])}
    assert installed.pop("mha") == tomllib.loads((ROOT / "pyproject.toml").read_text())[
        "project"]["version"]
    assert lockfiles.as_locked(installed) == lockfiles.locked(lockfiles.GRADING, "3.10.12")
    script = ("import importlib, pkgutil, sys, mha, mha_grade\n"
              "assert sys.version_info[:2] == (3, 10), sys.version\n"
              "names = [m.name for p in (mha, mha_grade)\n"
              "         for m in pkgutil.walk_packages(p.__path__, p.__name__ + '.')]\n"
              "for name in names:\n"
              "    if not name.endswith('__main__'):  # the command line, not a module\n"
              "        importlib.import_module(name)\n"
              "print(len(names))\n")
    run = system.run(root, f"cd /tmp && /autograder/venv/bin/python -c {shlex.quote(script)}")
    assert run.returncode == 0, run.stderr
    assert int(run.stdout) > 30
