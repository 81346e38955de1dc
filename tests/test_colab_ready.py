"""`mha` as a student in Colab gets it: built into a wheel and installed, not editable.

The dependencies are reused from the course environment (torch and friends are already there, as
in Colab); `mha` itself comes only from the wheel. That every chapter *runs* outside the
repository with a non-editable copy of the package is shown by the one sandboxed grading run of
each chapter (tests/test_grading_chapters.py: no src/ and no repository visible in the sandbox),
so the notebooks are not executed again here; this file checks that the wheel builds, imports
from outside the repository, and holds every file of src/mha that the sandbox's copy holds.
"""

import os
import shutil
import site
import subprocess
import sys

import pytest

from conventions import ROOT


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
    # (every site-packages folder of the course env: a thin venv may chain to another's)
    folders = [p for p in site.getsitepackages() + sys.path
               if p.endswith("site-packages") and os.path.isdir(p)]
    with open(os.path.join(packages, "course_dependencies.pth"), "w") as pth:
        pth.write("".join(f"{p}\n" for p in dict.fromkeys(folders)))
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


def test_the_wheel_holds_every_file_of_the_package(wheel_env):
    """What the grader's sandbox copies (src/mha, tests/test_grading_chapters.py runs every
    chapter with that copy) is what the wheel installs: the same files, data included."""
    import zipfile

    (wheel,) = (wheel_env.parent.parent.parent / "dist").glob("mha-*.whl")
    in_wheel = {name for name in zipfile.ZipFile(wheel).namelist()
                if name.startswith("mha/")}
    in_src = {p.relative_to(ROOT / "src").as_posix() for p in (ROOT / "src" / "mha").rglob("*")
              if p.is_file() and "__pycache__" not in p.parts}
    assert in_src <= in_wheel, sorted(in_src - in_wheel)
