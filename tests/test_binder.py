"""Binder's environment is the course environment, with PyTorch's CPU build.

repo2docker (Binder's builder) reads binder/ before the repository's root, so binder/
requirements.txt replaces requirements.txt there. `make lock` (tools/lock.py) writes it from the
course's lock: the same packages at the same versions, except that torch comes from PyTorch's
CPU index (the PyPI build for Linux pulls GBs of CUDA packages).
"""

import os
import re

import lockfiles

from conventions import ROOT, book_config

CPU_INDEX = "https://download.pytorch.org/whl/cpu"


def options(path):
    return [line.strip() for line in path.read_text().splitlines() if line.startswith("-")]


def test_binder_locks_the_course_versions_with_the_cpu_build_of_torch():
    assert options(lockfiles.COURSE) == ["-e ."]
    assert options(lockfiles.BINDER) == [f"--extra-index-url {CPU_INDEX}", "-e ."]
    course = lockfiles.locked(lockfiles.COURSE)
    assert re.fullmatch(r"\d+\.\d+\.\d+", course["torch"]), "requirements.txt pins an exact torch"
    for where in lockfiles.PLATFORMS:  # same pins, nothing added or left out
        for python in ["3.11.0", "3.11.7", "3.12.0", "3.13.0", "3.14.0"]:
            expected = lockfiles.locked(lockfiles.COURSE, python, where)
            expected["torch"] += "+cpu"
            assert lockfiles.locked(lockfiles.BINDER, python, where) == expected


def test_binder_uses_the_course_python_and_the_book_launches_binder():
    assert (ROOT / "binder" / "runtime.txt").read_text().strip() == "python-3.11"
    assert book_config()["launch_buttons"]["binderhub_url"] == "https://mybinder.org"
    # with a binder/ folder repo2docker ignores the root's files; inside it, an environment.yml
    # or a Pipfile would take precedence over requirements.txt
    others = {p.name for p in (ROOT / "binder").iterdir()} - {"requirements.txt", "runtime.txt"}
    assert not others & {"environment.yml", "Pipfile", "setup.py", "Project.toml"}


def test_binder_turns_jupyterlab_myst_off_for_the_edition():
    """Binder opens the Jupyter edition, whose folded solutions are <details> blocks: with
    jupyterlab-myst on, their maths stays raw TeX (seen in JupyterLab 4.5.11, fix41e)."""
    post_build = ROOT / "binder" / "postBuild"
    assert os.access(post_build, os.X_OK)
    assert "jupyter labextension disable --level=sys_prefix jupyterlab-myst" in \
        post_build.read_text()
