"""The locks (requirements.txt, requirements-grading.txt, binder/requirements.txt) read as pip
reads them: which version of each package one Python on one platform installs."""

import platform

from lock import CUDA_ONLY  # noqa: E402  (tools/ is not a package)
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from conventions import ROOT

COURSE = ROOT / "requirements.txt"
GRADING = ROOT / "requirements-grading.txt"
BINDER = ROOT / "binder" / "requirements.txt"
# the marker environments of the platforms a contributor or a student may install on
PLATFORMS = {
    "linux": {"sys_platform": "linux", "platform_system": "Linux", "os_name": "posix",
              "platform_machine": "x86_64"},
    "macos": {"sys_platform": "darwin", "platform_system": "Darwin", "os_name": "posix",
              "platform_machine": "arm64"},
    "windows": {"sys_platform": "win32", "platform_system": "Windows", "os_name": "nt",
                "platform_machine": "AMD64"},
}


def lines(path) -> list[Requirement]:
    """The requirement lines of a requirements file: no comments, options or editable ``-e .``."""
    stripped = (line.strip() for line in path.read_text().splitlines())
    return [Requirement(line) for line in stripped if line and not line.startswith(("#", "-"))]


def environment(python: str = platform.python_version(), where: str | None = None) -> dict:
    """The marker environment of Python ``python`` ("3.10.12") on this platform, or on one of
    :data:`PLATFORMS`."""
    return default_environment() | PLATFORMS.get(where, {}) | {
        "python_full_version": python, "python_version": ".".join(python.split(".")[:2])}


def locked(path, python: str = platform.python_version(), where: str | None = None) -> dict:
    """{name: version} that ``path`` installs with Python ``python`` on this platform (or
    ``where``); every line pins one exact version, and no package is pinned twice there."""
    found: dict[str, str] = {}
    for req in lines(path):
        if req.marker is None or req.marker.evaluate(environment(python, where)):
            name = canonicalize_name(req.name)
            assert name not in found, f"{path.name}: {name} pinned twice for Python {python}"
            (spec,) = req.specifier
            assert spec.operator == "==", f"{path.name}: {req} is not an exact pin"
            found[name] = spec.version
    return found


def as_locked(installed: dict[str, str]) -> dict[str, str]:
    """{name: version} installed, as a lock names it: torch's CPU build (2.13.0+cpu) is the
    lock's 2.13.0; where pip took PyPI's CUDA build instead (PyTorch's CPU index not reached),
    the CUDA packages it brings, which no lock lists, are left out."""
    installed = dict(installed)
    if installed["torch"].endswith("+cpu"):
        installed["torch"] = installed["torch"].removesuffix("+cpu")
    else:
        installed = {name: version for name, version in installed.items()
                     if name not in CUDA_ONLY and not name.startswith(("nvidia-", "cuda-"))}
    return installed
