"""Binder's environment is the course environment, with PyTorch's CPU build.

repo2docker (Binder's builder) reads binder/ before the repository's root, so binder/
requirements.txt replaces requirements.txt there. It must pin the same versions, except that
torch comes from PyTorch's CPU index (the PyPI build for Linux pulls GBs of CUDA packages).
"""

import re

from conventions import ROOT, book_config

CPU_INDEX = "https://download.pytorch.org/whl/cpu"


def requirements(path):
    """Requirement lines of a file (comments and blank lines dropped), options apart."""
    lines = [line.split("#")[0].strip() for line in path.read_text().splitlines()]
    lines = [line for line in lines if line]
    options = [line for line in lines if line.startswith("--")]
    return [line for line in lines if not line.startswith("--")], options


def test_binder_pins_the_course_versions_with_the_cpu_build_of_torch():
    course, course_options = requirements(ROOT / "requirements.txt")
    binder, binder_options = requirements(ROOT / "binder" / "requirements.txt")
    assert course_options == []
    assert binder_options == [f"--extra-index-url {CPU_INDEX}"]
    (torch_pin,) = [line for line in course if line.startswith("torch==")]
    version = torch_pin.removeprefix("torch==")
    assert re.fullmatch(r"\d+\.\d+\.\d+", version), "requirements.txt pins an exact torch"
    expected = [f"torch=={version}+cpu" if line == torch_pin else line for line in course]
    assert binder == expected  # same pins, same order, nothing added or left out


def test_binder_uses_the_course_python_and_the_book_launches_binder():
    assert (ROOT / "binder" / "runtime.txt").read_text().strip() == "python-3.11"
    assert book_config()["launch_buttons"]["binderhub_url"] == "https://mybinder.org"
    # with a binder/ folder repo2docker ignores the root's files; inside it, an environment.yml
    # or a Pipfile would take precedence over requirements.txt
    others = {p.name for p in (ROOT / "binder").iterdir()} - {"requirements.txt", "runtime.txt"}
    assert not others & {"environment.yml", "Pipfile", "setup.py", "Project.toml"}
