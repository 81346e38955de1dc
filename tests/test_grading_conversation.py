"""The grader's side of a run: the captures a sandbox sends (mha_grade.run.Conversation), the
points they make (mha_grade.compare.score) and the points the report reads back
(mha_grade.gradebook.load_results). None of these can go above an exercise's points."""

from __future__ import annotations

import io
import json
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from mha.exercises import PartResult, Result
from mha_grade import assignments, gradebook
from mha_grade.compare import Outcome, score
from mha_grade.run import Conversation

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def chapter_1():
    return assignments.load_assignment(ROOT / "notebooks" / "01_attention_recap.ipynb")


def index_of(assignment, exercise):
    return next(i for i, info in assignment.info.items() if info.exercise == exercise)


def part(hidden):
    return PartResult("hidden" if hidden else "shown", 0.5, 0.5, hidden, "correct", "correct")


def conversation(assignment, messages):
    lines = b"".join(json.dumps(m).encode() + b"\n" for m in messages)
    process = SimpleNamespace(stdout=io.BytesIO(lines), stdin=io.BytesIO())
    outcome = Outcome("kate.ipynb", assignment)
    checks = {str(i): i for i in assignment.info}
    talk = Conversation(process, outcome, assignment, [], 0, checks, lambda text: text,
                        time.monotonic() + 30, 30)
    return talk, outcome


def test_a_checks_hidden_parts_count_once_however_often_the_notebook_sends_them(
        chapter_1, monkeypatch):
    """Attack 35: the notebook's own code called the runner's capture (or wrote "ready" lines
    on the channel) eight times with "phase": "hidden": exercise 1.3 scored 5 of 1."""
    def checked(self, message, index, hidden):
        return Result("1.3", 0.5, 0.5, "correct", "correct", (part(hidden),))

    monkeypatch.setattr(Conversation, "checked", checked)
    key = str(index_of(chapter_1, "1.3"))
    talk, outcome = conversation(chapter_1, [
        {"ready": key, "types": [], "phase": "shown"},
        *[{"ready": key, "types": [], "phase": "hidden"}] * 8, {"finished": True}])
    talk.run(time.process_time())
    result = talk.results[key]
    assert (result.points, result.max_points) == (1, 1), result
    assert [p.hidden for p in result.parts] == [False, True]
    assert talk.repeats == 7 and any("hidden parts again" in f for f in outcome.flags)


def test_an_exercise_scores_at_most_its_points(chapter_1):
    index = index_of(chapter_1, "1.3")
    outcome = Outcome("kate.ipynb", chapter_1)
    score(outcome, {str(index): Result("1.3", 5, 5, "correct", "correct")}, "",
          lambda text: text)
    assert outcome.points["1.3"] == chapter_1.max_points(
        next(e for e in chapter_1.exercises if e.name == "1.3")) == 1


@pytest.mark.parametrize("points", ["5", "-1"])
def test_the_report_refuses_points_beyond_an_exercises_maximum(tmp_path, points):
    (tmp_path / "grades.csv").write_text(
        f"notebook,exercise,points,max_points\nkate.ipynb,1.3,{points},1\n")
    (tmp_path / "grading_log.csv").write_text("notebook,exercise,status,message\n")
    with pytest.raises(ValueError, match="exercise 1.3 has .* points, of 1"):
        gradebook.load_results(tmp_path)
    (tmp_path / "grades.csv").write_text(
        "notebook,exercise,points,max_points\nkate.ipynb,1.3,1,1\n")
    assert gradebook.load_results(tmp_path)[0].results["1.3"].points == 1
