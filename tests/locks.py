"""The locks (requirements.txt, requirements-grading.txt, binder/requirements.txt) read as pip
reads them: which version of each package one Python on this platform installs."""

import platform

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from conventions import ROOT

COURSE = ROOT / "requirements.txt"
GRADING = ROOT / "requirements-grading.txt"
BINDER = ROOT / "binder" / "requirements.txt"


def lines(path) -> list[Requirement]:
    """The requirement lines of a requirements file: no comments, options or editable ``-e .``."""
    stripped = (line.strip() for line in path.read_text().splitlines())
    return [Requirement(line) for line in stripped if line and not line.startswith(("#", "-"))]


def environment(python: str = platform.python_version()) -> dict[str, str]:
    """The marker environment of this platform with Python ``python`` ("3.10.12")."""
    return default_environment() | {"python_full_version": python,
                                    "python_version": ".".join(python.split(".")[:2])}


def locked(path, python: str = platform.python_version()) -> dict[str, str]:
    """{name: version} that ``path`` installs with Python ``python`` on this platform; every
    line pins one exact version, and no package is pinned twice there."""
    found: dict[str, str] = {}
    for req in lines(path):
        if req.marker is None or req.marker.evaluate(environment(python)):
            name = canonicalize_name(req.name)
            assert name not in found, f"{path.name}: {name} pinned twice for Python {python}"
            (spec,) = req.specifier
            assert spec.operator == "==", f"{path.name}: {req} is not an exact pin"
            found[name] = spec.version
    return found
