"""What grading one submission found: verdicts and points per exercise."""

from __future__ import annotations

from dataclasses import dataclass, field

from mha.answer_watch import ESCAPED, LEFT_TORCH, SWITCHED_OFF, TAMPERED
from mha.exercises import Result, tidy
from mha_grade.assignments import Assignment

# how a notebook stopped at its time limit is reported (its status and its problem start so;
# --resume grades such a notebook again)
TIMED_OUT = "stopped after the time limit"
# the status of an exercise whose automatic verdict is not trusted: a human grades it
LEFT_TO_INSTRUCTOR = "left to the instructor"


@dataclass
class Outcome:
    """What grading one submission found, per exercise name."""

    notebook: str
    assignment: Assignment | None
    points: dict[str, float] = field(default_factory=dict)  # ints when whole
    status: dict[str, str] = field(default_factory=dict)
    message: dict[str, str] = field(default_factory=dict)
    stubs: dict[str, str] = field(default_factory=dict)  # --with-stubs: exercise -> status
    seconds: float = 0.0
    problem: str = ""  # what went wrong with the whole notebook, or a warning about it
    errors: int = 0  # cells that ended in an error
    first_error: str = ""  # the first of them: where (as the student sees it) and what raised
    timed_out: bool = False  # stopped at the notebook's time limit (graded again alone, once)
    flags: list[str] = field(default_factory=list)
    # exercise -> its checks' parts that ran, when a check has several (mha.exercises): name,
    # points, max_points, hidden, status, message; for Gradescope's tests per part
    parts: dict[str, list[dict]] = field(default_factory=dict)



def mark_not_graded(outcome: Outcome, why: str) -> None:
    """Give every exercise of ``outcome`` checked by code 0 points, "not graded" and ``why``
    as its message (the others stay "by hand")."""
    if outcome.assignment is None:
        return
    for exercise in outcome.assignment.exercises:
        if exercise.checks:
            outcome.points[exercise.name] = 0
            outcome.status[exercise.name] = "not graded"
            outcome.message[exercise.name] = why
        else:
            outcome.status[exercise.name] = "by hand"




def _hidden_not_run(checker, result: Result) -> bool:
    """Whether ``checker`` has hidden parts that ``result`` has no verdict for."""
    ran = {part.name for part in result.parts}
    return any(p.hidden and p.name not in ran for p in getattr(checker, "parts", None) or ())


WATCH_BROKEN = (SWITCHED_OFF, ESCAPED, TAMPERED, LEFT_TORCH)


def score(outcome: Outcome, results: dict[str, Result], unfinished: str, clean,
          with_stubs: bool = False) -> None:
    """Fill ``outcome``'s points, status and message per exercise from the checks' ``results``
    (check cell index as a string -> the verdict the grader computed). An exercise's points are
    its checks' points; its status is its first check's that is not "correct"; a check that
    never ran says why (``unfinished``: the notebook stopped) and scores 0. ``clean`` makes a
    message fit for students (no path or value of the grading machine)."""
    for exercise in outcome.assignment.exercises:
        if not exercise.checks:
            outcome.status[exercise.name] = "by hand"
            continue
        got = [results.get(str(i)) for i in exercise.checks]
        entered = sorted({name for r in got if r for name in r.entered})
        # observed at run time (mha.answer_watch): for the instructor, no points; a watch
        # switched off or reached past is what the answer did, not a reference it called
        broke = [name for name in entered if name in WATCH_BROKEN]
        called = [name for name in entered if name not in WATCH_BROKEN]
        if called:
            outcome.flags.append(f"calls the reference of exercise {exercise.name} (seen when "
                                 f"its check called the answer: {', '.join(called)[:300]})")
        if broke:
            outcome.flags.append(f"defeats the answer watch in exercise {exercise.name} (seen "
                                 f"when its check called the answer: {'; '.join(broke)[:300]})")
        # partial credit: a check's points are those of the parts it passed (mha.exercises),
        # so a check that is "wrong" on one part still counts its other parts
        # never above the exercise's points, however many verdicts a notebook made it send
        outcome.points[exercise.name] = tidy(max(0, min(
            sum(r.points for r in got if r), outcome.assignment.max_points(exercise))))
        outcome.parts[exercise.name] = [
            {"name": part.name, "points": part.points, "max_points": part.max_points,
             "hidden": part.hidden, "status": part.status, "message": clean(part.message)}
            for r in got if r for part in r.parts]
        # hidden parts run after the notebook's last cell (run_notebook): one that stopped
        # before has none of them, and says so
        cut = [bool(r) and _hidden_not_run(outcome.assignment.checkers.get(i), r)
               for i, r in zip(exercise.checks, got, strict=True)]
        statuses = [(unfinished or "hidden parts not run") if short and r.status == "correct"
                    else r.status if r else (unfinished or "no result")
                    for r, short in zip(got, cut, strict=True)]
        outcome.status[exercise.name] = next((s for s in statuses if s != "correct"),
                                             "correct")
        outcome.message[exercise.name] = clean(" | ".join(
            (r.message + ("; its hidden parts did not run: the notebook stopped before they "
                          "could" if short else "")) if r else "its check was not reached"
            for r, short in zip(got, cut, strict=True)))
        if with_stubs:
            stubs = [results.get(f"stub:{i}") for i in exercise.checks]
            outcome.stubs[exercise.name] = ",".join(
                f"{r.status}:{r.points}" if r else "none" for r in stubs)


def leave_to_instructor(outcome: Outcome, not_plain: list[str]) -> None:
    """Take the automatic points away from each exercise whose checks forbid ops, when the
    student's code is not plain (``not_plain``: mha_grade.plain_code.why_not_plain): the watch
    that sees the forbidden op runs in the student's process, and code that reaches Python's
    machinery may blind it. Such an exercise gets no points here, says why, and is flagged: the
    report puts it on the by-hand page and in points.csv, where the instructor's points count."""
    if not not_plain or outcome.assignment is None:
        return
    first = not_plain[0] + (f" and {len(not_plain) - 1} more" if len(not_plain) > 1 else "")
    for exercise in outcome.assignment.exercises:
        # a checker's watch names the ops its exercise forbids (mha.exercises.exercise_check)
        if not any((getattr(outcome.assignment.checkers.get(i), "watch", None) or {}).get("ops")
                   for i in exercise.checks):
            continue
        most = outcome.assignment.max_points(exercise)
        checked = (f"{outcome.status.get(exercise.name, 'no result')}, "
                   f"{outcome.points.pop(exercise.name, 0)}/{most}")
        outcome.parts.pop(exercise.name, None)
        outcome.status[exercise.name] = LEFT_TO_INSTRUCTOR
        outcome.message[exercise.name] = (
            f"your notebook uses {first}, which the grader cannot see past: your instructor "
            "grades this exercise by hand")
        outcome.flags.append(f"exercise {exercise.name} left to the instructor: its code is not "
                             f"plain ({'; '.join(not_plain)[:300]}); the check alone found "
                             f"{checked}")
