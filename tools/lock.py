"""Lock the course's environments: every package at an exact version (`make lock`).

    python tools/lock.py [--date YYYY-MM-DD] [--out FOLDER]

A person edits the short files on the left; this writes the locks on the right:

    requirements.in          -> requirements.txt          the course, Python 3.11+ (make setup)
    requirements-grading.in  -> requirements-grading.txt  grading, Python 3.10+ (setup.sh)
    requirements.txt         -> binder/requirements.txt   the course with torch's CPU build

uv resolves them from the releases PyPI had before --date (default: today, UTC) and every lock
records that date, so resolving again with it gives the same files on any later day
(tests/test_locks.py does). On Python 3.11 and newer the grading lock takes the course lock's
versions (its constraint), so grading runs what the course's outputs were computed with.
--out writes the three files under FOLDER instead of in place.
"""

import argparse
import datetime
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


def compile_lock(source: str, python: str, date: str, excludes: Path,
                 constraints: Path | None = None) -> str:
    """uv's universal lock of ``source`` (a path relative to the repository) for ``python``
    and newer, without its header."""
    command = [sys.executable, "-m", "uv", "pip", "compile", source, "--quiet", "--no-config",
               "--universal", "--python-version", python, "--default-index", PYPI,
               "--exclude-newer", f"{date}T00:00:00Z", "--excludes", str(excludes),
               "--no-header"]
    if constraints:
        command += ["--constraints", str(constraints)]
    run = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    if run.returncode:
        sys.exit(f"uv could not lock {source}:\n{run.stderr}")
    # the constraint is a temporary file: name what it was made from
    return run.stdout.replace(str(constraints), "requirements.txt") if constraints else run.stdout


def pins(lock: str) -> list[tuple[str, str]]:
    """The ``(name==version, marker)`` of each line of a lock ("" where it has no marker)."""
    return re.findall(r"^([A-Za-z0-9._-]+==[^\s;]+)(?: ; (.+))?$", lock, re.MULTILINE)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    today = datetime.datetime.now(datetime.timezone.utc).date().isoformat()
    parser.add_argument("--date", default=today,
                        type=lambda d: datetime.date.fromisoformat(d).isoformat(),
                        help="resolve from the releases before this day (default: today, UTC)")
    parser.add_argument("--out", type=Path, default=ROOT,
                        help="write the locks under this folder (default: in place)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        excludes = Path(tmp, "cuda-only.txt")
        excludes.write_text("\n".join(CUDA_ONLY) + "\n")
        course = compile_lock("requirements.in", "3.11", args.date, excludes)
        # the course's versions bind grading on the Pythons the course runs on
        constraints = Path(tmp, "course.txt")
        constraints.write_text("".join(
            f"{pin} ; python_version >= '3.11'" + (f" and ({marker})" if marker else "") + "\n"
            for pin, marker in pins(course)))
        grading = compile_lock("requirements-grading.in", "3.10", args.date, excludes,
                               constraints)
    (torch,) = [pin for pin, _ in pins(course) if pin.startswith("torch==")]
    binder = f"--extra-index-url {CPU_INDEX}\n" + re.sub(
        rf"^{re.escape(torch)}$", f"{torch}+cpu", course, flags=re.MULTILINE)
    locks = {
        "requirements.txt": ("The course environment, Python 3.11 and newer", "requirements.in",
                             course),
        "requirements-grading.txt": ("What grading installs, Python 3.10 and newer",
                                     "requirements-grading.in", grading),
        # repo2docker reads binder/ before the root: on PyPI, torch for Linux is the CUDA build
        "binder/requirements.txt": ("Binder's environment: the course's, with PyTorch's CPU build",
                                    "requirements.in", binder),
    }
    for name, (what, source, body) in locks.items():
        path = args.out / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(HEADER.format(what=what, source=source, date_line=DATE_LINE,
                                      date=args.date) + body)
        print(f"{path}: {len(pins(body))} pins, as of {args.date}")


if __name__ == "__main__":
    main()
