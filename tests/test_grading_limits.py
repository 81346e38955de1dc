"""Fair time limits: calibrated on the grading machine, a timed-out notebook graded again alone,
--resume that grades timed-out notebooks again, --regrade of named notebooks."""

import csv
import json
import math
import re
import subprocess
import sys

import pytest
from exercise_notebooks import EXAMPLE, fmt, student_edition

from mha_grade import grade as grader
from mha_grade import sandbox
from mha_grade.compare import Outcome

GRADER = [sys.executable, "-m", "mha_grade", "grade"]
NAME = EXAMPLE.name
needs_sandbox = pytest.mark.skipif(sandbox.unavailable() is not None,
                                   reason=str(sandbox.unavailable()))


def rows(path):
    with path.open() as handle:
        return list(csv.DictReader(handle))


def run(folder, *options):
    done = subprocess.run([*GRADER, str(folder), "--source", str(EXAMPLE), *options],
                          capture_output=True, text=True, timeout=600)
    return done


def points(folder, who):
    return {r["exercise"]: r["points"] for r in rows(folder / "grades.csv")
            if r["notebook"] == f"{who}/{NAME}"}


@needs_sandbox
def test_the_limit_is_calibrated_on_the_instructors_notebook_and_regrade_replaces_rows(
        tmp_path):
    folder = tmp_path / "class"
    for who, nb in [("alice", fmt.load(EXAMPLE)), ("bob", fmt.load(EXAMPLE))]:
        (folder / who).mkdir(parents=True)
        (folder / who / NAME).write_text(json.dumps(nb))
    # a limit of 1 s is too short for any notebook (starting Python and torch takes longer):
    # the calibrated limit, 3 x the instructor's notebook's time here, is what applies
    done = run(folder, "--timeout", "1", "--jobs", "2")
    assert done.returncode == 0, done.stdout + done.stderr
    m = re.search(r"00_example_exercises: (\d+) s = max\(--timeout 1 s, 3 x ([\d.]+) s",
                  done.stdout)
    assert m, done.stdout
    limit, seconds = int(m.group(1)), float(m.group(2))
    assert abs(limit - math.ceil(3 * seconds)) <= 1  # the time is printed rounded
    for who in ["alice", "bob"]:
        assert points(folder, who) == {"0.1": "", "0.2": "1", "0.3": "2"}
    # a later run of the class with the same options keeps the limit: not measured again, and
    # bob is graded 3/3 under it (--timeout 1 s alone is too short for any notebook)
    done = run(folder, "--timeout", "1", "--jobs", "2", "--regrade", "bob/")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "time limits kept in time_limits.json" in done.stdout
    assert "measured here" not in done.stdout
    assert f"00_example_exercises: {limit} s = max(--timeout 1 s, 3 x {seconds:.1f} s" \
        in done.stdout
    assert points(folder, "bob") == {"0.1": "", "0.2": "1", "0.3": "2"}
    # other options, or --recalibrate, measure again
    for options in (["--jobs", "1"], ["--jobs", "2", "--recalibrate"]):
        done = run(folder, "--timeout", "1", *options, "--regrade", "bob/")
        assert "measured here" in done.stdout and "kept in" not in done.stdout, done.stdout
    # alice hands in again (her notebook is now the student edition): only she is graded
    (folder / "alice" / NAME).write_text(json.dumps(student_edition.student_edition(
        fmt.load(EXAMPLE))))
    bob_before = [r for r in rows(folder / "grading_log.csv") if r["notebook"].startswith("bob")]
    done = run(folder, "--regrade", f"alice/{NAME}", "--no-calibrate", "--timeout", "120")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "grading again 1 notebook(s); the rows of the other 1 are kept" in done.stdout
    assert points(folder, "alice") == {"0.1": "", "0.2": "0", "0.3": "0"}
    assert [r for r in rows(folder / "grading_log.csv")
            if r["notebook"].startswith("bob")] == bob_before
    assert len(rows(folder / "grades.csv")) == 6
    # a name that matches nothing is an error, and changes nothing
    done = run(folder, "--regrade", "carol/", "--no-calibrate")
    assert done.returncode == 2 and "no notebook to grade is named carol/" in done.stderr


@needs_sandbox
def test_resume_grades_again_the_notebooks_stopped_at_their_time_limit(tmp_path):
    folder = tmp_path / "class"
    for who in ["done", "stopped"]:
        (folder / who).mkdir(parents=True)
        (folder / who / NAME).write_text(json.dumps(fmt.load(EXAMPLE)))
    (folder / "grades.csv.part").write_text(
        "notebook,exercise,points,max_points\n"
        + "".join(f"{who}/{NAME},0.1,,\n{who}/{NAME},0.2,0,1\n{who}/{NAME},0.3,0,2\n"
                  for who in ["done", "stopped"]))
    (folder / "grading_log.csv.part").write_text(
        "notebook,exercise,status,message,seconds,errors,flags,problem,first_error\n"
        + "".join(f"done/{NAME},{e},kept,,1.0,0,,,\n" for e in ["0.1", "0.2", "0.3"])
        + "".join(f"stopped/{NAME},{e},stopped after the time limit of 15 s,,15.0,0,,"
                  "stopped after the time limit of 15 s,\n" for e in ["0.1", "0.2", "0.3"]))
    done = run(folder, "--resume", "--no-calibrate", "--timeout", "120")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "resuming: 1 notebook(s) already graded" in done.stdout
    assert points(folder, "done") == {"0.1": "", "0.2": "0", "0.3": "0"}  # kept as it was
    assert points(folder, "stopped") == {"0.1": "", "0.2": "1", "0.3": "2"}  # graded again


def grade_with_timeouts(tmp_path, monkeypatch, *options):
    """The orchestration, with grading itself replaced: slow/ times out beside others and
    finishes alone; stuck/ times out both times. Returns the calls of grade_all."""
    folder = tmp_path / "class"
    for who in ["quick", "slow", "stuck"]:
        (folder / who).mkdir(parents=True)
        (folder / who / NAME).write_text(json.dumps(fmt.load(EXAMPLE)))
    calls = []

    def fake_grade_all(found, assignments, settings, *, jobs, on_outcome, **_):
        calls.append(([f.relative for f in found], jobs))
        for item in found:
            who = item.relative.split("/")[0]
            timed_out = who == "stuck" or (who == "slow" and len(calls) == 1)
            outcome = Outcome(item.relative, assignments[0], seconds=1.0,
                              timed_out=timed_out,
                              problem="stopped after the time limit of 9 s" if timed_out else "")
            for exercise in assignments[0].exercises:
                outcome.points[exercise.name] = 0 if timed_out else 1
            on_outcome(outcome)

    monkeypatch.setattr(grader, "grade_all", fake_grade_all)
    # as root, --no-sandbox first checks its users can start this Python: nothing runs here
    monkeypatch.setattr(grader.sandbox, "cannot_start_python", lambda user: None)
    code = grader.main([str(folder), "--source", str(EXAMPLE), "--no-sandbox",
                        "--no-calibrate", "--jobs", "2", *options])
    assert code == 0
    return folder, calls


def test_a_notebook_stopped_at_its_limit_is_graded_again_alone_once_if_asked(tmp_path,
                                                                           monkeypatch):
    """--again-alone: each notebook stopped at its limit is graded again once, with jobs=1."""
    folder, calls = grade_with_timeouts(tmp_path, monkeypatch, "--again-alone")
    assert calls == [([f"{w}/{NAME}" for w in ["quick", "slow", "stuck"]], 2),
                     ([f"slow/{NAME}", f"stuck/{NAME}"], 1)]
    problems = {r["notebook"].split("/")[0]: r["problem"]
                for r in rows(folder / "grading_log.csv")}
    assert problems["quick"] == ""
    assert problems["slow"] == ("graded again alone after it reached the time limit beside "
                                "other notebooks")
    assert problems["stuck"] == ("stopped after the time limit of 9 s; also when graded again "
                                 "alone")
    assert points(folder, "slow")["0.2"] == "1" and points(folder, "stuck")["0.2"] == "0"



def test_a_notebook_stopped_at_its_limit_is_graded_once_by_default(tmp_path, monkeypatch):
    """A notebook that runs to its limit costs one limit, not two: its first run is written."""
    folder, calls = grade_with_timeouts(tmp_path, monkeypatch)
    assert calls == [([f"{w}/{NAME}" for w in ["quick", "slow", "stuck"]], 2)]
    problems = {r["notebook"].split("/")[0]: r["problem"]
                for r in rows(folder / "grading_log.csv")}
    assert problems == {"quick": "", "slow": "stopped after the time limit of 9 s",
                        "stuck": "stopped after the time limit of 9 s"}
    assert points(folder, "slow")["0.2"] == "0"
