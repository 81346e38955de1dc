"""Running one submission: the plan of its steps, the sandbox it runs in, the channel to it.

At each capture the grader runs the chapter's check **in its own process** (mha.exercises):
the check sends inputs as plain data and reads the answer's results back as plain data."""

from __future__ import annotations

import functools
import json
import os
import pkgutil
import queue
import re
import shutil
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from mha.exercises import (
    Channel,
    ProtocolError,
    Result,
    dumps,
    evaluate,
    loads,
    seed_of_call,
    with_hidden,
)
from mha_grade import ROOT, sandbox
from mha_grade.assignments import Assignment
from mha_grade.compare import (
    TIMED_OUT,
    Outcome,
    leave_to_instructor,
    mark_not_graded,
    score,
)
from mha_grade.escape import display
from mha_grade.exercise_format import source
from mha_grade.files import read_regular
from mha_grade.flags import MAX_READ, flags
from mha_grade.plain_code import why_not_plain
from mha_grade.student_edition import stub_regions
from mha_grade.submissions import (
    MAX_NOTEBOOK_BYTES,
    by_name,
    chapter_of,
    read_notebook,
)

# One line from the sandbox. The largest an honest chapter sends is 0.66 MB (chapter 2; the
# others 0.02 MB or less, measured on every chapter's solutions in November 2026); a longer line
# stops that notebook, and so do more than MAX_JUNK_LINES lines that are no message. Each
# submission's lines are parsed by its own grading process (see Workers), so a flood costs its
# neighbours nothing but the CPU time any busy notebook takes.
MAX_MESSAGE_BYTES = 4 * 2**20
MAX_JUNK_LINES = 16  # lines that are no message: the runner sends none, so this is on purpose
MAX_ERRORS_COUNTED = 10_000
# The per-cell limit is kept in the sandbox (SIGALRM: the cell is interrupted, the notebook goes
# on) and, as a backstop, here: a step that sends nothing for this much longer is stopped.
CELL_GRACE = 10.0
# CPU seconds the grading process may spend on one submission's messages and checks: the course's
# own notebooks take under half a second each; a flood of messages is stopped here, not left to
# take a neighbour's CPU for the notebook's whole time limit
GRADER_CPU_SECONDS = 10.0

def graded_checks(assignment: Assignment) -> dict[str, str]:
    """The checks the sandbox replaces by capturing wrappers ("ch01.stable_softmax"), each with
    its capture key (the instructor's check cell's index)."""
    return {f"{module}.{check}": str(index) for exercise in assignment.exercises
            for index, (module, check) in zip(exercise.checks, exercise.calls, strict=True)}


def plan(nb: dict, assignment: Assignment, *, with_stubs: bool = False) -> list[dict]:
    """The steps the sandbox runs: the submission's code cells in order, as they are, then a
    *capture* of each check the notebook never called (see run_notebook: a check is captured
    by its wrapper when it is called, whatever the syntax of the call; one the notebook never
    calls, its call deleted, is captured at the end with everything the notebook defined)."""
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]

    def capture(index: int, prefix: str = "") -> dict:
        return {"capture": f"{prefix}{index}", "expr": assignment.captures[index]}

    # each with its place as the student sees it: the n-th code cell
    steps: list[dict] = [{"source": c["source"], "at": n + 1} for n, c in enumerate(code)
                         if c["source"].strip()]
    steps.extend(capture(i) | {"unless_called": True} for i in sorted(assignment.info))
    if with_stubs:  # the student edition's stub of every checked exercise, in the same kernel
        for exercise in assignment.exercises:
            if exercise.checks:
                for index in exercise.marked:
                    steps.append({"source": stub_regions(source(assignment.nb["cells"][index]))})
                steps.extend(capture(i, prefix="stub:") for i in exercise.checks)
    return steps


# The honest ways of calling a graded check, which the "patches the grading" flag is not about:
# ``mha.checks.ch01.x(...)`` and importing the chapter's checks module or its checks by name.
CHECK_IMPORT = re.compile(r"(?m)^[ \t]*(?:from\s+mha\.checks\s+import\s+(\w+)|"
                          r"import\s+mha\.checks\.(\w+)|"
                          r"from\s+mha\.checks\.(\w+)\s+import\s+(\w+))"
                          r"(?:\s+as\s+(\w+))?[ \t]*(?:#.*)?$")
CHECK_CALL = re.compile(r"\bmha\.checks\.(\w+)\.(\w+)(?=\s*\()")


@functools.cache
def checks_modules() -> frozenset[str]:
    """The names of the modules of ``mha.checks`` (ch01, ...), as the grader has them."""
    import mha.checks

    return frozenset(m.name for m in pkgutil.iter_modules(mha.checks.__path__))


def without_check_calls(nb: dict, assignment: Assignment) -> dict:
    """``nb`` with its calls of the chapter's graded checks (and imports of its checks module)
    blanked, for the flags: calling a check is what the notebook is asked to do, in whatever
    syntax. Anything else that names ``mha.checks`` (assigning to a check, ...) is kept."""
    known = set(graded_checks(assignment))
    modules = {name.split(".")[0] for name in known}

    def call(m: re.Match) -> str:
        # a module that does not exist (a typo: mha.checks.ch4) raises, and patches nothing
        # (instructor 48: an honest notebook flagged "patches the grading")
        real = m.group(1) in checks_modules()
        return "check" if f"{m.group(1)}.{m.group(2)}" in known or not real else m.group(0)

    def imported(m: re.Match) -> str:
        name = m.group(1) or m.group(2) or m.group(3)
        return "" if name in modules or name not in checks_modules() else m.group(0)

    def blanked(source: str) -> str:
        # a name the cell binds to a checks module or check keeps its meaning: assigning to
        # it or through it patches the grading, and is spelled out so the flag sees it
        if len(source) > MAX_READ:  # not read by the flags, and flagged for its size
            return source
        aliases = {m.group(5) or m.group(4) or m.group(1) or m.group(2) or m.group(3)
                   for m in CHECK_IMPORT.finditer(source)}
        source = CHECK_IMPORT.sub(imported, CHECK_CALL.sub(call, source))
        if len(aliases) > 32:  # no honest cell imports so many checks: left for the flag
            return "mha.checks  # imports of many checks\n" + source
        if aliases:  # one pass for all of them: a pass per alias is quadratic
            either = "|".join(sorted(aliases, key=len, reverse=True))
            source = re.sub(rf"\b(?<!\.)({either})\b(?=(\.\w+)+\s*=[^=])",
                            r"mha.checks.\1", source)
        return source

    cells = [c if c["cell_type"] != "code" or c["source"] in assignment.cells else
             c | {"source": blanked(c["source"])} for c in nb["cells"]]
    return nb | {"cells": cells}


# ---------------------------------------------------------------------------------------------
# Talking to the sandbox

class Messages:
    """Lines from the sandbox's stdout, read by a thread, handed out with a deadline."""

    def __init__(self, stream):
        self.queue: queue.Queue = queue.Queue(maxsize=16)  # at most 16 lines held in memory
        self.too_long = False
        self.junk = 0
        self.thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self.thread.start()

    def _read(self, stream) -> None:
        try:
            while True:
                line = stream.readline(MAX_MESSAGE_BYTES)
                if not line.endswith(b"\n"):
                    self.too_long = len(line) >= MAX_MESSAGE_BYTES
                    break  # the end, or a line too long to be a message: the notebook stops
                self.queue.put(line)
        except (OSError, ValueError):
            pass
        self.queue.put(None)

    def next(self, deadline: float) -> dict | None:
        """The next message, ``None`` at the end or at the deadline; junk is skipped, up to
        ``MAX_JUNK_LINES`` lines, and then the end."""
        while self.junk <= MAX_JUNK_LINES:
            try:
                line = self.queue.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                return None
            if line is None:
                self.queue.put(None)
                return None
            try:
                return loads(line)
            except ProtocolError:
                self.junk += 1  # parsing junk is work: a flood ends at the loop's condition
        return None


class SandboxChannel(Channel):
    """The check's end of the pipe to one sandbox (see mha.exercises.Channel)."""

    def __init__(self, process, messages: Messages, deadline: float, call_limit: float):
        self.process, self.messages, self.deadline = process, messages, deadline
        self.call_limit = call_limit  # one call of the answer, kept from here

    def request(self, message: dict) -> dict:
        try:
            self.process.stdin.write(dumps(message))
            self.process.stdin.flush()
        except (OSError, ValueError):
            raise ProtocolError("the notebook stopped") from None
        reply = self.messages.next(min(self.deadline, time.monotonic() + self.call_limit))
        if reply is None:
            raise ProtocolError("no reply before the time limit, or the notebook stopped")
        return reply


class Sanitiser:
    """Feedback goes to students: no path of the grader's machine, no value of its environment."""

    def __init__(self, extra: list[str]):
        values = [v for k, v in os.environ.items() if len(v) >= 6 and v not in ("/usr/bin",)]
        paths = [str(ROOT), str(Path.home()), tempfile.gettempdir(), sys.prefix,
                 sys.base_prefix, *extra]
        self.secrets = sorted({s for s in values + paths if s and len(s) >= 4}, key=len,
                              reverse=True)

    def __call__(self, text: str) -> str:
        for secret in self.secrets:
            text = text.replace(secret, "<hidden>")
        return " ".join("".join(c if c.isprintable() else " " for c in text).split())[:500]


def ordinal(n: int) -> str:
    """1st, 2nd, 3rd, 4th, ..., 11th, 12th, 13th, ..., 21st."""
    end = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{end}"


def first_error(steps: list[dict], message: dict) -> str:
    """The grading log's ``first_error``: where the first failing cell is, as the student sees
    it (the n-th code cell, and how it starts), and what it raised. The type and message come
    from the sandbox: the student's own account of their error, shown to them and the
    instructor, never read as a verdict."""
    index = message["cell"]
    if not 0 <= index < len(steps) or "source" not in steps[index]:
        return ""
    step = steps[index]
    kind = message.get("error") if isinstance(message.get("error"), str) else "an error"
    text = message.get("message") if isinstance(message.get("message"), str) else ""
    line = next((s.strip() for s in step["source"].splitlines() if s.strip()), "")
    where = f"the {ordinal(step['at'])} code cell" if "at" in step else "a cell"
    start = f" ({line[:60]}{'...' if len(line) > 60 else ''})" if line else ""
    return f"{where}{start}: {kind[:80]}" + (f": {text[:200]}" if text else "")


@dataclass
class Settings:
    timeout: float
    cell_timeout: float
    sandboxed: bool
    limits: sandbox.Limits
    with_stubs: bool = False
    user: sandbox.User | None = None  # run submissions as this user (the grader is root)
    # chapter name -> seconds one of its notebooks may run (calibrated: mha_grade.limits);
    # ``timeout`` for a chapter not in it
    timeouts: dict[str, float] = field(default_factory=dict)
    # or one user per grading process (local grading as root: sandbox.reserve_users)
    users: list[sandbox.User] = field(default_factory=list)

    def timeout_of(self, assignment: Assignment) -> float:
        return self.timeouts.get(assignment.name, self.timeout)



def joined(*parts: str | None) -> str:
    """The problems of one notebook as one field: the parts that say something, "; " apart."""
    return "; ".join(filter(None, parts))


def grade_one(relative: str, path: Path, assignments: list[Assignment], prefix: sandbox.Prefix,
              settings: Settings, problem: str, clean: Sanitiser) -> Outcome:
    """Grade one submission: read it, find its chapter, run it in a sandbox while this process
    grades each answer it captures, then score it."""
    try:
        nb = read_notebook(read_regular(path, MAX_NOTEBOOK_BYTES))
    except (OSError, ValueError) as error:
        return unreadable(relative, assignments, problem, error)
    assignment, note = chapter_of(relative, nb, assignments)
    problem = joined(problem, note)
    outcome = Outcome(display(relative), assignment, problem=problem)
    if assignment is None:
        outcome.problem = joined("no chapter notebook matches its name or its exercise labels",
                                 problem)
        return outcome
    note_skipped_cells(outcome, nb)
    outcome.flags = flags(without_check_calls(nb, assignment), assignment)
    results, unfinished = run_and_check(outcome, nb, assignment, prefix, settings, clean)
    if unfinished:
        outcome.problem = joined(unfinished, outcome.problem)
    score(outcome, results, unfinished, clean, settings.with_stubs)
    leave_to_instructor(outcome, why_not_plain(student_code(nb, assignment)))
    return outcome


def student_code(nb: dict, assignment: Assignment) -> list[str]:
    """Every code cell's source, in order, the cells the instructor's notebook has too given
    as "" (so that why_not_plain reads the student's own code, and counts cells as they sit)."""
    return [c["source"] if c["source"] not in assignment.cells else ""
            for c in nb["cells"] if c["cell_type"] == "code"]


def unreadable(relative: str, assignments: list[Assignment], problem: str,
               error: Exception) -> Outcome:
    """The outcome of a submission that cannot be read as a notebook: nothing graded, and why."""
    assignment = by_name(relative, assignments)
    outcome = Outcome(display(relative), assignment, problem=joined(str(error), problem))
    mark_not_graded(outcome, str(error))
    return outcome


def note_skipped_cells(outcome: Outcome, nb: dict) -> None:
    """Add to ``outcome``'s problem the cells read from ``nb`` that were skipped or whose tags
    were ignored."""
    if nb["dropped"]:
        outcome.problem = joined(outcome.problem, f"{nb['dropped']} malformed cell(s) skipped")
    if nb["odd_tags"]:
        outcome.problem = joined(
            outcome.problem, f"{nb['odd_tags']} cell(s) with malformed tags (tags ignored)")


def missing_prompts(nb: dict, assignment: Assignment) -> frozenset[str]:
    """The exercises of ``assignment`` whose prompt (its ``:label:``) no markdown cell of the
    submission ``nb`` holds."""
    prompts = "\n".join(c["source"] for c in nb["cells"] if c["cell_type"] == "markdown")
    return frozenset(e.name for e in assignment.exercises if f":label: {e.label}" not in prompts)


def run_and_check(outcome: Outcome, nb: dict, assignment: Assignment, prefix: sandbox.Prefix,
                  settings: Settings, clean: Sanitiser) -> tuple[dict[str, Result], str]:
    """Run ``nb``'s plan in a sandbox (or, --no-sandbox, without one) and grade each answer it
    captures here: (the checks' results by capture key, why the run did not finish or "")."""
    steps = plan(nb, assignment, with_stubs=settings.with_stubs)
    graded_steps = len(plan(nb, assignment)) if settings.with_stubs else len(steps)
    checks = {str(i): i for i in assignment.info} | (
        {f"stub:{i}": i for i in assignment.info} if settings.with_stubs else {})
    work, plan_path = write_plan(steps, assignment, settings)
    start, grader_cpu = time.monotonic(), time.process_time()
    timeout = settings.timeout_of(assignment)
    deadline = start + timeout
    process, cgroup, watchdog = start_run(prefix, plan_path, settings, work, timeout)
    conversation = None
    try:
        conversation = Conversation(process, outcome, assignment, steps, graded_steps, checks,
                                    clean, deadline, settings.cell_timeout + CELL_GRACE,
                                    missing_prompts(nb, assignment))
        conversation.run(grader_cpu)
        unfinished = "" if conversation.finished else why_unfinished(
            conversation, outcome, settings, grader_cpu, deadline, timeout)
    except ProtocolError as error:  # pragma: no cover (each check catches its own)
        unfinished = f"the notebook broke the grading protocol ({error})"
    finally:
        outcome.seconds = time.monotonic() - start
        watchdog.cancel()
        end_run(outcome, process, cgroup, settings, work)
    return (conversation.results if conversation else {}), unfinished


def write_plan(steps: list[dict], assignment: Assignment, settings: Settings) -> tuple[Path, Path]:
    """Write the sandbox's plan, read-only, in a fresh folder: (the folder, the plan)."""
    work = Path(tempfile.mkdtemp(prefix="mha-grade-one-"))
    plan_path = work / "plan.json"
    # every other process of the runner's user is the submission's: in the sandbox's PID
    # namespace, or as a user of its own (mha.answer_watch watches them beside an answer)
    plan_path.write_text(json.dumps({"cells": steps, "checks": graded_checks(assignment),
                                     "cell_timeout": settings.cell_timeout,
                                     "watch_processes": bool(settings.sandboxed
                                                             or settings.user is not None)}))
    plan_path.chmod(0o444)
    if settings.user is not None:
        work.chmod(0o711)  # the submission's user may reach its plan and home, list nothing
    return work, plan_path


def start_run(prefix: sandbox.Prefix, plan_path: Path, settings: Settings, work: Path,
              timeout: float) -> tuple:
    """Start the notebook's run, known to RUNNING, with a watchdog that stops it 10 s after
    ``timeout``: (process, cgroup, watchdog)."""
    if settings.sandboxed:
        process, cgroup = sandbox.start(prefix, plan_path, settings.limits, settings.user)
    else:
        process, cgroup = sandbox.start_unsandboxed(prefix, plan_path, settings.limits, work,
                                                    settings.user)
    RUNNING.add(process, cgroup)
    # a watchdog: whatever blocks (a sandbox that stops reading its input), the deadline holds
    watchdog = threading.Timer(timeout + 10, sandbox.stop, (process, cgroup))
    watchdog.daemon = True
    watchdog.start()
    return process, cgroup, watchdog


class Conversation:
    """One run's messages from its sandbox: errors counted, each captured answer graded here by
    the chapter's check (the last capture of a check counts)."""

    def __init__(self, process, outcome: Outcome, assignment: Assignment, steps: list[dict],
                 graded_steps: int, checks: dict[str, int], clean: Sanitiser, deadline: float,
                 step_limit: float, missing: frozenset[str] = frozenset()):
        # ``missing``: the exercises whose prompt the submission does not hold (added to the
        # chapter after it was handed out: instructor 46), said as such, not "not defined"
        self.missing = missing
        self.process, self.outcome, self.assignment = process, outcome, assignment
        self.steps, self.graded_steps, self.checks = steps, graded_steps, checks
        self.clean, self.deadline, self.step_limit = clean, deadline, step_limit
        self.messages = Messages(process.stdout)
        self.channel = SandboxChannel(process, self.messages, deadline, step_limit)
        self.results: dict[str, Result] = {}
        # hidden parts: after all else (run_notebook)
        self.finished = self.started = self.hidden_started = False
        self.hidden_done: set[str] = set()  # the checks whose hidden parts were graded
        self.repeats = 0  # hidden phases sent again for such a check (ignored)
        self.calls: dict[str, int] = {}  # shown captures graded so far, by check

    def run(self, grader_cpu: float) -> None:
        """Read messages until the notebook finishes or stops, or its messages and checks have
        taken GRADER_CPU_SECONDS of this process's CPU since ``grader_cpu``."""
        while not self.finished and time.process_time() - grader_cpu < GRADER_CPU_SECONDS:
            # every step says when it starts: one that runs past its limit (a cell that ignores
            # SIGALRM) is stopped here, from outside the sandbox. Starting (importing torch)
            # is no step: only the notebook's limit bounds it
            message = self.messages.next(min(self.deadline, time.monotonic() + self.step_limit)
                                         if self.started else self.deadline)
            if message is None:
                break
            self.started = True
            if "cell" in message:
                self.count_error(message)
            elif "ready" in message:
                self.grade_capture(message)
                try:
                    self.process.stdin.write(b'{"op":"done"}\n')
                    self.process.stdin.flush()
                except (OSError, ValueError):
                    break
            elif message.get("finished") is True:
                self.finished = True

    def count_error(self, message: dict) -> None:
        """Count a cell that ended in an error; keep where the first was and what it raised."""
        if self.hidden_started or (type(message["cell"]) is int
                                   and message["cell"] >= self.graded_steps):
            return  # a stub cell added by --with-stubs, or a forged late error
        self.outcome.errors = min(self.outcome.errors + 1, MAX_ERRORS_COUNTED)
        if not self.outcome.first_error and type(message["cell"]) is int:
            self.outcome.first_error = self.clean(first_error(self.steps, message))

    def grade_capture(self, message: dict) -> None:
        """Grade a captured answer with its check, here (hidden parts after the shown ones)."""
        key = message["ready"]
        # the last capture of a check counts, as its last call (a key that is no
        # string, a list say, names no check: it must not reach the dict's hash)
        hidden = message.get("phase") == "hidden"
        self.hidden_started = self.hidden_started or hidden
        if type(key) is not str or key not in self.checks:
            return
        if hidden and key in self.hidden_done:
            # one hidden phase per check (the runner's): a repeat, sent by the notebook's own
            # code, would count the hidden parts again (attack 35: 5 of 1 point)
            if not self.repeats:
                self.outcome.flags.append("sends a check's hidden parts again from its own "
                                          "code on the grader's channel (only the first "
                                          "counted)")
            self.repeats += 1
            return
        if hidden or not self.hidden_started:
            if hidden:  # once, after the last cell, on the run's hidden seed
                result = self.checked(message, self.checks[key], hidden)
            else:  # each shown capture on inputs of its own (seed_of_call)
                self.calls[key] = self.calls.get(key, 0) + 1
                with seed_of_call(f"{key}:{self.calls[key]}"):
                    result = self.checked(message, self.checks[key], hidden)
            if hidden:
                self.hidden_done.add(key)
            self.results[key] = with_hidden(self.results.get(key), result) if hidden else result

    def checked(self, message: dict, index: int, hidden: bool) -> Result:
        """The verdict of check ``index`` on the answer ``message`` captured (or, when the
        notebook never handed it one, an error saying so)."""
        info = self.assignment.info[index]
        if "types" in message and isinstance(message["types"], list):
            answer = self.channel.ref(0, [t for t in message["types"][:20]
                                          if isinstance(t, str)])
            return evaluate(self.assignment.checkers[index], info.exercise,
                            info.max_points, answer, "hidden" if hidden else "shown")
        # the check's cell ran (or was deleted) without handing it an answer
        why = "the answer is not defined: its check never received it, and " \
              "it does not exist at the end of the notebook"
        if info.exercise in self.missing:
            why = (f"exercise {info.exercise} is not in this notebook (no prompt of it): was "
                   f"the notebook handed out before the exercise was added?")
        elif self.outcome.first_error:
            why += f" (did the cell defining it raise? {self.outcome.first_error})"
        return Result(info.exercise, 0, info.max_points, "error", why)


def why_unfinished(conversation: Conversation, outcome: Outcome, settings: Settings,
                   grader_cpu: float, deadline: float, timeout: float) -> str:
    """Why a run that did not finish stopped, for the grading log (and whether at its time
    limit, on ``outcome``)."""
    if time.process_time() - grader_cpu >= GRADER_CPU_SECONDS:
        return (f"stopped: the notebook made the grader work for more than "
                f"{GRADER_CPU_SECONDS:.0f} s of CPU (its messages and check calls)")
    if time.monotonic() >= deadline:
        outcome.timed_out = True
        return f"{TIMED_OUT} of {timeout:.0f} s"
    if conversation.messages.junk > MAX_JUNK_LINES:
        return (f"stopped: the notebook wrote more than {MAX_JUNK_LINES} lines "
                "that are not messages on the grader's channel")
    if conversation.messages.too_long:
        return (f"stopped: the notebook wrote a line of more than "
                f"{MAX_MESSAGE_BYTES // 2**20} MB on the grader's channel")
    if conversation.process.poll() is None:
        return (f"stopped: a cell ran past the cell limit of {settings.cell_timeout:.0f} s "
                "and did not let itself be interrupted")
    return "the notebook stopped before its end (it crashed, exited or hit a limit)"


def end_run(outcome: Outcome, process, cgroup, settings: Settings, work: Path) -> None:
    """Stop the run and everything it left (as root: every process of its user), note the
    kernel's kills at the memory limit and the processes killed, and remove its folder."""
    sandbox.stop(process, cgroup)
    if cgroup is not None:  # the kernel's kills at the memory limit of all its processes
        outcome.problem = joined(outcome.problem,
                                 sandbox.memory_note(cgroup, settings.limits.total_memory))
    if settings.user is not None:  # one submission at a time per user: all of it goes
        sandbox.wait_for_exit(settings.user)  # a sandbox's processes end with its bwrap
        left = sandbox.kill_user(settings.user)
        if left:
            outcome.problem = joined(outcome.problem,
                                     f"{left} process(es) it left running were killed")
    RUNNING.discard(process)
    shutil.rmtree(work, ignore_errors=True)


# ---------------------------------------------------------------------------------------------
# The sandboxes running in this process

class Running:
    """The sandboxes this process has running, so that an interrupt can stop them."""

    def __init__(self):
        self.lock = threading.Lock()
        self.items: dict[int, tuple] = {}

    def add(self, process, cgroup) -> None:
        with self.lock:
            self.items[process.pid] = (process, cgroup)

    def discard(self, process) -> None:
        with self.lock:
            self.items.pop(process.pid, None)

    def stop_all(self) -> None:
        with self.lock:
            items = list(self.items.values())
        for process, cgroup in items:
            sandbox.stop(process, cgroup)


RUNNING = Running()

