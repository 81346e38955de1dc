"""Grading processes: each submission's messages are parsed in an interpreter of its own, so that
one sandbox's flood slows no other's grading; Ctrl-C and SIGTERM stop them all."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
import traceback
from dataclasses import asdict
from pathlib import Path

import torch

from mha.exercises import set_grading_seed
from mha_grade import sandbox
from mha_grade.assignments import Assignment, load_assignment
from mha_grade.compare import Outcome, mark_not_graded
from mha_grade.escape import display
from mha_grade.run import (
    RUNNING,
    Sanitiser,
    Settings,
    grade_one,
)
from mha_grade.submissions import (
    Found,
    by_name,
)

# A grading process: ``python -c WORKER``, with the folder it starts in taken off ``sys.path``
# (it may be the class folder: nothing there may shadow a module).
WORKER = ("import sys; del sys.path[0]; from mha_grade.workers import main; "
          "sys.exit(main())")




def raise_interrupt(_signum, _frame):
    """A signal handler (SIGTERM) that stops the run as Ctrl-C does."""
    raise KeyboardInterrupt


def outcome_data(outcome: Outcome) -> dict:
    data = asdict(dataclasses.replace(outcome, assignment=None))
    data["assignment"] = outcome.assignment.name if outcome.assignment else None
    return data


def outcome_from(data: dict, assignments: dict[str, Assignment]) -> Outcome:
    data = dict(data)
    data["assignment"] = assignments.get(data["assignment"]) if data["assignment"] else None
    return Outcome(**data)


def worker(stdin, stdout) -> int:
    """A grading process (``WORKER``): its first line is the run's configuration,
    then one submission per line in, one outcome per line out. SIGTERM stops the sandbox it runs
    and ends it."""
    signal.signal(signal.SIGTERM, raise_interrupt)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides; it sends SIGTERM
    config = json.loads(stdin.readline())
    torch.set_num_threads(1)  # the checks' own work: one CPU, as each sandbox gets
    set_grading_seed(config["seed"])
    assignments = [load_assignment(Path(p)) for p in config["sources"]]
    assignments = [a for a in assignments if a.exercises]
    prefix = sandbox.Prefix.existing(Path(config["prefix"]))
    user = sandbox.User(**config["user"]) if config["user"] else None
    settings = Settings(config["timeout"], config["cell_timeout"], config["sandboxed"],
                        sandbox.Limits(**config["limits"]), config["with_stubs"], user=user,
                        timeouts=config["timeouts"])
    clean = Sanitiser(config["hide"])
    try:
        for line in stdin:
            job = json.loads(line)
            try:
                outcome = grade_one(job["relative"], Path(job["path"]), assignments, prefix,
                                    settings, job["problem"], clean)
            except Exception as error:  # the grader's own failure: report it, grade the rest
                outcome = Outcome(display(job["relative"]),
                                  by_name(job["relative"], assignments),
                                  problem=f"the grader failed on it ({type(error).__name__})")
                mark_not_graded(outcome, "not graded: the grader failed on this notebook")
                print(f"  grader error on {display(job['relative'])}: {error!r}",
                      file=sys.stderr)
                traceback.print_exc()
            stdout.write(json.dumps(outcome_data(outcome)).encode() + b"\n")
            stdout.flush()
    except KeyboardInterrupt:
        RUNNING.stop_all()
        return 130
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # nothing left to clean up
    return 0


class Workers:
    """``jobs`` grading processes (``WORKER``), each grading one submission at a
    time. Each parses its own sandbox's messages, so a submission that floods its channel slows
    its own grading process only; the grader's main process reads one short line per notebook."""

    def __init__(self, jobs: int, config: dict, users: list[dict] | None = None):
        self.jobs, self.config = max(1, jobs), config
        self.users = users or []  # one per grading process, if given (as root: its own uid)
        self.stopping = threading.Event()
        self.lock = threading.Lock()
        self.processes: list[subprocess.Popen] = []

    def _spawn(self, index: int) -> subprocess.Popen:
        process = subprocess.Popen(
            [sys.executable, "-c", WORKER],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, start_new_session=True)
        config = self.config | ({"user": self.users[index]} if self.users else {})
        process.stdin.write(json.dumps(config).encode() + b"\n")
        process.stdin.flush()
        with self.lock:
            self.processes.append(process)
        return process

    def _drive(self, index: int, todo: queue.Queue, done: queue.Queue) -> None:
        process = None
        while not self.stopping.is_set():
            try:
                item = todo.get_nowait()
            except queue.Empty:
                break
            line = b""
            try:
                if process is None or process.poll() is not None:
                    process = self._spawn(index)
                process.stdin.write(json.dumps({"relative": item.relative, "path": str(
                    item.path), "problem": item.problem}).encode() + b"\n")
                process.stdin.flush()
                line = process.stdout.readline()
            except (OSError, ValueError):
                pass
            if self.stopping.is_set():
                break
            done.put((item, line))
            if not line:
                process = None  # it died: the next submission gets a fresh one
        if process is not None:
            with contextlib.suppress(OSError):
                process.stdin.close()

    def run(self, items: list[Found]):
        """(item, outcome data or None if its grading process died), as each finishes."""
        todo: queue.Queue = queue.Queue()
        for item in items:
            todo.put(item)
        done: queue.Queue = queue.Queue()
        for index in range(min(self.jobs, len(items))):
            threading.Thread(target=self._drive, args=(index, todo, done), daemon=True).start()
        for _ in items:
            while True:
                try:
                    item, line = done.get(timeout=0.2)  # short waits: Ctrl-C gets through
                    break
                except queue.Empty:
                    continue
            try:
                yield item, json.loads(line) if line else None
            except ValueError:
                yield item, None

    def stop(self, wait: float = 5.0, interrupt: bool = True) -> None:
        """End every grading process: SIGTERM (each stops its sandbox), then SIGKILL. Without
        ``interrupt``, idle ones are let go first (they end when their input ends)."""
        self.stopping.set()
        with self.lock:
            processes = list(self.processes)
        for process in processes:
            with contextlib.suppress(OSError):
                if interrupt:
                    process.send_signal(signal.SIGTERM)
                else:
                    process.stdin.close()
        end = time.monotonic() + (wait if interrupt else 6 * wait)
        for process in processes:
            try:
                process.wait(timeout=max(0.1, end - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(OSError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait()
            for stream in (process.stdin, process.stdout):
                with contextlib.suppress(OSError):
                    stream.close()


def grade_all(found: list[Found], assignments: list[Assignment], settings: Settings, *,
              seed: int, sources: list[Path], prefix: sandbox.Prefix, hide: list[str],
              jobs: int, on_outcome) -> None:
    """Grade every notebook of ``found`` (the others get their row at once), calling
    ``on_outcome`` in this thread as each finishes. ``KeyboardInterrupt`` (Ctrl-C, or SIGTERM
    where the caller maps it so) stops every grading process and its sandbox within seconds,
    then propagates: outcomes not handed over are not graded."""
    named = {a.name: a for a in assignments}
    for item in found:
        if item.path is None:
            on_outcome(Outcome(display(item.relative), None, problem=item.problem))
    gradable = [f for f in found if f.path is not None]
    if not gradable:
        return
    user = settings.user
    workers = Workers(jobs, {
        "seed": seed, "sources": [str(p) for p in sources], "prefix": str(prefix.root),
        "timeout": settings.timeout, "timeouts": settings.timeouts,
        "cell_timeout": settings.cell_timeout,
        "sandboxed": settings.sandboxed, "limits": asdict(settings.limits),
        "with_stubs": settings.with_stubs, "hide": hide,
        "user": asdict(user) if user else None}, [asdict(u) for u in settings.users[:jobs]])
    try:
        for item, data in workers.run(gradable):
            if data is None:
                outcome = Outcome(display(item.relative), by_name(item.relative, assignments),
                                  problem="the grader failed on it (its grading process died)")
                mark_not_graded(outcome, "not graded: the grader failed on this notebook")
            else:
                outcome = outcome_from(data, named)
            on_outcome(outcome)
    except BaseException:
        # a second Ctrl-C would cut stopping the grading processes short; then SIGINT as it
        # was (a background job's stays ignored; None: set outside Python, left alone)
        previous = signal.getsignal(signal.SIGINT)
        try:
            if previous is not None:
                signal.signal(signal.SIGINT, signal.SIG_IGN)
            workers.stop()
        finally:
            if previous is not None:
                signal.signal(signal.SIGINT, previous)
        raise
    workers.stop(interrupt=False)



def _private_stdout():
    """The worker's replies go to the original stdout; anything printed goes to stderr."""
    replies = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    return replies



def main() -> int:
    """A grading process's entry point (see ``WORKER``)."""
    return worker(sys.stdin.buffer, _private_stdout())
