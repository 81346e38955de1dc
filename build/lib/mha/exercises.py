"""Feedback for exercises: a check says right or wrong and why, and never shows the solution.

A chapter's checks live in ``mha.checks.chNN``. Each is a function made with ``exercise_check``:
it takes the student's answer (usually a function), raises ``Wrong`` with a helpful message when
the answer is wrong, and returns nothing when it is right. Calling a check never stops the
notebook: it prints one line and records the result for grading.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass

import torch

#: Where a grading run collects results (one JSON line per check); unset for students.
REPORT_ENV = "MHA_GRADING_REPORT"


class Wrong(Exception):
    """Raised by a check when the answer is wrong; the message says what was expected."""


@dataclass(frozen=True)
class Result:
    exercise: str
    points: int
    max_points: int
    status: str  # "correct", "wrong", "not done", "error"
    message: str


def exercise_check(exercise: str, points: int = 1) -> Callable:
    """Turn ``checker(answer)`` into a check that prints and records its verdict."""

    def wrap(checker: Callable[[object], None]) -> Callable[[object], Result]:
        @functools.wraps(checker)
        def check(answer: object) -> Result:
            try:
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
            _report(result)
            return result

        check.exercise = exercise
        check.max_points = points
        return check

    return wrap


def _report(result: Result) -> None:
    mark = "✓" if result.status == "correct" else "✗"
    print(f"{mark} Exercise {result.exercise} [{result.points}/{result.max_points}]: "
          f"{result.message}")
    path = os.environ.get(REPORT_ENV)
    if path:
        with open(path, "a", encoding="utf-8") as report:
            report.write(json.dumps(asdict(result)) + "\n")


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
