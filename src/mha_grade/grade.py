"""Grade submitted notebooks in a sandbox, with verdicts computed outside it.

    mha-grade grade SUBMISSIONS [--jobs 2] [--timeout 300] [--cell-timeout 120]
                          [--out FOLDER] [--seed N] [--no-sandbox] [--copies latest|best]
                          [--again-alone] [--late-penalty none|P%|P%/day]

Every ``*.ipynb`` under SUBMISSIONS (any depth, e.g. one folder per student) is matched to its
chapter by file name (``.../01_attention_recap.ipynb``, ``alice_01_attention_recap.ipynb``) or,
failing that, by the exercise labels it contains. One student's copies of a chapter cost one
grading: the copy handed in last is graded, the others are reported as ignored (mha_grade.copies;
``--copies best`` grades every copy, and the report counts the one with the most points). For
each submission:

1. its code cells run, as written, in a bubblewrap sandbox (mha_grade.sandbox,
   mha_grade.run_notebook): no network, no view of this machine's files, processes or
   environment, limits on memory, processes, disk and time;
2. there each of the chapter's checks (``mha.checks...``) is replaced by a wrapper that
   *captures* the answer it is called with, whenever and however the notebook calls it (the
   last call counts); a check the notebook never calls is captured at the end of the run;
3. at each capture the grader runs the chapter's check **in its own process**: the check draws
   its inputs from a seed picked for this grading run (unknown to students), sends them to the
   sandbox as plain data, gets the student's function's results back as plain data (JSON, parsed
   strictly) and compares them with its own reference. Nothing the submission prints or patches
   is read as a verdict.

Each submission is graded by one of ``--jobs`` grading processes (``mha_grade.workers``), so
that one sandbox's messages are parsed beside no other's. Ctrl-C or SIGTERM stops every grading
process and sandbox within seconds and keeps the ``.part`` files for ``--resume``.

Output (in SUBMISSIONS, or ``--out``), written a notebook at a time as results come in and
replaced atomically at the end, never through a symbolic link, with names escaped for a
terminal and a spreadsheet: ``grades.csv`` (``notebook,exercise,points,max_points``; exercises
graded by hand have empty points) and ``grading_log.csv`` (status, the check's message, which is
feedback a student may read, seconds, errors, flags for code that deserves a human look, and the
problem with the whole notebook if any: skipped files, duplicates, chapter mismatches, limits).
"""

from __future__ import annotations

import argparse
import os
import secrets
import signal
import sys
import time
from pathlib import Path

from mha.exercises import set_grading_seed
from mha_grade import ROOT, copies, late, sandbox
from mha_grade.assignments import load_assignment
from mha_grade.compare import Outcome
from mha_grade.escape import cell, display, terminal
from mha_grade.exercise_format import chapter_notebooks
from mha_grade.limits import (
    FACTOR,
    KEPT,
    calibrate,
    chapters_of,
    describe,
    keep,
    kept,
    measured_for,
)
from mha_grade.outputs import Writer, summary_line
from mha_grade.run import CELL_GRACE, Settings
from mha_grade.submissions import Found, find_submissions
from mha_grade.workers import grade_all, raise_interrupt


def main(argv: list[str] | None = None) -> int:
    """``mha-grade grade``: settle the options, check the sandbox can run, then grade and write."""
    argv = sys.argv[1:] if argv is None else argv
    parser = grade_parser()
    args = parser.parse_args(argv)
    out = settle_options(parser, args)
    warn_of_jobs_beyond_cpus(args.jobs)
    users, refusal = grading_users(args)
    if refusal:
        print(refusal, file=sys.stderr)
        return 2
    seed = args.seed if args.seed is not None else secrets.randbits(48)
    set_grading_seed(seed)
    sources = [p.resolve() for p in (args.source or chapter_notebooks(ROOT))]
    assignments = [a for a in (load_assignment(p) for p in sources) if a.exercises]
    found = find_submissions(args.submissions, assignments, out, args.copies)
    settings = settings_from(args, users)
    regrade = None
    if args.regrade:
        try:
            regrade, found = chosen(args.regrade, found, out)
        except ValueError as error:
            parser.error(str(error))
    writer = open_writer(args, out, regrade)
    found = announce(args, writer, regrade, found, len(assignments), settings)
    return grade_and_write(args, out, writer, found, assignments, settings,
                           {"seed": seed, "sources": sources})


def grade_parser() -> argparse.ArgumentParser:
    """The options of ``mha-grade grade``."""
    parser = argparse.ArgumentParser(prog="mha-grade grade", description=__doc__.splitlines()[0])
    parser.add_argument("submissions", type=Path, help="folder of submitted notebooks")
    parser.add_argument("--out", type=Path, default=None,
                        help="folder for grades.csv and grading_log.csv (default: SUBMISSIONS)")
    parser.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1),
                        help="submissions graded at the same time (default 2)")
    add_limit_options(parser)
    parser.add_argument("--seed", type=int, default=None,
                        help="seed of the hidden inputs (default: a fresh random one per run)")
    parser.add_argument("--source", type=Path, action="append", default=None,
                        help="instructor notebook(s) to grade against "
                             "(default: every chapter in notebooks/)")
    parser.add_argument("--no-sandbox", "--unsafe-no-sandbox", dest="no_sandbox",
                        action="store_true",
                        help="run submissions without the sandbox: only for notebooks you "
                             "trust, or inside a container that is itself the sandbox")
    parser.add_argument("--resume", action="store_true",
                        help="keep the notebooks graded by an interrupted run (the .part files "
                             "in the output folder) and grade only the others")
    parser.add_argument("--regrade", nargs="+", metavar="NAME", default=None,
                        help="grade again only these notebooks (as named in the notebook "
                             "column, or a folder: alice/) and replace their rows in grades.csv "
                             "and grading_log.csv; @FILE reads names from FILE, one a line")
    add_calibration_options(parser)
    add_rule_options(parser)
    parser.add_argument("--again-alone", action="store_true",
                        help="grade a notebook that reached its time limit beside others once "
                             "more, alone, at the end (by default its first run is written)")
    parser.add_argument("--with-stubs", action="store_true", help=argparse.SUPPRESS)
    return parser


def add_limit_options(parser: argparse.ArgumentParser) -> None:
    """The options that bound one notebook's run: time, memory, disk."""
    parser.add_argument("--timeout", type=float, default=300.0,
                        help="seconds one notebook may run in all (default 300)")
    parser.add_argument("--cell-timeout", type=float, default=120.0,
                        help="seconds one cell or call may run before it is interrupted "
                             f"(default 120; stopped from outside {CELL_GRACE:.0f} s later)")
    parser.add_argument("--memory-gb", type=float, default=6.0,
                        help="address space per process in the sandbox, GB (default 6)")
    parser.add_argument("--disk-mb", type=int, default=512,
                        help="bytes a submission may write in all, MB (default 512)")


def add_calibration_options(parser: argparse.ArgumentParser) -> None:
    """The options of the time limits measured on the instructor's notebooks."""
    parser.add_argument("--calibrate-factor", type=float, default=FACTOR,
                        help="each chapter's time limit is max(--timeout, this x the time its "
                             f"instructor's notebook takes here) (default {FACTOR:g})")
    parser.add_argument("--no-calibrate", action="store_true",
                        help="do not time the instructor's notebooks first: --timeout for all")
    parser.add_argument("--recalibrate", action="store_true",
                        help=f"time the instructor's notebooks again, even where the output "
                             f"folder keeps limits measured for this course, machine and "
                             f"options ({KEPT})")


def add_rule_options(parser: argparse.ArgumentParser) -> None:
    """The rules written beside the grades, where the report reads them: copies, late penalty."""
    parser.add_argument("--copies", choices=copies.RULES, default=None,
                        help="a student's copies of one chapter: grade the one handed in last "
                             "(latest: Canvas's submission order, else the files' times; the "
                             "others are reported as ignored), or every copy, the one with the "
                             "most points to count (best: a grading per copy). Default latest, "
                             "or with --resume and --regrade the rule the folder was graded by; "
                             "written beside the grades, where the report reads it")
    parser.add_argument("--late-penalty", default=None, metavar="RULE",
                        help=late.HELP + "; written beside the grades, where the report reads "
                             "it. Default none, or with --resume and --regrade the rule the "
                             "folder was graded with")


def settle_options(parser: argparse.ArgumentParser, args: argparse.Namespace) -> Path:
    """Check the options against each other and the output folder (made here, and returned);
    settle the copies and late-penalty rules (with --resume or --regrade: the folder's)."""
    if args.regrade and args.resume:
        parser.error("--regrade and --resume do not go together")
    folder = args.submissions
    if not folder.is_dir():
        parser.error(f"{folder} is not a folder")
    out = args.out or folder
    out.mkdir(parents=True, exist_ok=True)
    graded_by = copies.graded_rule(out) if args.resume or args.regrade else None
    if graded_by and args.copies and args.copies != graded_by:
        parser.error(f"--copies {args.copies}: {out} was graded with --copies {graded_by}; "
                     "resume or regrade with the same rule, or grade afresh into another --out")
    args.copies = args.copies or graded_by or copies.DEFAULT_RULE
    try:
        args.late_penalty = late.rule_for_grading(args.late_penalty, out,
                                                  bool(args.resume or args.regrade))
    except ValueError as error:
        parser.error(str(error))
    return out


def warn_of_jobs_beyond_cpus(jobs: int) -> None:
    """Warn when more notebooks would run at once than there are CPUs to share."""
    if jobs > (os.cpu_count() or 1):
        print(f"warning: --jobs {jobs} is more than the {os.cpu_count()} CPU(s): each "
              "sandbox is bounded to one CPU (as root), but then they share them, and a "
              "notebook that uses its whole CPU slows its neighbours", file=sys.stderr)


def grading_users(args: argparse.Namespace) -> tuple[list[sandbox.User], str]:
    """(the users the grading processes run as: one each as root, never the host's root, else
    none; why grading cannot start here, or "")."""
    users: list[sandbox.User] = []
    if os.geteuid() == 0:  # never the host's root: each grading process gets a user of its own
        try:
            users = sandbox.reserve_users(args.jobs)
        except (OSError, RuntimeError) as error:
            return users, f"cannot grade as root here: {error}"
    if args.no_sandbox and users:
        why = sandbox.cannot_start_python(users[0])
        if why:
            return users, f"cannot grade as root here: {why}"
    if not args.no_sandbox:
        # the sandbox as the notebooks get it must start Python, or grading stops here
        why = sandbox.unavailable(users[0] if users else None) or \
            sandbox.cannot_start_python_in_sandbox(users[0] if users else None)
        if why:
            return users, (f"cannot grade untrusted notebooks here: {why}.\nGrade in a Linux "
                           "machine or container with bubblewrap, or pass --no-sandbox for "
                           "notebooks you trust.")
    return users, ""


def settings_from(args: argparse.Namespace, users: list[sandbox.User]) -> Settings:
    """How each notebook runs: its time limits, sandbox, resource limits and user."""
    return Settings(args.timeout, args.cell_timeout, not args.no_sandbox,
                    sandbox.Limits(memory=int(args.memory_gb * 2**30),
                                   total_memory=int(args.memory_gb * 2**30),
                                   disk=args.disk_mb * 2**20), args.with_stubs,
                    users=users)


def open_writer(args: argparse.Namespace, out: Path, regrade: set[str] | None) -> Writer:
    """The writer of grades.csv and grading_log.csv, with the run's rules kept beside them;
    prints what it found in the folder."""
    writer = Writer(out, resume=args.resume, regrade=regrade)
    copies.keep_rule(out, args.copies)
    late.keep_rule(out, args.late_penalty)
    for note in writer.notes:
        print(terminal(note), file=sys.stderr)
    return writer


def announce(args: argparse.Namespace, writer: Writer, regrade: set[str] | None,
             found: list[Found], chapters: int, settings: Settings) -> list[Found]:
    """Say what this run grades (with --resume: only the notebooks not graded yet, returned)."""
    if writer.done and args.resume:
        print(f"resuming: {len(writer.done)} notebook(s) already graded", flush=True)
        found = [f for f in found if cell(display(f.relative)) not in writer.done]
    if regrade is not None:
        print(f"grading again {len(found)} notebook(s); the rows of the other "
              f"{len(writer.done)} are kept", flush=True)
    print(f"grading {sum(1 for f in found if f.path)} notebook(s) against {chapters} "
          f"chapter(s), {args.jobs} at a time, "
          f"{'in a sandbox' if settings.sandboxed else 'WITHOUT a sandbox'}", flush=True)
    return found


class Recorder:
    """Writes each outcome as it comes; with --again-alone, holds back a notebook stopped at its
    time limit beside others, to grade it again alone at the end."""

    def __init__(self, writer: Writer, found: list[Found], again_alone: bool,
                 with_stubs: bool) -> None:
        self.writer = writer
        self.by_shown = {display(f.relative): f for f in found}
        self.wanted = again_alone  # --again-alone
        self.with_stubs = with_stubs
        self.again: list[Found] = []  # stopped at the time limit, graded again alone once
        self.alone = False  # grading those again now
        self.graded = 0

    def __call__(self, outcome: Outcome) -> None:
        """Write ``outcome`` (or hold it back to grade it again alone)."""
        if outcome.timed_out and outcome.notebook in self.by_shown and self.wanted \
                and not self.alone:
            self.again.append(self.by_shown[outcome.notebook])
            print("  " + terminal(f"{outcome.notebook}: stopped after its time limit; "
                                  "graded again alone at the end"), flush=True)
            return
        if self.alone:
            outcome.problem = "; ".join(filter(None, [outcome.problem, (
                "graded again alone after it reached the time limit beside other notebooks"
                if not outcome.timed_out else "also when graded again alone")]))
        self.writer.add(outcome, self.with_stubs)
        self.graded += 1
        print("  " + terminal(summary_line(outcome)), flush=True)


def grade_and_write(args: argparse.Namespace, out: Path, writer: Writer, found: list[Found],
                    assignments: list, settings: Settings, grading: dict) -> int:
    """Grade ``found`` (time limits first, the notebooks stopped at theirs again alone last),
    writing each outcome as it comes; 130 with the .part files kept when interrupted."""
    prefix = sandbox.Prefix()
    hide = [str(prefix.root), str(args.submissions.resolve()), str(out.resolve())]
    start = time.monotonic()
    grading = {**grading, "prefix": prefix, "hide": hide}
    record = Recorder(writer, found, args.again_alone, args.with_stubs)
    previous = signal.signal(signal.SIGTERM, raise_interrupt)
    try:
        if not args.no_calibrate and any(f.path for f in found):
            settings.timeouts = time_limits(args, out, found, assignments, settings, grading)
        grade_all(found, assignments, settings, jobs=args.jobs, on_outcome=record, **grading)
        if record.again:
            print(f"grading again, one at a time, {len(record.again)} notebook(s) stopped "
                  "after their time limit", flush=True)
            record.alone = True
            grade_all(record.again, assignments, settings, jobs=1, on_outcome=record,
                      **grading)
    except KeyboardInterrupt:
        writer.close(finish=False)
        print(f"interrupted after {time.monotonic() - start:.1f} s: the {record.graded} "
              f"notebook(s) graded in this run are kept in grades.csv.part and "
              f"grading_log.csv.part, {len(found) - record.graded} are not graded; run again "
              "with --resume to grade only those", file=sys.stderr)
        return 130
    finally:
        signal.signal(signal.SIGTERM, previous)
        prefix.remove()
    for warning in writer.close():
        print(terminal(warning), file=sys.stderr)
    print(f"wrote grades.csv and grading_log.csv in {out} "
          f"({time.monotonic() - start:.1f} s)")
    return 0


def time_limits(args: argparse.Namespace, out: Path, found: list[Found], assignments: list,
                settings: Settings, grading: dict) -> dict[str, float]:
    """Each chapter's time limit (chapter name -> seconds): kept in the output folder for this
    course, machine and options, else measured on the instructor's notebook (and kept)."""
    chapters = chapters_of([f for f in found if f.path], assignments)
    key = measured_for(grading["sources"], args.jobs, args.timeout, args.calibrate_factor)
    known, when = ({}, "") if args.recalibrate else kept(out, key, args.timeout)
    todo = [c for c in chapters if c.name not in known]
    limits = [known[c.name] for c in chapters if c.name in known]
    if limits:
        print(f"time limits kept in {KEPT}, measured {when} for this course, machine "
              "and options (--recalibrate measures them again):", flush=True)
        for line in describe(limits)[1:]:
            print(terminal(line), flush=True)
    if todo:
        measured = calibrate(todo, assignments, settings, factor=args.calibrate_factor,
                             jobs=args.jobs, **grading)
        for line in describe(measured):
            print(terminal(line), flush=True)
        limits += measured
        keep(out, key, list({**known, **{m.chapter: m for m in measured}}.values()))
    return {limit.chapter: limit.limit for limit in limits}


def chosen(names: list[str], found: list[Found], out: Path) -> tuple[set[str], list[Found]]:
    """``--regrade``: (the names of the notebooks to grade again, as in the notebook column;
    those notebooks). A name is a notebook, a folder (``alice/``) or ``@FILE``, a file of
    names; ``ValueError`` names those that match nothing."""
    wanted: list[str] = []
    for name in names:
        if name.startswith("@"):
            lines = Path(name[1:]).read_text(encoding="utf-8").splitlines()
            wanted += [line.strip() for line in lines if line.strip()]
        else:
            wanted.append(name)
    if not (out / "grading_log.csv").is_file():
        raise ValueError(f"--regrade: no grading_log.csv in {out} to replace rows in")
    shown = {cell(display(f.relative)): f for f in found if f.path}
    picked: dict[str, Found] = {}
    unknown = []
    for name in wanted:
        hits = {k: f for k, f in shown.items()
                if name in (k, display(f.relative)) or (name.endswith("/") and (
                    k.startswith(name) or display(f.relative).startswith(name)))}
        if not hits:
            unknown.append(name)
        picked.update(hits)
    if unknown:
        raise ValueError("--regrade: no notebook to grade is named "
                         + ", ".join(terminal(n) for n in unknown))
    return set(picked), list(picked.values())


if __name__ == "__main__":
    sys.exit(main())
