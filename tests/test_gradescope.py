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

from conventions import ROOT


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    """The zip, built once by `mha-grade gradescope build` for this file's tests."""
    bundle = tmp_path_factory.mktemp("gradescope") / "gradescope.zip"
    subprocess.run([sys.executable, "-m", "mha_grade", "gradescope", "build", str(bundle)],
                   check=True, capture_output=True)
    return bundle


def autograder(bundle, tmp_path, submitted):
    """Unpack the zip where Gradescope would and run run_autograder on `submitted` files, as
    root in a throwaway root (it makes a user and runs the notebook as that user)."""
    why = gradescope_root.unavailable()
    if why:
        pytest.skip(why)
    with zipfile.ZipFile(bundle) as z:
        assert {"setup.sh", "run_autograder"} <= set(z.namelist())
        assert all(z.getinfo(n).external_attr >> 16 & 0o111 for n in ("setup.sh", "run_autograder"))
    root = gradescope_root.unpack(tmp_path, bundle)
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


def test_a_submission_without_a_notebook_scores_zero_with_a_reason(bundle, tmp_path):
    stray = tmp_path / "answers.txt"
    stray.write_text("I did it all on paper")
    report = autograder(bundle, tmp_path, [stray])
    assert report["score"] == 0
    assert report["tests"] == [] and "No notebook" in report["output"]


@pytest.mark.parametrize("name", ["setup.sh", "run_autograder"])
def test_the_entry_points_are_bash_scripts_that_stop_on_errors(name):
    text = (ROOT / "tools" / "autograder" / name).read_text()
    assert text.startswith("#!/usr/bin/env bash\n") and "set -euo pipefail" in text
