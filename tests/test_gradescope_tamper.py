"""Gradescope mode against a hostile student (issue 23): run_autograder, in Gradescope's layout
inside a throwaway root (tests/gradescope_root.py), graded as root, with each attack as the
submission. Every attack starts from the student edition of the example chapter (0.2: 1 point,
0.3: 2 points), so an attack that earns nothing scores 0; the honest duplicates score 3.

Without user namespaces (bwrap hidden, as in most containers) the notebook runs as the
unprivileged user alone, the case the attacks were found in; one run with bubblewrap shows the
detection and that the same attacks fail there too.
"""

import hashlib
import json
import time

import gradescope_root
import pytest
from exercise_notebooks import EXAMPLE, fmt, student_edition

pytestmark = pytest.mark.skipif(gradescope_root.unavailable() is not None,
                                reason=str(gradescope_root.unavailable()))

SOLVED = fmt.load(EXAMPLE)

# (a) rewrite the grader so that every test gets its maximum
EDIT_GRADER = """
import pathlib
for name in ['gradescope.py', 'grade.py']:
    target = pathlib.Path('/autograder/source/tools') / name
    try:
        text = target.read_text()
        target.write_text(text.replace('score=float(outcome.points.get(exercise.name, 0))',
                                       'score=float(most)'))
        open('/canary/edited', 'a').write(name + '\\n')
    except OSError as error:
        open('/canary/refused', 'a').write(f'{name}: {error}\\n')
"""

# (b) a double-forked daemon that rewrites results.json until run_autograder ends
DAEMON = """
import json, os, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        forged = json.dumps({'score': 1004.0, 'tests': []})
        while True:
            try:
                open('/canary/alive', 'w').write(repr(time.time()))
            except OSError:
                pass
            try:
                with open('/autograder/results/results.json', 'w') as handle:
                    handle.write(forged)
                open('/canary/forged', 'a').write('x')
            except OSError:
                pass
            time.sleep(0.05)
    os._exit(0)
os.wait()
"""

# (c) forged rows appended to whatever grades.csv.part the grader keeps in /tmp
FORGE_ROWS = """
import glob
row = '00_example_exercises.ipynb,0.2,1000,1\\n' * 4
found = glob.glob('/tmp/**/grades.csv*', recursive=True) + glob.glob('/tmp/*.part')
open('/canary/found', 'w').write(repr(found))
for path in found:
    try:
        open(path, 'a').write(row)
        open('/canary/forged', 'a').write(path + '\\n')
    except OSError:
        pass
"""


def with_cell(text, nb=None):
    nb = nb or student_edition.student_edition(fmt.load(EXAMPLE))
    for i, c in enumerate(nb["cells"]):
        if "solution" in fmt.tags(c):
            nb["cells"][i:i] = [{"cell_type": "code", "metadata": {}, "outputs": [],
                                 "execution_count": None, "source": text}]
            return nb
    raise AssertionError("no solution cell")


def digest(folder):
    return {p: hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def autograde(tmp_path, submission, *, userns=False):
    """Run run_autograder on ``{name: notebook}``: (results.json, its stdout, root, canary)."""
    root = gradescope_root.unpack(tmp_path, chapters=False)  # the example chapter alone
    for name, nb in submission.items():
        (root / "submission" / name).write_text(json.dumps(nb))
    source = digest(root / "source")
    canary = tmp_path / "canary"
    start = time.monotonic()
    run = gradescope_root.run_autograder(root, canary, userns=userns)
    assert run.returncode == 0, run.stdout + run.stderr
    print(f"run_autograder: {time.monotonic() - start:.1f} s")
    assert digest(root / "source") == source  # nothing of the grader changed
    results = root / "results" / "results.json"
    report = json.loads(results.read_text())
    return report, run.stdout, results, canary


def test_a_cell_cannot_edit_the_grader(tmp_path):
    report, out, _, canary = autograde(tmp_path, {EXAMPLE.name: with_cell(EDIT_GRADER)})
    assert report["score"] == 0
    assert not (canary / "edited").exists()
    assert "Permission denied" in (canary / "refused").read_text()
    assert "without bubblewrap" in report["output"]


def test_a_daemon_is_killed_before_results_json_is_written(tmp_path):
    report, out, results, canary = autograde(tmp_path, {EXAMPLE.name: with_cell(DAEMON)})
    assert report["score"] == 0 and len(report["tests"]) == 3
    assert not (canary / "forged").exists()
    # it ran after the notebook ended, and was dead before results.json was written
    last_sign_of_life = float((canary / "alive").read_text())
    assert last_sign_of_life < results.stat().st_mtime
    assert all("process(es) it left running were killed" in t["output"]
               for t in report["tests"])


def test_forged_rows_find_no_grades_file(tmp_path):
    report, out, _, canary = autograde(tmp_path, {EXAMPLE.name: with_cell(FORGE_ROWS)})
    assert report["score"] == 0
    assert (canary / "found").read_text() == "[]" and not (canary / "forged").exists()
    assert all(t.get("score", 0) <= t.get("max_score", 0) for t in report["tests"])


def test_one_chapter_handed_in_three_times_is_graded_once(tmp_path):
    names = [EXAMPLE.name, f"again_{EXAMPLE.name}", f"final_{EXAMPLE.name}"]
    report, out, _, _ = autograde(tmp_path, dict.fromkeys(names, SOLVED))
    assert report["score"] == 3
    scored = [t for t in report["tests"] if t.get("max_score")]
    assert {t["name"].split(":")[0] for t in scored} == {EXAMPLE.name}
    ignored = [t for t in report["tests"] if t["name"].endswith(": ignored")]
    assert sorted(t["name"] for t in ignored) == sorted(f"{n}: ignored" for n in names[1:])
    assert all(t["score"] == t["max_score"] == 0 and "is graded, because its name is exactly "
               "the chapter's" in t["output"] for t in ignored)


def test_with_bubblewrap_the_same_attacks_fail_and_the_output_says_so(tmp_path):
    attack = with_cell(EDIT_GRADER + DAEMON + FORGE_ROWS)
    report, out, _, canary = autograde(tmp_path, {EXAMPLE.name: attack}, userns=True)
    assert report["score"] == 0 and "inside a bubblewrap sandbox" in report["output"]
    assert not any((canary / n).exists() for n in ("edited", "forged", "alive", "found"))
