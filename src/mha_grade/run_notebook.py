"""Run one submission's cells inside the sandbox and answer the grader's requests.

    python run_notebook.py PLAN.json     (started by the grader: mha_grade.run, mha_grade.sandbox)

Everything in this process is the student's: their code runs here, in an IPython shell (the
engine a Jupyter kernel runs cells with), and may patch anything, this file included. So it
sends the grader nothing but plain data (JSON lines on its original stdout), and the grader
trusts none of it: it computes every verdict in its own process, from the values the student's
functions return for inputs it draws.

The plan lists the submission's code cells, run as they are, and the graded checks
(``mha.checks.ch01.stable_softmax``: its capture key). Before any student code runs, each graded
check is replaced by a thin wrapper: whenever the notebook calls it, in whatever syntax (a
``%%time`` cell, ``print(check(f))``, ``from mha.checks import ch01``, a one-liner), the wrapper
*captures* its argument at that moment: this process says ``ready`` and serves the grader's
requests (``mha.exercises.serve``: call the answer on these inputs, read an attribute, ...) until
the grader says ``done``; the cell then goes on. The in-notebook check itself is not run (the
call returns ``None``). The grader keeps the last capture of each check. At the end, a check the
notebook never called (its call deleted, or the wrapper replaced by the student's code) is
captured from what the notebook's namespace holds under the instructor's argument's name.

A capture runs the check's shown parts only (``"phase": "shown"``). The hidden parts run after
the last cell and the last such capture, on the answer each check's last capture took
(``"phase": "hidden"``): their inputs reach this process only when nothing the notebook does
afterwards (a cell that raises with them, a later check's message) can be shown to a student
before the due date.
"""

from __future__ import annotations

import functools
import importlib
import json
import os
import signal
import sys


class CellTimeout(KeyboardInterrupt):
    """A cell (or a call of the student's function) ran past its time limit."""


def _text(error: BaseException | None) -> str:
    """The error's message, short; an error whose ``str`` fails has none."""
    try:
        return str(error)[:300]
    except BaseException:  # noqa: BLE001 (the student's own exception class)
        return ""


def main() -> None:
    """Run the plan's steps (cells, and captures of the checks not called), then the hidden
    parts, talking to the grader on the original stdin and stdout only."""
    plan = json.loads(open(sys.argv[1], encoding="utf-8").read())
    requests, replies = protocol_streams()
    limit = float(plan.get("cell_timeout", 60))
    signal.signal(signal.SIGALRM, raise_cell_timeout(limit))

    from IPython.core.interactiveshell import InteractiveShell

    from mha.exercises import serve, type_names  # before any student code runs

    shell = InteractiveShell.instance()
    runner = Runner(requests, replies, limit, serve, type_names)
    runner.wrap_checks(plan.get("checks", {}))
    settle_threads()
    runner.send({"started": True})
    runner.run_steps(shell, plan["cells"])
    runner.capture_hidden_parts()
    runner.send({"finished": True})
    os._exit(0)


def protocol_streams() -> tuple:
    """(requests, replies): the original stdin and stdout, kept for the protocol; file
    descriptors 0, 1 and 2 then go to /dev/null, so the student's prints go nowhere."""
    requests = os.fdopen(os.dup(0), "rb")
    replies = os.fdopen(os.dup(1), "wb")
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    return requests, replies


def raise_cell_timeout(limit: float):
    """The SIGALRM handler: the cell (or call) running is stopped after ``limit`` s."""

    def alarm(_signum, _frame):
        raise CellTimeout(f"stopped after {limit:.0f} s")

    return alarm


def settle_threads() -> None:
    """Take the threads alive now (the shell's own) as the answer watch's baseline, and keep
    progress bars from starting threads of their own."""
    # the shell's own threads (IPython's history) are not the answer's (mha.answer_watch)
    from mha.answer_watch import allow_threads_alive_now

    allow_threads_alive_now()
    # a progress bar starts a monitor thread that outlives it: an honest answer after one would
    # run beside a thread not in the baseline (outside attack, round 5); tqdm runs without it
    try:
        import tqdm

        tqdm.tqdm.monitor_interval = 0
    except ImportError:
        pass


class Runner:
    """This process's side of the protocol: it runs the steps, captures the answers the graded
    checks are called with and serves the grader's requests on them."""

    def __init__(self, requests, replies, limit: float, serve, type_names):
        self.requests, self.replies, self.limit = requests, replies, limit
        self.serve, self.type_names = serve, type_names  # taken before any student code runs
        self.called: set[str] = set()  # capture keys some call of a wrapper has captured
        # a capture is being served: a call from inside it captures nothing
        self.busy: list[bool] = []
        self.last: dict[str, list] = {}  # capture key -> the answer its last capture took
        self.with_hidden_parts: set[str] = set()  # capture keys whose checks have hidden parts

    def send(self, message: dict) -> None:
        """One message to the grader: a JSON line."""
        self.replies.write(json.dumps(message, allow_nan=True).encode() + b"\n")
        self.replies.flush()

    def wrap_checks(self, checks: dict[str, str]) -> None:
        """Replace each graded check (``"ch01.stable_softmax"`` -> its capture key) by a
        capturing wrapper, its references watched first; note those with hidden parts."""
        for name, key in checks.items():
            module, _, check = name.partition(".")
            where = importlib.import_module(f"mha.checks.{module}")
            watch_before_students_code(getattr(where, check))
            if any(part.hidden for part in getattr(getattr(where, check).checker, "parts", ())):
                self.with_hidden_parts.update({key, f"stub:{key}"})
            setattr(where, check, self.wrapper(getattr(where, check), key))

    def wrapper(self, check, key: str):
        """What the notebook calls instead of ``check``: it captures the answer (unless called
        from inside a capture) and returns ``None``."""

        @functools.wraps(check)
        def graded(answer):
            if not self.busy:
                self.called.add(key)
                self.capture(key, [answer])

        return graded

    def run_steps(self, shell, steps: list[dict]) -> None:
        """Each step in order, saying when it starts: a cell, run as written, or the capture at
        the end of a check the notebook has not called."""
        for index, step in enumerate(steps):
            self.send({"step": index})  # the grader's own clock for this step starts now
            if "source" in step:
                self.run_cell(shell, index, step["source"])
            elif not (step.get("unless_called") and step["capture"] in self.called):
                self.capture_from_namespace(shell, step)
            # else: captured where the notebook called its check

    def run_cell(self, shell, index: int, source: str) -> None:
        """Run one cell within the cell limit; tell the grader when it fails, and with what."""
        signal.setitimer(signal.ITIMER_REAL, self.limit)
        try:
            result = shell.run_cell(source, store_history=False)
            failed = not result.success
            error = result.error_in_exec or result.error_before_exec
        except BaseException as caught:  # noqa: BLE001 (a timeout outside the cell's code)
            failed, error = True, caught
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        if failed:
            self.send({"cell": index, "error": type(error).__name__[:80],
                       "message": _text(error)})

    def capture_from_namespace(self, shell, step: dict) -> None:
        """Capture a check's answer from what the notebook's namespace holds under the
        instructor's argument's name (``step["expr"]``), or say what is missing."""
        table: list = []
        signal.setitimer(signal.ITIMER_REAL, self.limit)
        try:
            table.append(eval(step["expr"], shell.user_ns))  # noqa: S307 (the student's own code)
            missing = ""
        except BaseException as error:  # noqa: BLE001
            table, missing = [], type(error).__name__
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        self.capture(step["capture"], table, missing)

    def capture_hidden_parts(self) -> None:
        """The hidden parts last, on the answers the checks took."""
        # once their inputs are in this process, no cell runs and nothing the notebook says
        # reaches a page a student sees before the due date (the grader accepts no shown
        # verdict or cell error after them)
        for key, table in list(self.last.items()):
            if key in self.with_hidden_parts:
                self.capture(key, table, phase="hidden")

    def capture(self, key: str, table: list, missing: str = "", phase: str = "shown") -> None:
        """Say ``ready`` for ``key`` (the answer is ``table[0]``) and serve the grader's
        requests until it says ``done``. The cell's own timer is paused meanwhile: each
        request has the per-call limit, and the grader's clock bounds the whole."""
        left = signal.getitimer(signal.ITIMER_REAL)[0]
        signal.setitimer(signal.ITIMER_REAL, 0)
        self.busy.append(True)
        if table:
            self.last[key] = table
        try:
            self.send({"ready": key, "types": self.type_names(table[0])[:20], "phase": phase}
                      if table else {"ready": key, "missing": missing[:80], "phase": phase})
            self.serve_until_done(table)
        finally:
            self.busy.pop()
            if left > 0:
                signal.setitimer(signal.ITIMER_REAL, left)

    def serve_until_done(self, table: list) -> None:
        """Answer the grader's requests on ``table[0]`` until it says ``done`` (its end of the
        pipe closed: this process ends)."""
        while True:
            line = self.requests.readline(64 * 2**20)
            if not line:
                os._exit(0)
            request = json.loads(line)
            if request.get("op") == "done":
                break
            self.send(self.reply_to(request, table))

    def reply_to(self, request: dict, table: list) -> dict:
        """The reply to one request, within the per-call limit: what the answer returned, or
        what it raised (a timeout as ``TimeoutError``)."""
        signal.setitimer(signal.ITIMER_REAL, self.limit)
        try:
            return self.serve(request, table) if table else {
                "raised": {"types": ["builtins.NameError"], "message": "no answer"}}
        except CellTimeout:
            return {"raised": {"types": ["builtins.TimeoutError"],
                               "message": f"the call took more than {self.limit:.0f} s"}}
        except BaseException as error:  # noqa: BLE001 (SystemExit from the answer)
            return {"raised": {"types": self.type_names(error)[:20], "message": _text(error)}}
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)


def watch_before_students_code(check) -> None:
    """Find the code objects of ``check``'s references now, before the notebook can rebind a
    name (``mha.answer_watch`` keeps them), and load torch's dispatch modes if it forbids ops
    (their first use takes seconds, which no answer's call should pay)."""
    from mha.answer_watch import observe, watched_codes

    watch = getattr(check.checker, "watch", None) or {}
    watched_codes(tuple(watch.get("references", ())))
    if watch.get("ops"):
        observe(lambda: None, (), tuple(watch["ops"]))


if __name__ == "__main__":
    main()
