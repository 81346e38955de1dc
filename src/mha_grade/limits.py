"""Fair time limits: each chapter's limit is measured on the grading machine, under its load.

Before grading, the instructor's own notebook of each chapter that has submissions is graded
like a submission, beside as many others as the grading will run (``--jobs``), and timed. A
notebook of that chapter may then run ``max(--timeout, FACTOR x that time)``: a machine that
is slow or busy today gets a longer limit, never a shorter one than asked for. The run also
shows that the grader works here: the instructor's notebook must score full marks.

The limits are kept in the output folder (``KEPT``) with what they were measured for: the course's
version (the instructor's notebooks and the package ``mha``), the machine, ``--jobs``,
``--timeout`` and the factor. A later run with the same (``--resume``, ``--regrade``, the next
chapter of the class) reuses them, so the limits do not change between runs of one class;
``--recalibrate`` measures them again.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import platform
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from mha_grade.assignments import Assignment
from mha_grade.compare import Outcome
from mha_grade.escape import display
from mha_grade.files import create, read_regular
from mha_grade.outputs import TIME_LIMITS
from mha_grade.submissions import Found
from mha_grade.workers import grade_all

FACTOR = 3.0  # the instructor's notebook does no more than a full answer: 3x is room to spare
# the instructor's notebook gets this many times --timeout, and at least CALIBRATION_MIN seconds,
# before it is itself stopped
CALIBRATION_ROOM = 4.0
CALIBRATION_MIN = 900.0


@dataclass
class Limit:
    chapter: str  # the chapter notebook's name, "09_decoders"
    seconds: float | None  # the instructor's notebook's time here; None if it did not finish
    limit: float  # what a submission of this chapter may run
    points: tuple[int, int]  # what the instructor's notebook scored, of how many
    why: str  # one line for the output

    @property
    def warning(self) -> str:
        got, most = self.points
        if self.seconds is None:
            return (f"warning: the instructor's {self.chapter} did not finish within "
                    f"{calibration_limit(self.limit):.0f} s here")
        if got != most:
            return (f"warning: the instructor's {self.chapter} scores {got}/{most} here, not "
                    "full marks: check the chapter and its checks before trusting the grades")
        return ""


def calibration_limit(timeout: float) -> float:
    """How long the instructor's notebook may run when it is timed."""
    return max(CALIBRATION_ROOM * timeout, CALIBRATION_MIN)


def chapters_of(found: list[Found], assignments: list[Assignment]) -> list[Assignment]:
    """The chapters the notebooks of ``found`` are graded as (by name or exercise labels)."""
    from mha_grade.submissions import chapter_of_file

    named = {}
    for item in found:
        assignment = chapter_of_file(item.relative, item.path, assignments)
        if assignment is not None:
            named[assignment.name] = assignment
    return [named[n] for n in sorted(named)]


def calibrate(chapters: list[Assignment], assignments: list[Assignment], settings, *,
              factor: float = FACTOR, **grading) -> list[Limit]:
    """Grade each chapter's instructor notebook (``grading["sources"]``) as ``grade_all`` would
    grade a submission (``grading``: seed, sources, prefix, hide, jobs) and derive each
    limit."""
    paths = {Path(p).stem: Path(p) for p in grading["sources"]}
    todo = [Found(paths[a.name].name, paths[a.name]) for a in chapters if a.name in paths]
    roomy = replace(settings, timeouts={}, timeout=calibration_limit(settings.timeout),
                    with_stubs=False)
    outcomes: list[Outcome] = []
    grade_all(todo, assignments, roomy, on_outcome=outcomes.append, **grading)
    limits = []
    for outcome in outcomes:
        if outcome.assignment is None:
            continue
        name = outcome.assignment.name
        got = sum(outcome.points.values())
        most = sum(outcome.assignment.max_points(e) or 0 for e in outcome.assignment.exercises)
        if outcome.timed_out:
            limits.append(Limit(name, None, settings.timeout, (got, most),
                                f"{settings.timeout:.0f} s (the instructor's notebook did not "
                                "finish: the limit asked for is kept)"))
            continue
        limit = max(settings.timeout, math.ceil(factor * outcome.seconds))
        limits.append(Limit(name, outcome.seconds, limit, (got, most), (
            f"{limit:.0f} s = max(--timeout {settings.timeout:.0f} s, {factor:g} x "
            f"{outcome.seconds:.1f} s, the instructor's notebook's time here)")))
    return limits


def describe(limits: list[Limit]) -> list[str]:
    lines = ["time limits, measured here on the instructor's notebooks:"]
    for limit in limits:
        lines.append(f"  {display(limit.chapter)}: {limit.why}")
        if limit.warning:
            lines.append(f"  {limit.warning}")
    return lines


KEPT = TIME_LIMITS


def measured_for(sources: list[Path], jobs: int, timeout: float, factor: float) -> str:
    """What a set of limits holds for: a digest of the instructor's notebooks, the package
    ``mha`` (its files), this machine, and the options that change a limit."""
    import mha

    digest = hashlib.sha256()
    package = Path(mha.__file__).resolve().parent
    for path in sorted(sources) + sorted(package.rglob("*.py")):
        digest.update(str(path.name).encode() + b"\0" + path.read_bytes())
    digest.update(json.dumps([platform.node(), os.cpu_count(), jobs, timeout, factor]).encode())
    return digest.hexdigest()


def kept(out: Path, key: str, timeout: float) -> tuple[dict[str, Limit], str]:
    """The limits kept in ``out`` for ``key`` (by chapter) and when they were measured; none if
    the file is missing, is for something else, or holds a limit outside what calibration can
    give (``timeout`` to ``calibration_limit(timeout)``)."""
    try:
        data = json.loads(read_regular(out / KEPT, 2**20))
        if data["measured for"] != key:
            return {}, ""
        limits = {item["chapter"]: Limit(item["chapter"], item["seconds"], item["limit"],
                                         tuple(item["points"]), item["why"])
                  for item in data["limits"]}
    except (ValueError, KeyError, TypeError):
        return {}, ""
    if not all(timeout <= limit.limit <= calibration_limit(timeout) for limit in limits.values()):
        return {}, ""
    return limits, str(data.get("measured", ""))


def keep(out: Path, key: str, limits: list[Limit]) -> None:
    with create(out / KEPT, 0o644) as handle:
        json.dump({"measured for": key, "measured": time.strftime("%Y-%m-%d %H:%M"),
                   "limits": [asdict(limit) for limit in limits]}, handle, indent=1)
