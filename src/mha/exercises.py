"""Feedback for exercises: a check says right or wrong and why, and never shows the solution.

A chapter's checks live in ``mha.checks.chNN``. Each is a function made with ``exercise_check``:
it takes the student's answer (usually a function), raises ``Wrong`` with a helpful message when
the answer is wrong, and returns nothing when it is right. Calling a check never stops the
notebook: it prints one line, the verdict, which is what grading reads (tools/grade.py).
"""

from __future__ import annotations

import contextlib
import functools
import io
from collections.abc import Callable
from dataclasses import dataclass

import torch


class Wrong(Exception):
    """Raised by a check when the answer is wrong; the message says what was expected."""


@dataclass(frozen=True)
class Result:
    exercise: str
    points: int
    max_points: int
    status: str  # "correct", "wrong", "not done", "error"
    message: str

    def _ipython_display_(self) -> None:
        """The check has printed its verdict already: a notebook shows nothing more."""


def exercise_check(exercise: str, points: int = 1) -> Callable:
    """Turn ``checker(answer)`` into a check that prints its verdict and returns it."""

    def wrap(checker: Callable[[object], None]) -> Callable[[object], Result]:
        @functools.wraps(checker)
        def check(answer: object) -> Result:
            # The answer's own prints are caught and shown indented above the verdict, so the
            # verdict is the only line of the check that starts with a mark (graders read it).
            printed = io.StringIO()
            try:
                with contextlib.redirect_stdout(printed):
                    checker(answer)
            except NotImplementedError:
                result = Result(exercise, 0, points, "not done",
                                "not done yet: the answer still raises NotImplementedError")
            except Wrong as wrong:
                result = Result(exercise, 0, points, "wrong", str(wrong))
            except Exception as error:  # the student's code failed: say how, keep going
                result = Result(exercise, 0, points, "error",
                                f"your answer raised {type(error).__name__}: {error}")
            else:
                result = Result(exercise, points, points, "correct", "correct")
            _echo(printed.getvalue())
            _report(result)
            return result

        check.exercise = exercise
        check.max_points = points
        return check

    return wrap


def _echo(printed: str, max_lines: int = 20) -> None:
    """Show what the answer printed, indented, and at most ``max_lines`` lines of it."""
    lines = printed.splitlines()
    for line in lines[:max_lines]:
        print(f"    {line[:200]}")
    if len(lines) > max_lines:
        print(f"    ... ({len(lines) - max_lines} more lines printed by your answer)")


def _report(result: Result) -> None:
    mark = "✓" if result.status == "correct" else "✗"
    message = " ".join(result.message.split())[:500]  # one line, whatever the answer raised
    print(f"{mark} Exercise {result.exercise} [{result.points}/{result.max_points}]: {message}")


def expect_close(what: str, got: object, expected: torch.Tensor,
                 atol: float = 1e-5, rtol: float = 1e-4) -> None:
    """Raise ``Wrong`` unless ``got`` is a tensor of ``expected``'s shape and values."""
    if not isinstance(got, torch.Tensor):
        raise Wrong(f"{what}: expected a torch.Tensor, got {type(got).__name__}")
    if got.shape != expected.shape:
        raise Wrong(f"{what}: expected shape {tuple(expected.shape)}, got {tuple(got.shape)}")
    got64, expected64 = got.detach().double(), expected.detach().double()
    if not torch.allclose(got64, expected64, atol=atol, rtol=rtol):
        worst = (got64 - expected64).abs().max().item()
        raise Wrong(f"{what}: values differ from the expected ones by up to {worst:.3g}")
