"""Every notebook runs outside the repository, against `mha` installed from its wheel.

This is what a student in Colab gets: the package installed (not editable, no src/ on the path)
and a lone notebook in a folder of its own. The dependencies are reused from the course
environment (torch and friends are already there, as in Colab); `mha` itself comes only from the
wheel.
"""

import json
import os
import shutil
import site
import subprocess
import sys

import pytest

from conventions import NOTEBOOKS, ROOT


@pytest.fixture(scope="module")
def wheel_env(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("colab")
    # build from a copy: setuptools leaves build/ and *.egg-info next to the sources
    source = tmp / "source"
    shutil.copytree(ROOT / "src", source / "src", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ["pyproject.toml", "README.md"]:
        shutil.copy(ROOT / name, source / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
                    "--no-build-isolation", "-w", str(tmp / "dist"), str(source)],
                   check=True, capture_output=True)
    (wheel,) = (tmp / "dist").glob("mha-*.whl")
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    packages = subprocess.run([str(python), "-c", "import site; print(site.getsitepackages()[0])"],
                              check=True, capture_output=True, text=True).stdout.strip()
    # install the wheel's files into the fresh environment (pip from the course env does it)
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
                    "--target", packages, str(wheel)], check=True, capture_output=True)
    # dependencies from the course environment; a path listed in a .pth is not scanned for
    # .pth files itself, so the course env's editable `mha` stays invisible here
    with open(os.path.join(packages, "course_dependencies.pth"), "w") as pth:
        pth.write(site.getsitepackages()[0] + "\n")
    return python


def clean_env():
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    env["MPLBACKEND"] = "Agg"
    return env


def test_wheel_env_imports_mha_from_the_wheel_not_src(wheel_env, tmp_path):
    where = subprocess.run([str(wheel_env), "-c", "import mha; print(mha.__file__)"],
                           cwd=tmp_path, env=clean_env(), check=True, capture_output=True,
                           text=True).stdout.strip()
    assert str(wheel_env.parent.parent) in where and str(ROOT / "src") not in where


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_runs_alone_with_the_installed_wheel(wheel_env, tmp_path, notebook):
    shutil.copy(notebook, tmp_path / notebook.name)
    result = subprocess.run(
        [str(wheel_env), "-m", "nbconvert", "--to", "notebook", "--execute",
         "--ExecutePreprocessor.timeout=300", "--output", "executed.ipynb", notebook.name],
        cwd=tmp_path, env=clean_env(), capture_output=True, text=True,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    executed = json.loads((tmp_path / "executed.ipynb").read_text())
    errors = [o for c in executed["cells"] for o in c.get("outputs", [])
              if o["output_type"] == "error"]
    assert not errors
