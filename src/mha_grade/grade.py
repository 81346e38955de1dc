"""Grade submitted notebooks in a sandbox, with verdicts computed outside it.

    mha-grade grade SUBMISSIONS [--jobs 2] [--timeout 300] [--cell-timeout 120]
                          [--out FOLDER] [--seed N] [--no-sandbox]

Every ``*.ipynb`` under SUBMISSIONS (any depth, e.g. one folder per student) is matched to its
chapter by file name (``.../01_attention_recap.ipynb``, ``alice_01_attention_recap.ipynb``) or,
failing that, by the exercise labels it contains. For each submission:

1. its cells are read (the submission's own check cells are dropped) and, where each of the
   instructor's check cells belongs, a *capture* of the answer the check is called with;
2. the cells run in a bubblewrap sandbox (mha_grade.sandbox, mha_grade.run_notebook): no network,
   no view of this machine's files, processes or environment, limits on memory, processes, disk
   and time;
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
from mha_grade import ROOT, sandbox
from mha_grade.assignments import load_assignment
from mha_grade.compare import Outcome
from mha_grade.escape import cell, display, terminal
from mha_grade.exercise_format import chapter_notebooks
from mha_grade.outputs import Writer, summary_line
from mha_grade.run import CELL_GRACE, Settings
from mha_grade.submissions import find_submissions
from mha_grade.workers import _interrupt, grade_all


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(prog="mha-grade grade", description=__doc__.splitlines()[0])
    parser.add_argument("submissions", type=Path, help="folder of submitted notebooks")
    parser.add_argument("--out", type=Path, default=None,
                        help="folder for grades.csv and grading_log.csv (default: SUBMISSIONS)")
    parser.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1),
                        help="submissions graded at the same time (default 2)")
    parser.add_argument("--timeout", type=float, default=300.0,
                        help="seconds one notebook may run in all (default 300)")
    parser.add_argument("--cell-timeout", type=float, default=120.0,
                        help="seconds one cell or call may run before it is interrupted "
                             f"(default 120; stopped from outside {CELL_GRACE:.0f} s later)")
    parser.add_argument("--memory-gb", type=float, default=6.0,
                        help="address space per process in the sandbox, GB (default 6)")
    parser.add_argument("--disk-mb", type=int, default=512,
                        help="bytes a submission may write in all, MB (default 512)")
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
    parser.add_argument("--with-stubs", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    folder = args.submissions
    if not folder.is_dir():
        parser.error(f"{folder} is not a folder")
    out = args.out or folder
    out.mkdir(parents=True, exist_ok=True)
    if args.jobs > (os.cpu_count() or 1):
        print(f"warning: --jobs {args.jobs} is more than the {os.cpu_count()} CPU(s): each "
              "sandbox is bounded to one CPU (as root), but then they share them, and a "
              "notebook that uses its whole CPU slows its neighbours", file=sys.stderr)
    if not args.no_sandbox:
        why = sandbox.unavailable()
        if why:
            print(f"cannot grade untrusted notebooks here: {why}.\nGrade in a Linux machine "
                  "or container with bubblewrap, or pass --no-sandbox for notebooks you "
                  "trust.", file=sys.stderr)
            return 2
    seed = args.seed if args.seed is not None else secrets.randbits(48)
    set_grading_seed(seed)
    sources = [p.resolve() for p in (args.source or chapter_notebooks(ROOT))]
    assignments = [a for a in (load_assignment(p) for p in sources) if a.exercises]
    found = find_submissions(folder, assignments, out)
    settings = Settings(args.timeout, args.cell_timeout, not args.no_sandbox,
                        sandbox.Limits(memory=int(args.memory_gb * 2**30),
                                       disk=args.disk_mb * 2**20), args.with_stubs)
    writer = Writer(out, resume=args.resume)
    for note in writer.notes:
        print(terminal(note), file=sys.stderr)
    if writer.done:
        print(f"resuming: {len(writer.done)} notebook(s) already graded", flush=True)
        found = [f for f in found if cell(display(f.relative)) not in writer.done]
    print(f"grading {sum(1 for f in found if f.path)} notebook(s) against {len(assignments)} "
          f"chapter(s), {args.jobs} at a time, "
          f"{'in a sandbox' if settings.sandboxed else 'WITHOUT a sandbox'}", flush=True)
    prefix = sandbox.Prefix()
    hide = [str(prefix.root), str(folder.resolve()), str(out.resolve())]
    start = time.monotonic()
    graded = 0

    def record(outcome: Outcome) -> None:
        nonlocal graded
        writer.add(outcome, args.with_stubs)
        graded += 1
        print("  " + terminal(summary_line(outcome)), flush=True)

    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        grade_all(found, assignments, settings, seed=seed, sources=sources, prefix=prefix,
                  hide=hide, jobs=args.jobs, on_outcome=record)
    except KeyboardInterrupt:
        writer.close(finish=False)
        print(f"interrupted after {time.monotonic() - start:.1f} s: the {graded} notebook(s) "
              f"graded in this run are kept in grades.csv.part and grading_log.csv.part, "
              f"{len(found) - graded} are not graded; run again with --resume to grade only "
              "those", file=sys.stderr)
        return 130
    finally:
        signal.signal(signal.SIGTERM, previous)
        prefix.remove()
    for warning in writer.close():
        print(terminal(warning), file=sys.stderr)
    print(f"wrote grades.csv and grading_log.csv in {out} "
          f"({time.monotonic() - start:.1f} s)")
    return 0



if __name__ == "__main__":
    sys.exit(main())
