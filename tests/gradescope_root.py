"""A throwaway root to run the Gradescope autograder in, as Gradescope would: as root, with
Gradescope's documented layout at /autograder, and with a second, unprivileged user.

``bwrap`` (run by root on the host, so without a user namespace: an ordinary user's namespace
maps one uid only, and the autograder needs root *and* a second user) gives run_autograder a
private mount, PID, IPC and UTS namespace: the host's files read-only, a copy of /etc it may
change (``useradd``), a fresh /tmp, a temporary folder bound at /autograder, and a world-writable
/canary where a test's attack leaves traces the test reads afterwards. Every process it starts
dies with its PID namespace; nothing on the host changes but the temporary folders.
"""

from __future__ import annotations

import atexit
import fcntl
import functools
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from conventions import ROOT

# The example chapter (two exercises, a few seconds): added to the unpacked zip's chapters, so
# that no course chapter runs a third time in the test suite (nbval and its grading run do).
CHAPTER = ROOT / "tests" / "fixtures" / "00_example_exercises.ipynb"


def unavailable() -> str | None:
    """Why this machine cannot make the throwaway root (``None`` when it can)."""
    if sys.platform != "linux":
        return "Linux only"
    if os.geteuid() != 0:
        return ("needs root: run_autograder runs as root beside a second user, which the user "
                "namespace of an ordinary user cannot map (one uid only)")
    if shutil.which("bwrap") is None or shutil.which("useradd") is None:
        return "needs bubblewrap and useradd"
    return None


@functools.cache
def whole_course_zip() -> Path:
    """The zip of `mha-grade gradescope build --all`, built once per test process (each build
    starts a Python that imports torch); callers unpack it and never change it."""
    folder = tempfile.mkdtemp(prefix="gradescope-zip-")
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    bundle = Path(folder) / "gradescope.zip"
    subprocess.run([sys.executable, "-m", "mha_grade", "gradescope", "build", "--all",
                    str(bundle)], check=True, capture_output=True)
    return bundle


def unpack(tmp_path: Path, zip_path: Path | None = None, *, chapters: bool = True,
           chapter: str | None = CHAPTER.stem) -> Path:
    """The autograder zip unpacked in Gradescope's layout under ``tmp_path/autograder``, with the
    example chapter added (and, without ``chapters``, alone: a cheaper start). The zip's
    settings then name ``chapter`` as the assignment's (by default the example chapter, which
    ``build`` cannot name: it is no chapter of the course); ``None`` keeps the zip's."""
    bundle = zip_path or whole_course_zip()
    root = tmp_path / "autograder"
    with zipfile.ZipFile(bundle) as z:
        z.extractall(root / "source")
    for name in ("setup.sh", "run_autograder"):
        (root / "source" / name).chmod(0o755)
    shutil.copy(root / "source" / "run_autograder", root / "run_autograder")
    if not chapters:
        for path in (root / "source" / "notebooks").glob("*.ipynb"):
            path.unlink()
    shutil.copy(CHAPTER, root / "source" / "notebooks" / CHAPTER.name)
    if chapter is not None:
        settings = root / "source" / "gradescope_settings.json"
        settings.write_text(json.dumps(json.loads(settings.read_text()) | {"chapter": chapter}))
    (root / "submission").mkdir()
    (root / "results").mkdir()
    return root


def _readable(path: str, argv: list[str]) -> None:
    """Bind ``path`` where it is, under a tmpfs over its first ancestor that others may not
    enter (pyenv's Python lives under /root, mode 700) or that is one of the fresh tmpfs
    (a clone's venv under /tmp): the student's user must run it."""
    path = os.path.realpath(path)
    parts = Path(path).parts
    for depth in range(2, len(parts)):
        ancestor = str(Path(*parts[:depth]))
        if ancestor in ("/tmp", "/root") or not os.stat(ancestor).st_mode & 0o001:
            for inner in range(depth + 1, len(parts)):  # bwrap would make them 0700
                argv += ["--perms", "0755", "--dir", str(Path(*parts[:inner]))]
            break
    argv += ["--ro-bind", path, path]


def _bwrap(root: Path) -> list[str]:
    """bwrap's arguments for the throwaway root around ``root`` (bound at /autograder)."""
    etc = root.parent / "etc"
    if not etc.exists():
        shutil.copytree("/etc", etc, symlinks=True, ignore_dangling_symlinks=True)
    argv = ["bwrap", "--die-with-parent", "--unshare-pid", "--unshare-ipc", "--unshare-uts"]
    for name in sorted(os.listdir("/")):  # the host's top folders, read-only, but these
        if name in ("proc", "dev", "tmp", "etc", "root", "autograder", "canary"):
            continue
        path = f"/{name}"
        if os.path.islink(path):
            argv += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            argv += ["--ro-bind", path, path]
    argv += ["--dev", "/dev", "--proc", "/proc", "--perms", "01777", "--tmpfs", "/tmp",
             "--perms", "0755", "--tmpfs", "/root",
             "--bind", str(etc), "/etc", "--bind", str(root), "/autograder"]
    return argv


def run_autograder(root: Path, canary: Path | None = None, *, userns: bool = True,
                   timeout: float = 600, system: SystemPython | None = None
                   ) -> subprocess.CompletedProcess:
    """Run ``root/run_autograder`` as root in the throwaway root. ``userns=False`` hides
    bwrap from it (bound over by /dev/null), as in a container without user namespaces.
    With ``system`` (see :func:`system_python`), the root's Python is that one and the grader
    runs in the environment its setup.sh installed, as on Gradescope; else in this venv."""
    argv = _bwrap(root)
    if canary is not None:
        canary.mkdir(exist_ok=True)
        canary.chmod(0o777)
        argv += ["--bind", str(canary), "/canary"]
    if system is None:
        # the Python, and the sources its editable ``mha`` points to (the grader imports it): a
        # clone under /tmp would be hidden by the fresh /tmp
        for path in (sys.base_prefix, sys.prefix, str(ROOT / "src")):
            _readable(path, argv)
    else:
        argv += system.binds()
    if not userns:
        argv += ["--ro-bind", "/dev/null", shutil.which("bwrap")]
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin", "LANG": "C.UTF-8",
           "PYTHONDONTWRITEBYTECODE": "1", "OMP_NUM_THREADS": "1", "HOME": "/root"}
    if system is None:
        env["PYTHON"] = sys.executable  # else run_autograder's own: /autograder/venv/bin/python
    # with user namespaces, a clean /proc over bwrap's (whose read-only covers would stop a
    # nested sandbox from mounting its own), as a container that allows them has
    script = ("mount -t proc proc /proc && " if userns else "") + \
        "exec bash /autograder/run_autograder"
    return subprocess.run([*argv, "bash", "-c", script], env=env, capture_output=True,
                          text=True, timeout=timeout)


def python310() -> Path | None:
    """pyenv's Python 3.10 (the Python of Gradescope's default base image, Ubuntu 22.04), or
    a python3.10 on PATH that is not a pyenv shim; ``None`` if this machine has neither."""
    found = sorted(Path.home().glob(".pyenv/versions/3.10.*/bin/python3.10"),
                   key=lambda p: [int(n) for n in p.parent.parent.name.split(".")])
    if found:
        return found[-1]
    which = shutil.which("python3.10")
    return Path(which).resolve() if which and "shims" not in Path(which).parts else None


# where the environment setup.sh installs is kept between runs: a few GB, installed in minutes
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "mha-gradescope"


class SystemPython:
    """A root whose only Python is ``python`` (as ``python3`` first on PATH, as a base image's
    /usr/bin/python3 is) and whose /autograder/venv is kept in :data:`CACHE`, one per
    requirements-grading.txt: :meth:`setup` runs the zip's setup.sh in it, every time (setup.sh
    installs only what changed: the course's packages, and any other change of setup.sh)."""

    def __init__(self, python: Path):
        self.python = python
        key = hashlib.sha256(str(python).encode())
        key.update((ROOT / "requirements-grading.txt").read_bytes())
        self.venv = CACHE / f"venv-{key.hexdigest()[:12]}"
        version = ".".join(python.name.removeprefix("python").split(".")[:2])
        self.wheels = CACHE / f"wheels-{version}"

    def binds(self) -> list[str]:
        """The Python's own prefix, readable by all; ``python3`` first on PATH; the venv at
        /autograder/venv, writable as on Gradescope: only its modes (setup.sh's ``chmod``)
        keep the student's user from changing it (if an attack did, setup.sh's next run
        reinstalls the course's packages)."""
        argv: list[str] = []
        _readable(str(self.python.resolve().parent.parent), argv)
        argv += ["--dir", "/root/bin", "--symlink", str(self.python), "/root/bin/python3",
                 "--bind", str(self.venv), "/autograder/venv"]
        return argv

    def setup(self, root: Path, timeout: float = 1800) -> subprocess.CompletedProcess:
        """Run ``root/source/setup.sh`` as Gradescope does when it builds the image: as root,
        with the network (PyPI here), into the cached venv (the first time: every package;
        later: the course's packages again and nothing else). One run at a time per venv."""
        CACHE.mkdir(parents=True, exist_ok=True)
        with open(CACHE / "lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            for old in CACHE.glob("venv-*"):  # an older requirements-grading.txt's: GBs
                if old != self.venv:
                    shutil.rmtree(old, ignore_errors=True)
            if not (self.venv / "pyvenv.cfg").exists():  # the wheels, downloaded once
                subprocess.run([str(self.python), "-m", "pip", "download", "--quiet", "--dest",
                                str(self.wheels), "--find-links", str(self.wheels),
                                "--requirement", str(ROOT / "requirements-grading.txt")],
                               check=True, timeout=timeout)
            self.venv.mkdir(exist_ok=True)
            # no PYTHONDONTWRITEBYTECODE: pip byte-compiles what it installs, as on Gradescope
            pip = {"PIP_FIND_LINKS": " ".join(filter(None, [os.environ.get("PIP_FIND_LINKS"),
                                                            "/wheels"]))}
            return self.run(root, "bash /autograder/source/setup.sh", env=pip, timeout=timeout,
                            binds=["--ro-bind", str(self.wheels), "/wheels"])

    def run(self, root: Path, command: str, *, env: dict | None = None, timeout: float = 600,
            binds: list[str] = ()) -> subprocess.CompletedProcess:
        """``bash -c command`` as root in the throwaway root around ``root``. (The venv's
        python links to the root's ``/root/bin/python3``, as a base image's venv links to
        /usr/bin/python3: it runs in the root only.)"""
        base = {"PATH": "/root/bin:/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin",
                "LANG": "C.UTF-8", "HOME": "/root"}
        return subprocess.run([*_bwrap(root), *self.binds(), *binds, "bash", "-c", command],
                              env=base | (env or {}), capture_output=True, text=True,
                              timeout=timeout)


def system_python(version: str = "3.10") -> SystemPython | None:
    python = python310() if version == "3.10" else None
    return SystemPython(python) if python else None
