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
    plan = json.loads(open(sys.argv[1], encoding="utf-8").read())
    # The protocol keeps the original stdin/stdout; the student's prints go nowhere.
    requests = os.fdopen(os.dup(0), "rb")
    replies = os.fdopen(os.dup(1), "wb")
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)

    def send(message: dict) -> None:
        replies.write(json.dumps(message, allow_nan=True).encode() + b"\n")
        replies.flush()

    limit = float(plan.get("cell_timeout", 60))

    def alarm(_signum, _frame):
        raise CellTimeout(f"stopped after {limit:.0f} s")

    signal.signal(signal.SIGALRM, alarm)

    from IPython.core.interactiveshell import InteractiveShell

    from mha.exercises import serve, type_names  # before any student code runs

    shell = InteractiveShell.instance()
    called: set[str] = set()  # capture keys some call of a wrapper has captured
    busy: list[bool] = []  # a capture is being served: a call from inside it captures nothing

    last: dict[str, list] = {}  # capture key -> the answer its last capture took

    def capture(key: str, table: list, missing: str = "", phase: str = "shown") -> None:
        """Say ``ready`` for ``key`` (the answer is ``table[0]``) and serve the grader's
        requests until it says ``done``. The cell's own timer is paused meanwhile: each
        request has the per-call limit, and the grader's clock bounds the whole."""
        left = signal.getitimer(signal.ITIMER_REAL)[0]
        signal.setitimer(signal.ITIMER_REAL, 0)
        busy.append(True)
        if table:
            last[key] = table
        try:
            send({"ready": key, "types": type_names(table[0])[:20], "phase": phase} if table
                 else {"ready": key, "missing": missing[:80], "phase": phase})
            while True:
                line = requests.readline(64 * 2**20)
                if not line:
                    os._exit(0)
                request = json.loads(line)
                if request.get("op") == "done":
                    break
                signal.setitimer(signal.ITIMER_REAL, limit)
                try:
                    reply = serve(request, table) if table else {
                        "raised": {"types": ["builtins.NameError"], "message": "no answer"}}
                except CellTimeout:
                    reply = {"raised": {"types": ["builtins.TimeoutError"],
                                        "message": f"the call took more than {limit:.0f} s"}}
                except BaseException as error:  # noqa: BLE001 (SystemExit from the answer)
                    reply = {"raised": {"types": type_names(error)[:20],
                                        "message": _text(error)}}
                finally:
                    signal.setitimer(signal.ITIMER_REAL, 0)
                send(reply)
        finally:
            busy.pop()
            if left > 0:
                signal.setitimer(signal.ITIMER_REAL, left)

    def wrapper(check, key: str):
        @functools.wraps(check)
        def graded(answer):
            if not busy:
                called.add(key)
                capture(key, [answer])

        return graded

    with_hidden_parts: set[str] = set()  # capture keys whose checks have hidden parts
    for name, key in plan.get("checks", {}).items():
        module, _, check = name.partition(".")
        where = importlib.import_module(f"mha.checks.{module}")
        watch_before_students_code(getattr(where, check))
        if any(part.hidden for part in getattr(getattr(where, check).checker, "parts", ())):
            with_hidden_parts.update({key, f"stub:{key}"})
        setattr(where, check, wrapper(getattr(where, check), key))

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
    send({"started": True})
    for index, step in enumerate(plan["cells"]):
        send({"step": index})  # the grader's own clock for this step starts now
        if "source" in step:
            signal.setitimer(signal.ITIMER_REAL, limit)
            try:
                result = shell.run_cell(step["source"], store_history=False)
                failed = not result.success
                error = result.error_in_exec or result.error_before_exec
            except BaseException as caught:  # noqa: BLE001 (a timeout outside the cell's code)
                failed, error = True, caught
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
            if failed:
                send({"cell": index, "error": type(error).__name__[:80],
                      "message": _text(error)})
            continue
        if step.get("unless_called") and step["capture"] in called:
            continue  # captured where the notebook called its check
        table: list = []
        signal.setitimer(signal.ITIMER_REAL, limit)
        try:
            table.append(eval(step["expr"], shell.user_ns))  # noqa: S307 (the student's own code)
            missing = ""
        except BaseException as error:  # noqa: BLE001
            table, missing = [], type(error).__name__
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        capture(step["capture"], table, missing)
    # The hidden parts last, on the answers the checks took: once their inputs are in this
    # process, no cell runs and nothing the notebook says reaches a page a student sees
    # before the due date (the grader accepts no shown verdict or cell error after them)
    for key, table in list(last.items()):
        if key in with_hidden_parts:
            capture(key, table, phase="hidden")
    send({"finished": True})
    os._exit(0)


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
