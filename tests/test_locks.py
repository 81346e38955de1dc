"""The locks are complete and consistent, and the environment is the lock.

requirements.txt (the course), requirements-grading.txt (grading, Python 3.10 and newer) and
binder/requirements.txt are made by `make lock` (tools/lock.py) from requirements.in and
requirements-grading.in. A lock that misses a package lets pip choose it on the day a fresh
clone installs: the course's outputs then depend on that day.
"""

import importlib.metadata
import json
import subprocess
import sys
from collections import deque

import lock  # noqa: E402  (tools/lock.py, which writes the locks)
import lockfiles
import pytest
import tomllib
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name

from conventions import ROOT

LOCKS = [lockfiles.COURSE, lockfiles.GRADING, lockfiles.BINDER]


def test_resolving_the_inputs_again_keeping_the_locked_versions_gives_the_same_locks(tmp_path):
    """Complete and consistent: uv, preferring every locked version (``lock.py --keep``) and
    from PyPI's releases before the date the locks record, resolves requirements.in and
    requirements-grading.in to exactly the committed files, on any later day. A hand edit, a
    lost line or an input changed without `make lock` fails; a release, or a registry's late
    copy of an old one (huggingface-hub 2.5.0 appeared here on the locks' day, dated before
    it), does not: moving to new releases is `make lock`'s and the weekly job's."""
    date = lock.resolved_date(lockfiles.COURSE)
    assert all(lock.resolved_date(path) == date for path in LOCKS)
    run = subprocess.run([sys.executable, str(ROOT / "tools" / "lock.py"), "--date", date,
                          "--out", str(tmp_path), "--keep"], capture_output=True, text=True,
                         timeout=600)
    assert run.returncode == 0, run.stderr
    for path in LOCKS:
        again = tmp_path / path.relative_to(ROOT)
        assert again.read_text() == path.read_text(), f"{path.relative_to(ROOT)}: run make lock"


def test_the_course_environment_is_the_lock():
    """Every package installed here is locked at the version installed, and every package the
    lock names for this Python and platform is installed (`make setup` installs the lock alone);
    the course package is this checkout, editable (-e .)."""
    installed = {canonicalize_name(d.metadata["Name"]): d.version
                 for d in importlib.metadata.distributions()}
    mha = importlib.metadata.distribution("mha")
    origin = json.loads(mha.read_text("direct_url.json"))
    assert origin["dir_info"] == {"editable": True} and origin["url"] == ROOT.as_uri()
    assert installed.pop("mha") == tomllib.loads((ROOT / "pyproject.toml").read_text())[
        "project"]["version"]
    assert lockfiles.as_locked(installed) == lockfiles.locked(lockfiles.COURSE)


def test_every_requirement_of_an_installed_locked_package_is_locked_at_a_version_it_accepts():
    """Without the network, for this Python and platform: start from what requirements.in asks
    for, follow the installed packages' own requirements (with the extras asked for, markers
    evaluated here), and find each locked at a version that satisfies it; the lock names
    nothing here that nothing needs."""
    pinned = lockfiles.locked(lockfiles.COURSE)
    asked = lockfiles.lines(ROOT / "requirements.in")
    asked += [Requirement(f"mha @ file://{ROOT}")]  # -e . (its own requirements follow)
    reached, queue = set(), deque((r, frozenset()) for r in asked)
    seen = set()
    while queue:
        req, via = queue.popleft()
        name = canonicalize_name(req.name)
        if name != "mha":
            assert name in pinned, f"{' <- '.join([name, *via])}: not in requirements.txt"
            assert req.specifier.contains(pinned[name], prereleases=True), \
                f"{name}=={pinned[name]} is locked, {' <- '.join(via)} asks for {req}"
        reached.add(name)
        for extra in sorted(req.extras) or [""]:
            if (name, extra) in seen:
                continue
            seen.add((name, extra))
            for needed in importlib.metadata.requires(req.name) or []:
                needed = Requirement(needed)
                env = lockfiles.environment() | {"extra": extra}
                if needed.marker is None or needed.marker.evaluate(env):
                    queue.append((needed, (name, *via)))
    assert pinned.keys() <= reached, f"locked, needed by nothing: {pinned.keys() - reached}"


def test_pip_finds_no_broken_requirement_in_the_course_environment():
    run = subprocess.run([sys.executable, "-m", "pip", "check"], capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr


@pytest.mark.parametrize("where", lockfiles.PLATFORMS)
@pytest.mark.parametrize("python", ["3.11.0", "3.11.7", "3.12.0", "3.13.0", "3.14.0"])
def test_grading_takes_the_course_versions_on_python_3_11_and_newer(python, where):
    course = lockfiles.locked(lockfiles.COURSE, python, where)
    grading = lockfiles.locked(lockfiles.GRADING, python, where)
    assert grading, python
    for name, version in grading.items():
        assert course.get(name) == version, f"{name}: {version} in grading, {course.get(name)}"


def test_grading_on_python_3_10_differs_from_the_course_only_where_the_course_needs_3_11():
    """Gradescope's Python 3.10 gets the course's version of every package that runs there,
    torch above all (the reference answers are computed with it)."""
    grading = lockfiles.locked(lockfiles.GRADING, "3.10.12")
    course = lockfiles.locked(lockfiles.COURSE)
    assert grading["torch"] == course["torch"]
    older = {name for name in grading.keys() & course.keys() if grading[name] != course[name]}
    assert older, "no package needs 3.11: is the 3.10 lock resolved for 3.10?"
    for name in older:  # the course's release is installed here: its metadata says why
        needs = SpecifierSet(importlib.metadata.metadata(name)["Requires-Python"] or "")
        assert not needs.contains("3.10.12"), f"{name} {course[name]} runs on 3.10 ({needs})"


def test_no_lock_names_a_package_only_torchs_cuda_build_needs():
    """The CPU build is what the course installs (PyTorch's CPU index, Binder, Gradescope)."""
    for path in LOCKS:
        names = {canonicalize_name(r.name) for r in lockfiles.lines(path)}
        cuda = {n for n in names if n in lock.CUDA_ONLY or n.startswith(("nvidia-", "cuda-"))}
        assert not cuda, f"{path.name}: {cuda}"


def test_jupyterlab_reports_every_extension_it_loads_compatible():
    """`make lab` renders the chapters' MyST with jupyterlab-myst, which JupyterLab disables
    when the @jupyter/ydoc it was built against is not the one JupyterLab ships (4.6 ships 4;
    jupyterlab-myst 2.7.0 needs 3): the lock keeps the two on matching versions."""
    run = subprocess.run([sys.executable, "-m", "jupyter", "labextension", "list"],
                         capture_output=True, text=True, timeout=120)
    listing = run.stdout + run.stderr
    assert run.returncode == 0, listing
    assert "jupyterlab-myst" in listing, listing
    assert "not compatible" not in listing, listing
