"""What grading needs, and Python 3.10 (Gradescope's default base image, Ubuntu 22.04).

requirements-grading.txt is what tools/autograder/setup.sh installs: the course's own pins
(requirements.txt) and nothing of Jupyter, the book or the tests; where a pin needs Python 3.11,
the newest release for 3.10. The course package must keep working on 3.10: every module
compiles and imports under pyenv's 3.10 (CI's machine has it), and the Gradescope zip's
setup.sh and run_autograder run there (tests/test_gradescope_tamper.py, 'Python 3.10 root').
"""

import ast
import importlib.metadata
import re
import shlex
import subprocess
import sys
import zipfile

import gradescope_root
import pytest
import tomllib
from packaging.requirements import Requirement

from conventions import ROOT

GRADING = ROOT / "requirements-grading.txt"
PY310 = gradescope_root.python310()
needs_310 = pytest.mark.skipif(PY310 is None, reason="no Python 3.10 on this machine "
                               "(pyenv install 3.10, as CI's machine has)")


def requirements(path):
    """[Requirement] of a requirements file, without options and the editable course package."""
    lines = (line.split(" #")[0].strip() for line in path.read_text().splitlines())
    return [Requirement(line) for line in lines if line and not line.startswith(("#", "-"))]


def pins(path, python):
    """{name: version} of the lines that apply to Python ``python`` ("3.10", "3.11")."""
    found = {}
    for req in requirements(path):
        if req.marker is None or req.marker.evaluate({"python_version": python}):
            assert req.name not in found, f"{req.name} pinned twice for Python {python}"
            (spec,) = req.specifier
            assert spec.operator == "==", f"{req}: pin an exact version"
            found[req.name.lower()] = spec.version
    return found


def test_on_python_311_grading_installs_the_course_environments_own_pins():
    course = pins(ROOT / "requirements.txt", "3.11")
    for name, version in pins(GRADING, "3.11").items():
        # IPython comes with ipykernel in the course environment: its installed release
        expected = course.get(name) or importlib.metadata.version(name)
        assert version == expected, f"{name}: {version} here, {expected} in the course"


def test_every_package_is_pinned_once_for_each_python():
    on_311, on_310 = pins(GRADING, "3.11"), pins(GRADING, "3.10")
    assert on_311.keys() == on_310.keys()
    for req in requirements(GRADING):  # a marker says which Python, and only that
        assert req.marker is None or re.fullmatch(r'python_version [<>]=? "3\.1[01]"',
                                                  str(req.marker)), req


def test_grading_installs_what_mha_and_the_graded_chapters_import_and_no_course_tools():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    needed = [*project["dependencies"], *project["optional-dependencies"]["lab"]]
    names = pins(GRADING, "3.10").keys()
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
def test_every_module_of_mha_and_the_grader_imports_on_python_3_10(tmp_path):
    """Standard-library names 3.10 lacks (tomllib, typing.Self, datetime.UTC, enum.StrEnum,
    itertools.batched...) fail here: setup.sh's environment in a Python 3.10 root."""
    why = gradescope_root.unavailable()
    if why:
        pytest.skip(why)
    system = gradescope_root.SystemPython(PY310)
    root = gradescope_root.unpack(tmp_path, chapters=False)
    setup = system.setup(root)
    assert setup.returncode == 0, setup.stdout + setup.stderr
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
