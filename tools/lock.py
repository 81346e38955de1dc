"""Lock the course's environments: every package at an exact version (`make lock`).

    python tools/lock.py [--date YYYY-MM-DD] [--out FOLDER] [--keep]

A person edits the short files on the left; this writes the locks on the right:

    requirements.in          -> requirements.txt          the course, Python 3.11+ (make setup)
    requirements-grading.in  -> requirements-grading.txt  grading, Python 3.10+ (setup.sh)
    requirements.txt         -> binder/requirements.txt   the course with torch's CPU build

uv resolves them from the releases PyPI had before --date (default: today, UTC) and every lock
records that date; a registry that copies a release late (dated before --date) can still change
a resolution with the same date, so tests/test_locks.py resolves with --keep. Without it, every
package not pinned in an input moves to its newest release
before the date; when none moved, the locks are left as they are (no new date, no rebuild).
On Python 3.11 and newer the grading lock takes the course lock's versions (its constraint),
so grading runs what the course's outputs were computed with.
--out writes the three files under FOLDER instead of in place. --keep prefers the committed
locks' versions (what tests/test_locks.py checks: the locks are complete and consistent with
the inputs, whatever was released, or copied late into the registry, since).
"""

import argparse
import datetime
import importlib.metadata
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PYPI = "https://pypi.org/simple"
CPU_INDEX = "https://download.pytorch.org/whl/cpu"
# PyPI's torch for Linux is the CUDA build, which needs these; the CPU build that the course
# installs (PyTorch's CPU index, Binder, Gradescope) needs none of them, so none is locked.
CUDA_ONLY = ["cuda-bindings", "cuda-toolkit", "nvidia-cudnn-cu13", "nvidia-cusparselt-cu13",
             "nvidia-nccl-cu13", "nvidia-nvshmem-cu13", "triton"]
# the uv settings that change how it reaches PyPI, never what it resolves
UV_KEPT = {"UV_CACHE_DIR", "UV_NATIVE_TLS", "UV_SYSTEM_CERTS", "UV_HTTP_TIMEOUT", "UV_OFFLINE"}
DATE_LINE = "# resolved from PyPI's releases before: "
HEADER = """\
# {what}.
# Every package at its exact version, locked by `make lock` (tools/lock.py) from {source}:
# edit that file and run `make lock`, never this one.
{date_line}{date}
"""


def resolved_date(lock: Path) -> str:
    """The date a lock was resolved on, from its header."""
    for line in lock.read_text().splitlines():
        if line.startswith(DATE_LINE):
            return line.removeprefix(DATE_LINE)
    raise ValueError(f"{lock} does not say which date it was resolved on ({DATE_LINE!r})")


def compile_lock(source: str, python: str, date: str, tmp: Path, excludes: Path,
                 course: str | None = None, keep: str | None = None) -> str:
    """uv's universal lock of ``source`` (a path relative to the repository) for ``python``
    and newer, without its header. No setting of the caller's that changes a resolution counts
    (no uv.toml, no UV_* variable but :data:`UV_KEPT`): the same inputs and date give the same
    lock on every machine. The fewest versions in all: a package differs between Pythons only
    where one cannot run it.
    With ``course`` (the course's lock), its versions are the lock's on Python 3.11 and newer
    (a constraint) and preferred on older Pythons (uv keeps what its output file holds).
    With ``keep`` (a lock of this ``source``), its versions are preferred instead: nothing moves
    that still resolves, so a release (or a registry's late copy of one) changes nothing."""
    output = Path(tmp, "lock.txt")
    output.write_text("")
    command = [sys.executable, "-m", "uv", "pip", "compile", source, "--quiet", "--no-config",
               "--universal", "--python-version", python, "--fork-strategy", "fewest",
               "--default-index", PYPI, "--exclude-newer", f"{date}T00:00:00Z",
               "--excludes", str(excludes), "--no-header", "--output-file", str(output)]
    if course:
        constraints = Path(tmp, "course-constraints.txt")
        constraints.write_text("".join(
            f"{pin} ; python_version >= '3.11'" + (f" and ({marker})" if marker else "") + "\n"
            for pin, marker in pins(course)))
        output.write_text("".join(f"{pin}\n" for pin, _ in pins(course)))
        command += ["--constraints", str(constraints)]
    if keep:
        output.write_text("".join(f"{pin}" + (f" ; {marker}" if marker else "") + "\n"
                                  for pin, marker in pins(keep)))
    env = {k: v for k, v in os.environ.items() if not k.startswith("UV_") or k in UV_KEPT}
    run = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, env=env)
    if run.returncode:
        sys.exit(f"uv could not lock {source}:\n{run.stderr}")
    # the constraint is a temporary file: name what it was made from
    return re.sub(r"-c \S*course-constraints\.txt", "-c requirements.txt", output.read_text())


def pins(lock: str) -> list[tuple[str, str]]:
    """The ``(name==version, marker)`` of each line of a lock ("" where it has no marker)."""
    return re.findall(r"^([A-Za-z0-9._-]+==[^\s;]+)(?: ; (.+))?$", lock, re.MULTILINE)


def locked_uv() -> str:
    """uv's version in requirements.txt: the resolver is locked too."""
    return next(pin for pin, _ in pins((ROOT / "requirements.txt").read_text())
                if pin.startswith("uv==")).removeprefix("uv==")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    today = datetime.datetime.now(datetime.timezone.utc).date()
    parser.add_argument("--date", default=today.isoformat(),
                        type=lambda d: datetime.date.fromisoformat(d).isoformat(),
                        help="resolve from the releases before this day (default: today, UTC)")
    parser.add_argument("--out", type=Path, default=ROOT,
                        help="write the locks under this folder (default: in place)")
    parser.add_argument("--keep", action="store_true",
                        help="prefer the committed locks' versions (check that they are complete "
                             "and consistent with the inputs; nothing moves that still resolves)")
    args = parser.parse_args()
    if args.date > today.isoformat():
        sys.exit(f"--date {args.date} is after today: PyPI's releases of that day are not known")
    try:
        uv = importlib.metadata.version("uv")
    except importlib.metadata.PackageNotFoundError:
        uv = "none"
    if uv != locked_uv():
        sys.exit(f"uv {uv} here, {locked_uv()} in requirements.txt: run `make setup` first")
    with tempfile.TemporaryDirectory() as tmp:
        excludes = Path(tmp, "cuda-only.txt")
        excludes.write_text("\n".join(CUDA_ONLY) + "\n")
        kept = {name: (ROOT / name).read_text() if args.keep else None
                for name in ("requirements.txt", "requirements-grading.txt")}
        course = compile_lock("requirements.in", "3.11", args.date, tmp, excludes,
                              keep=kept["requirements.txt"])
        grading = compile_lock("requirements-grading.in", "3.10", args.date, tmp, excludes,
                               course, keep=kept["requirements-grading.txt"])
    torch = [pin for pin, marker in pins(course) if pin.startswith("torch==") and not marker]
    if len(torch) != 1:
        sys.exit(f"requirements.txt locks torch as {torch}: Binder's lock needs one torch line")
    binder = f"--extra-index-url {CPU_INDEX}\n" + re.sub(
        rf"^{re.escape(torch[0])}$", f"{torch[0]}+cpu", course, flags=re.MULTILINE)
    locks = {
        "requirements.txt": ("The course environment (Python 3.11; CI and Binder run it)",
                             "requirements.in", course),
        "requirements-grading.txt": ("What grading installs (Gradescope's Python 3.10, and 3.11)",
                                     "requirements-grading.in", grading),
        # repo2docker reads binder/ before the root: on PyPI, torch for Linux is the CUDA build
        "binder/requirements.txt": ("Binder's environment: the course's, with PyTorch's CPU build",
                                    "requirements.in", binder),
    }

    def text(date: str) -> dict[Path, str]:
        return {args.out / name: HEADER.format(what=what, source=source, date_line=DATE_LINE,
                                               date=date) + new
                for name, (what, source, new) in locks.items()}

    try:
        before = resolved_date(ROOT / "requirements.txt")
        unchanged = all(p.read_text() == t for p, t in text(before).items())
    except (OSError, ValueError):  # a lock missing or without its date: written anew
        unchanged = False
    if args.out == ROOT and unchanged:
        print(f"nothing changed since {before}: the locks are left as they are")
        return
    for path, new in text(args.date).items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(new, newline="\n")
        print(f"{path}: {len(pins(new))} pins, as of {args.date}")


if __name__ == "__main__":
    main()
