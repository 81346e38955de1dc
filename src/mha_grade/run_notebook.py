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


def _text(error: BaseException | None, *, _str=str, _base=BaseException) -> str:
    """The error's message, short; an error whose ``str`` fails has none (the builtins it
    calls bound at import: round 41, F4)."""
    try:
        return _str(error)[:300]
    except _base:  # noqa: BLE001 (the student's own exception class)
        return ""


def grading_shell():
    """The IPython shell that runs the cells: its input transforms only (what
    ``mha_grade.plain_code`` reads), without the prefilter, whose checkers rewrite a one-line
    cell that is no Python, or is other Python, into a magic or a call the rule never sees:
    automagic (``run -mthis``, ``prun -q <statements>``: attack 45), autocall, and the
    autocallables ``exit`` and ``quit`` that autocall off leaves on (``exit <expression>``
    became ``exit(<expression>)``: attack 46). ``%magic`` with its ``%`` still runs. No
    expression's value is displayed or kept (``Out``, ``_``, ``_1``: a cell ending in
    ``type(int)``, plain there, handed ``type`` itself to the next cell as ``Out[0]``: attack
    48), and nothing is shown: grading keeps no output."""
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance(cache_size=0, ast_node_interactivity="none")
    shell.automagic = False
    shell.autocall = 0
    for checker in shell.prefilter_manager.checkers:
        checker.enabled = False
    return shell


def main() -> None:
    """Run the plan's steps (cells, and captures of the checks not called), then the hidden
    parts, talking to the grader on the original stdin and stdout only."""
    plan = json.loads(open(sys.argv[1], encoding="utf-8").read())
    requests, replies = protocol_streams()
    limit = float(plan.get("cell_timeout", 60))
    signal.signal(signal.SIGALRM, raise_cell_timeout(limit))

    from mha.exercises import serve, type_names  # before any student code runs

    fix_settings_that_name_code()
    import_only_torchs_types_by_name()
    shell = grading_shell()
    runner = Runner(requests, replies, limit, serve, type_names)
    runner.wrap_checks(plan.get("checks", {}))
    settle_threads(bool(plan.get("watch_processes")))
    # bound before the first cell: a cell that replaces the runner's attributes changes nothing
    send, run_steps, capture_hidden_parts = runner.send, runner.run_steps, \
        runner.capture_hidden_parts
    send({"started": True})
    run_steps(shell, plan["cells"])
    capture_hidden_parts()
    send({"finished": True})
    os._exit(0)


# matplotlib settings whose values name code to run: "module:function" hooks called on every new
# figure, and the programs the animation writers start. Plain code cannot set them by
# rcParams (mha_grade.plain_code), but other routes reach the same table (attack 53:
# plt.style.use({"figure.hooks": ["pickle:load"]}), then a figure whose read() served a pickle)
CODE_SETTINGS = ("figure.hooks", "animation.writer", "animation.ffmpeg_path",
                 "animation.convert_path")


def fix_settings_that_name_code() -> None:
    """Keep the CODE_SETTINGS as they are before the first cell, whatever route sets them:
    every route (rcParams, rc, rc_context, update, style.use and style.context) validates a new
    value through the class's table of validators, which gets, for these keys, one that only
    takes the value they have now. Honest notebooks never set them."""
    import matplotlib

    table = matplotlib.RcParams.validate

    def keep(key, current, validate):
        def only_current(value):
            if validate(value) != current:
                raise ValueError(f"matplotlib's {key!r} names code to run, and stays "
                                 f"{current!r} while a notebook is graded")
            return current
        return only_current

    for key in CODE_SETTINGS:
        if key in table:
            # dict's own read: rcParams' reads the backend and may resolve it (not wanted here)
            current = dict.__getitem__(matplotlib.rcParams, key)
            table[key] = keep(key, current, table[key])


def import_only_torchs_types_by_name() -> None:
    """A storage's ``type("a.b")`` imports module ``a`` by the string it is given (attack 53:
    any installed module, whose import runs its code); honest code names torch's own types
    (``"torch.DoubleTensor"``) or passes a dtype. torch's importer, private to plain code,
    takes only torch's names while the notebook runs."""
    import torch._utils

    importer = torch._utils._import_dotted_name

    def torch_only(name):
        if not isinstance(name, str) or name.split(".")[0] != "torch":
            raise ValueError(f"{name!r} is not one of torch's types (while a notebook is "
                             f"graded, only torch's own are imported by name)")
        return importer(name)

    torch._utils._import_dotted_name = torch_only


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


def settle_threads(processes: bool = False) -> None:
    """Take the threads alive now (the shell's own) as the answer watch's baseline, and the
    processes too where every other process of this user is the submission's (``processes``:
    the sandbox, or a user of its own); keep progress bars from starting threads of their
    own."""
    # the shell's own threads (IPython's history) are not the answer's (mha.answer_watch); the
    # processes alive now are the grader's (the sandbox's init, this one)
    from mha.answer_watch import allow_processes_alive_now, allow_threads_alive_now

    allow_threads_alive_now()
    if processes:
        allow_processes_alive_now()
    # a progress bar starts a monitor thread that outlives it: an honest answer after one would
    # run beside a thread not in the baseline (outside attack, round 5); tqdm runs without it
    try:
        import tqdm

        tqdm.tqdm.monitor_interval = 0
    except ImportError:
        pass


class Runner:
    """This process's side of the protocol: it runs the steps, captures the answers the graded
    checks are called with and serves the grader's requests on them.

    Everything on the request path is bound when the runner is made, before any student code
    runs: the functions below call each other, ``serve`` and the streams through their closure,
    never through an attribute of the runner, so an answer that finds the runner (a frame's
    ``f_locals["self"]``: outside attack, round 7) and replaces ``runner.serve`` or a method
    changes nothing it does. The attributes are there to be read (and for ``main``)."""

    def __init__(self, requests, replies, limit: float, serve, type_names):
        self.limit = limit
        called: set[str] = set()  # capture keys some call of a wrapper has captured
        busy: list[bool] = []  # a capture is being served: a call from inside it captures nothing
        last: dict[str, list] = {}  # capture key -> the answer its last capture took
        with_hidden: set[str] = set()  # capture keys whose checks have hidden parts
        self.called, self.busy, self.last, self.with_hidden_parts = called, busy, last, with_hidden
        write, flush, readline = replies.write, replies.flush, requests.readline
        dumps, loads = plain_json()
        set_timer, get_timer, real = signal.setitimer, signal.getitimer, signal.ITIMER_REAL
        # the builtins and names the request path calls, as locals: a cell that replaces
        # ``builtins.sorted`` or this module's ``CellTimeout`` changes nothing it does (outside
        # attack, round 41, F4)
        import builtins as b

        BaseException, eval, enumerate, list, type = b.BaseException, b.eval, b.enumerate, \
            b.list, b.type
        timeout, text_of, leave = CellTimeout, _text, os._exit

        def send(message: dict) -> None:
            """One message to the grader: a JSON line."""
            write(dumps(message, allow_nan=True).encode() + b"\n")
            flush()

        def reply_to(request: dict, table: list) -> dict:
            """The reply to one request, within the per-call limit: what the answer returned,
            or what it raised (a timeout as ``TimeoutError``)."""
            set_timer(real, limit)
            try:
                return serve(request, table) if table else {
                    "raised": {"types": ["builtins.NameError"], "message": "no answer"}}
            except timeout:
                return {"raised": {"types": ["builtins.TimeoutError"],
                                   "message": f"the call took more than {limit:.0f} s"}}
            except BaseException as error:  # noqa: BLE001 (SystemExit from the answer)
                return {"raised": {"types": type_names(error)[:20], "message": text_of(error)}}
            finally:
                set_timer(real, 0)

        def serve_until_done(table: list) -> None:
            """Answer the grader's requests on ``table[0]`` until it says ``done`` (its end of
            the pipe closed: this process ends)."""
            while True:
                line = readline(64 * 2**20)
                if not line:
                    leave(0)
                request = loads(line)
                if request.get("op") == "done":
                    break
                send(reply_to(request, table))

        def capture(key: str, table: list, missing: str = "", phase: str = "shown") -> None:
            """Say ``ready`` for ``key`` (the answer is ``table[0]``) and serve the grader's
            requests until it says ``done``. The cell's own timer is paused meanwhile: each
            request has the per-call limit, and the grader's clock bounds the whole."""
            left = get_timer(real)[0]
            set_timer(real, 0)
            busy.append(True)
            if table:
                last[key] = table
            try:
                send({"ready": key, "types": type_names(table[0])[:20], "phase": phase}
                     if table else {"ready": key, "missing": missing[:80], "phase": phase})
                serve_until_done(table)
            finally:
                busy.pop()
                if left > 0:
                    set_timer(real, left)

        def wrapper(check, key: str):
            """What the notebook calls instead of ``check``: it captures the answer (unless
            called from inside a capture) and returns ``None``."""

            @functools.wraps(check)
            def graded(answer):
                if not busy:
                    called.add(key)
                    capture(key, [answer])

            return graded

        def capture_from_namespace(shell, step: dict) -> None:
            """Capture a check's answer from what the notebook's namespace holds under the
            instructor's argument's name (``step["expr"]``), or say what is missing."""
            table: list = []
            set_timer(real, limit)
            try:
                table.append(eval(step["expr"], shell.user_ns))  # noqa: S307 (the student's code)
                missing = ""
            except BaseException as error:  # noqa: BLE001
                table, missing = [], type(error).__name__
            finally:
                set_timer(real, 0)
            capture(step["capture"], table, missing)

        def run_cell(shell, index: int, source: str) -> None:
            """Run one cell within the cell limit; tell the grader when it fails, and with
            what."""
            set_timer(real, limit)
            try:
                result = shell.run_cell(source, store_history=False)
                failed = not result.success
                error = result.error_in_exec or result.error_before_exec
            except BaseException as caught:  # noqa: BLE001 (a timeout outside the cell's code)
                failed, error = True, caught
            finally:
                set_timer(real, 0)
            if failed:
                send({"cell": index, "error": type(error).__name__[:80],
                      "message": text_of(error)})

        def run_steps(shell, steps: list[dict]) -> None:
            """Each step in order, saying when it starts: a cell, run as written, or the capture
            at the end of a check the notebook has not called."""
            for index, step in enumerate(steps):
                send({"step": index})  # the grader's own clock for this step starts now
                if "source" in step:
                    run_cell(shell, index, step["source"])
                elif not (step.get("unless_called") and step["capture"] in called):
                    capture_from_namespace(shell, step)
                # else: captured where the notebook called its check

        def capture_hidden_parts() -> None:
            """The hidden parts last, on the answers the checks took."""
            # once their inputs are in this process, no cell runs and nothing the notebook says
            # reaches a page a student sees before the due date (the grader accepts no shown
            # verdict or cell error after them)
            for key, table in list(last.items()):
                if key in with_hidden:
                    capture(key, table, phase="hidden")

        self.send, self.reply_to, self.capture, self.wrapper = send, reply_to, capture, wrapper
        self.run_steps, self.capture_hidden_parts = run_steps, capture_hidden_parts

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


def plain_json():
    """(dumps, loads) for the protocol, with everything they use bound now, before any student
    code: ``json.dumps`` reads ``json._default_encoder`` (and the encoder ``c_make_encoder``) at
    each call, and ``json.loads`` reads ``json._default_decoder``: a cell that replaced the
    encoder by one that empties ``"entered"`` hid the watch's record (outside attack, round
    41, F3). Both speak JSON as ``json.dumps(message, allow_nan=True)`` and ``json.loads`` do."""
    from _json import make_encoder  # what json.dumps encodes with, in C

    default = json.JSONEncoder().default  # raises TypeError, as json.dumps does
    strings = json.encoder.encode_basestring_ascii
    join, scan = "".join, json.JSONDecoder().scan_once  # C's scanner, its options read now
    stop, value_error, length = StopIteration, ValueError, len

    def dumps(message: dict, allow_nan: bool = True) -> str:
        # a fresh set of markers (containers being encoded) per message, as json.dumps makes
        return join(make_encoder({}, default, strings, None, ": ", ", ", False, False,
                                 allow_nan)(message, 0))

    def loads(line: bytes) -> object:
        text = line.decode("utf-8").strip()
        try:
            value, end = scan(text, 0)
        except stop:
            raise value_error("not JSON") from None
        if end != length(text):  # as json.loads: one value per line, nothing after it
            raise value_error("not one JSON value")
        return value

    return dumps, loads


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
