"""`make gradescope`: the zip's run_autograder grades a submission in Gradescope's documented
layout (/autograder/source, /autograder/submission, /autograder/results/results.json)."""

import json
import shutil
import subprocess
import sys
import zipfile

import gradescope_root
import pytest
from gradescope_root import CHAPTER

from mha_grade import assignments, gradescope, late
from mha_grade.compare import Outcome
from mha_grade.submissions import Found

from conventions import ROOT


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    """The zip, built once by `mha-grade gradescope build` for this file's tests."""
    bundle = tmp_path_factory.mktemp("gradescope") / "gradescope.zip"
    subprocess.run([sys.executable, "-m", "mha_grade", "gradescope", "build", "--chapter",
                    "03", str(bundle)], check=True, capture_output=True)
    return bundle


def autograder(bundle, tmp_path, submitted, chapter=CHAPTER.stem):
    """Unpack the zip where Gradescope would and run run_autograder on `submitted` files, as
    root in a throwaway root (it makes a user and runs the notebook as that user)."""
    why = gradescope_root.unavailable()
    if why:
        pytest.skip(why)
    with zipfile.ZipFile(bundle) as z:
        assert {"setup.sh", "run_autograder"} <= set(z.namelist())
        assert all(z.getinfo(n).external_attr >> 16 & 0o111 for n in ("setup.sh", "run_autograder"))
    root = gradescope_root.unpack(tmp_path, bundle, chapter=chapter)
    for path in submitted:
        shutil.copy(path, root / "submission" / path.name)
    run = gradescope_root.run_autograder(root)
    assert run.returncode == 0, run.stdout + run.stderr
    return json.loads((root / "results" / "results.json").read_text())


def test_the_instructors_notebook_scores_full_marks_in_gradescopes_layout(bundle, tmp_path):
    report = autograder(bundle, tmp_path, [CHAPTER])
    scored = [t for t in report["tests"] if "max_score" in t]
    assert scored and all(t["score"] == t["max_score"] > 0 for t in scored), report
    assert report["score"] == sum(t["max_score"] for t in scored)
    assert all(t["name"].startswith(CHAPTER.name) and t["output"] for t in report["tests"])
    # the status once (#39 L2: "correct correct")
    assert all(t["output"].split("\n")[0] == "correct" for t in scored), report
    # 0.3's hidden part is a test of its own, shown to students after the due date (the zip's
    # default); every other test is visible
    hidden = [t for t in scored if t["visibility"] != "visible"]
    assert [(t["name"].split(": ", 1)[1], t["visibility"]) for t in hidden] == [
        ("exercise 0.3, hidden part 'one token (n = 1), and a longer sequence'",
         "after_due_date")]


def test_a_submission_without_a_notebook_scores_zero_with_a_reason(bundle, tmp_path):
    stray = tmp_path / "answers.txt"
    stray.write_text("I did it all on paper")
    report = autograder(bundle, tmp_path, [stray])
    assert report["score"] == 0
    assert report["tests"] == [] and "No notebook" in report["output"]


def test_another_chapters_notebook_is_ignored_and_scores_nothing(bundle, tmp_path):
    # the attack of round 3 (#1): the chapter-0 assignment, handed the solved chapter 0 and the
    # instructor's solved chapter 3, used to score 3 + 2 = 5 of 3
    other = ROOT / "notebooks" / "03_attention_with_weights.ipynb"
    report = autograder(bundle, tmp_path, [CHAPTER, other])
    example = assignments.load_assignment(CHAPTER)
    most = gradescope.total_points(example)
    assert most == 3 and report["score"] == most
    scored = [t for t in report["tests"] if t.get("max_score")]
    assert {t["name"].split(":")[0] for t in scored} == {CHAPTER.name}
    assert sum(t["max_score"] for t in scored) == most
    ignored = [t for t in report["tests"] if t["name"] == f"{other.name}: ignored"]
    assert len(ignored) == 1 and ignored[0]["score"] == ignored[0]["max_score"] == 0
    assert "this assignment grades chapter 00 only" in ignored[0]["output"]


def test_a_zip_for_all_chapters_grades_each_one_found(bundle, tmp_path):
    report = autograder(bundle, tmp_path, [CHAPTER], chapter=gradescope.ALL)
    assert report["score"] == 3 and not any("ignored" in t["name"] for t in report["tests"])


def gradescope_metadata(created, due, own_due=None):
    """submission_metadata.json as Gradescope documents it (with a user's own due date, as an
    extension gives one, when ``own_due``)."""
    user = {"email": "s@example.com", "id": 1, "name": "S"}
    if own_due:
        user["assignment"] = {"due_date": own_due}
    return {"id": 1, "created_at": created, "users": [user], "previous_submissions": [],
            "assignment": {"due_date": due, "late_due_date": None, "id": 2,
                           "title": "Chapter 0", "total_points": "3.0"}}


LATE_2_DAYS = gradescope_metadata("2026-03-03T10:00:00.000000+01:00",
                                  "2026-03-01T23:59:00.000000+01:00")


def test_late_work_loses_the_zips_penalty_by_gradescopes_metadata_alone(bundle, tmp_path):
    """The zip's --late-penalty 10%/day, the instructor's notebook handed in 2 days late by
    Gradescope's metadata: 3 points less 20%. A file of that name in the submission, claiming
    on time, is the student's, and not read."""
    why = gradescope_root.unavailable()
    if why:
        pytest.skip(why)
    root = gradescope_root.unpack(tmp_path, bundle)
    settings = root / "source" / gradescope.SETTINGS_FILE
    settings.write_text(json.dumps(json.loads(settings.read_text()) | {
        "late_penalty": "10%/day"}))
    (root / gradescope.METADATA).write_text(json.dumps(LATE_2_DAYS))
    shutil.copy(CHAPTER, root / "submission" / CHAPTER.name)
    (root / "submission" / gradescope.METADATA).write_text(json.dumps(gradescope_metadata(
        "2026-03-01T10:00:00+01:00", "2026-03-01T23:59:00+01:00")))
    run = gradescope_root.run_autograder(root)
    assert run.returncode == 0, run.stdout + run.stderr
    report = json.loads((root / "results" / "results.json").read_text())
    scored = [t for t in report["tests"] if t.get("max_score")]
    assert sum(t["score"] for t in scored) == 3 and report["score"] == 2.4
    said = ("handed in 2 days late (Gradescope: submitted 2026-03-03T10:00:00+01:00, due "
            "2026-03-01T23:59:00+01:00): 20% off (10% per day), 0.6 point(s) of 3 taken off")
    assert [t["output"] for t in report["tests"] if t["name"] == "late penalty"] == [
        "H" + said[1:] + "."]
    assert report["output"].startswith(f"Late: {said}.")


@pytest.mark.parametrize("rule, data, score", [
    ("10%/day", LATE_2_DAYS, 2.4), ("none", LATE_2_DAYS, 3.0), ("100%", LATE_2_DAYS, 0.0),
    ("10%/day", gradescope_metadata("2026-03-01T10:00:00+01:00", "2026-03-01T23:59+01:00"), 3),
    # an extension: the user's own due date is after the submission
    ("10%/day", gradescope_metadata("2026-03-03T10:00:00+01:00", "2026-03-01T23:59+01:00",
                                    "2026-03-04T23:59+01:00"), 3.0),
    ("10%/day", None, 3.0),  # no metadata: lateness not known, no penalty
    ("10%/day", "not json", 3.0)])
def test_results_json_takes_the_penalty_off_the_score_and_never_below_zero(tmp_path, rule, data,
                                                                            score):
    if data is not None:
        (tmp_path / gradescope.METADATA).write_text(
            data if isinstance(data, str) else json.dumps(data))
    lateness, said = gradescope.submitted_late(tmp_path)
    assert ("lateness not known" in said) == (data in (None, "not json"))
    result = {"score": 3.0, "tests": [], "output": "notes"}
    gradescope.with_late_penalty(result, late.Penalty.parse(rule), lateness)
    assert result["score"] == score and 0 <= result["score"] <= 3
    assert ([t["name"] for t in result["tests"]] == ["late penalty"]) == (score != 3)


def test_the_metadata_is_not_read_through_a_symbolic_link(tmp_path):
    (tmp_path / "elsewhere.json").write_text(json.dumps(LATE_2_DAYS))
    (tmp_path / gradescope.METADATA).symlink_to(tmp_path / "elsewhere.json")
    assert gradescope.submitted_late(tmp_path)[0] is None


def test_the_zip_keeps_its_late_penalty_and_refuses_a_bad_one(tmp_path):
    def build(*args):
        return subprocess.run([sys.executable, "-m", "mha_grade", "gradescope", "build",
                               "--chapter", "03", *args, str(tmp_path / "g.zip")],
                              capture_output=True, text=True)

    refused = build("--late-penalty", "10 percent")
    assert refused.returncode == 2 and "late_penalty must be 'none'" in refused.stderr
    for args, kept in [([], "none"), (["--late-penalty", "5%/day"], "5%/day")]:
        assert build(*args).returncode == 0
        with zipfile.ZipFile(tmp_path / "g.zip") as z:
            assert json.loads(z.read(gradescope.SETTINGS_FILE))["late_penalty"] == kept


def test_the_zip_names_its_chapter_and_build_needs_one(tmp_path):
    def build(*args):
        return subprocess.run([sys.executable, "-m", "mha_grade", "gradescope", "build", *args,
                               str(tmp_path / "g.zip")], capture_output=True, text=True)

    assert build().returncode == 2  # neither --chapter nor --all
    refused = build("--chapter", "99")
    assert refused.returncode == 2 and "chapter must be one of" in refused.stderr
    for args, chapter in [(["--chapter", "09"], "09_decoders"),
                          (["--chapter", "09_decoders"], "09_decoders"), (["--all"], "all")]:
        assert build(*args).returncode == 0
        with zipfile.ZipFile(tmp_path / "g.zip") as z:
            settings = json.loads(z.read(gradescope.SETTINGS_FILE))
        assert settings["chapter"] == chapter


def test_a_zip_that_names_no_chapter_grades_nothing(tmp_path, monkeypatch):
    from mha_grade import sandbox

    # no user is made on this machine: the failure's clean-up kills a user that does not exist
    monkeypatch.setattr(gradescope, "prepare", lambda: sandbox.User("nobody-here", 2**31 - 7,
                                                                    2**31 - 7))
    (tmp_path / "source").mkdir()
    report = gradescope.run(tmp_path)  # fails before it reads the submission
    assert report["score"] == 0 and "names no chapter" in report["output"]


def test_the_score_never_exceeds_the_assignments_points():
    example = assignments.load_assignment(CHAPTER)
    outcomes = [Outcome(name, example, points={"0.2": 1}) for name in ("a.ipynb", "b.ipynb")]
    assert gradescope.report(outcomes, [], [])["score"] == 2  # as if both had been graded
    capped = gradescope.report(outcomes, [], [], cap=1.0)
    assert capped["score"] == 1 and "more than the assignment's 1" in capped["output"]


@pytest.mark.parametrize("name", ["setup.sh", "run_autograder"])
def test_the_entry_points_are_bash_scripts_that_stop_on_errors(name):
    text = (ROOT / "tools" / "autograder" / name).read_text()
    assert text.startswith("#!/usr/bin/env bash\n") and "set -euo pipefail" in text


@pytest.mark.parametrize("status, message, problem, shown", [
    ("correct", "correct", "", "correct"),
    ("wrong", "the scale is missing", "", "wrong: the scale is missing"),
    ("error", "error: NameError", "", "error: NameError"),
    ("correct", "correct", "2 process(es) it left running were killed",
     "correct\n2 process(es) it left running were killed"),
    ("", "", "", "")])
def test_a_tests_text_says_the_status_once_and_the_notebooks_problem_on_its_own_line(
        status, message, problem, shown):
    assert gradescope.student_text(status, message, problem) == shown


def test_a_submission_of_another_chapter_alone_is_not_said_to_hold_no_notebook_of_the_course():
    # instructor 48: chapter 4's notebook handed to chapter 3's assignment read "No notebook of
    # the course was found", though its own test named it as chapter 04's
    other = Found("04_multi_head_attention.ipynb", None)
    wrong = gradescope.report([], [(other, "ignored: this assignment grades chapter 03 only")],
                              [])
    nothing = gradescope.report([], [], [])
    assert "No notebook of the course" not in wrong["output"]
    assert "No notebook of the course was found in the submission." in nothing["output"]
