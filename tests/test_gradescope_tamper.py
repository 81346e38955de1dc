"""Gradescope mode against a hostile student (issue 23): run_autograder, in Gradescope's layout
inside a throwaway root (tests/gradescope_root.py), graded as root, on the example chapter
(0.2: 1 point, 0.3: 2 points).

Running run_autograder costs seconds (it imports torch and runs a notebook), so one run carries
every attack that does not get in another's way: the graded notebook is the *solved* chapter
with the attack cells in front of its answers (an honest 3 points; anything the attacks gained
would show above it, and their traces are in /canary), beside three more solved copies under
other names (handed in again, matched by name or by exercise labels), which must be ignored.

Without user namespaces (bwrap hidden, as in most containers) the notebook runs as the
unprivileged user alone, the case the attacks were found in; one run with bubblewrap shows the
detection and that the same attacks fail there too.

Each runs twice: with the course's venv (quick), and in a root whose only Python is pyenv's
3.10, as on Gradescope's default base image (Ubuntu 22.04), where the zip's own setup.sh
installed the grading environment (requirements-grading.txt; kept between runs in
~/.cache/mha-gradescope, the first install takes minutes: tests/gradescope_root.py).
"""

import hashlib
import json
import os
import stat
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
names = ['/autograder/source/src/mha_grade/gradescope.py',
         '/autograder/source/src/mha_grade/compare.py']
try:  # the grader's package as installed (the copy run_autograder imports)
    import mha_grade
    names += [str(pathlib.Path(mha_grade.__file__).with_name(n))
              for n in ('gradescope.py', 'compare.py')]
except ImportError as error:
    open('/canary/refused', 'a').write(f'import: {error}\\n')
for name in names:
    target = pathlib.Path(name)
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
            try:  # whole or not at all: it may be killed between two writes
                open('/canary/alive.part', 'w').write(repr(time.time()))
                os.replace('/canary/alive.part', '/canary/alive')
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



# (d) stop (SIGSTOP) whatever the grader runs to kill the user's processes, so that it hangs
STOP_KILLER = """
import os, signal, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        me, parent = os.getpid(), os.getppid()
        while True:
            for entry in os.listdir('/proc'):
                if not entry.isdigit() or int(entry) in (me, parent):
                    continue
                try:
                    cmd = open(f'/proc/{entry}/cmdline', 'rb').read()
                    if b'os.kill' in cmd or b'run_notebook' not in cmd:
                        os.kill(int(entry), signal.SIGSTOP)
                        open('/canary/stopped', 'a').write(f'{entry} {cmd[:80]!r}\\n')
                except OSError:
                    pass
            time.sleep(0.005)
    os._exit(0)
os.wait()
"""

# (e) read Gradescope's metadata: the submitters' names, e-mails and earlier results
READ_METADATA = """
try:
    text = open('/autograder/submission_metadata.json').read()
    open('/canary/metadata', 'w').write(text)
except OSError as error:
    open('/canary/metadata-refused', 'w').write(str(error))
"""
METADATA = {"users": [{"email": "victim@uni.edu", "name": "Victim"}],
            "previous_submissions": [{"score": 3.0}]}
ATTACKS = [EDIT_GRADER, DAEMON, FORGE_ROWS, STOP_KILLER, READ_METADATA]
COPIES = [f"again_{EXAMPLE.name}", "copy.ipynb", "final_answer.ipynb"]


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


# where run_autograder runs: the course's venv, or setup.sh's environment in a Python 3.10 root
ROOTS = ["course venv", "Python 3.10 root"]


def system_python(where):
    if where == "course venv":
        return None
    system = gradescope_root.system_python("3.10")
    if system is None:
        pytest.skip("no Python 3.10 on this machine (pyenv install 3.10, as CI's machine has)")
    return system


def autograde(tmp_path, submission, *, userns=False, system=None):
    """Run run_autograder on ``{name: notebook}``: (results.json, its stdout, root, canary).
    With ``system``, setup.sh first installs the grading environment in that root."""
    root = gradescope_root.unpack(tmp_path, chapters=False)  # the example chapter alone
    if system is not None:
        start = time.monotonic()
        setup = system.setup(root)
        assert setup.returncode == 0, setup.stdout + setup.stderr
        print(f"setup.sh: {time.monotonic() - start:.1f} s")
    for number, (name, nb) in enumerate(submission.items()):  # handed in in this order
        (root / "submission" / name).write_text(json.dumps(nb))
        os.utime(root / "submission" / name, (1.7e9 + number, 1.7e9 + number))
    metadata = root / "submission_metadata.json"
    metadata.write_text(json.dumps(METADATA))
    metadata.chmod(0o644)  # as Gradescope leaves it
    source = digest(root / "source")
    canary = tmp_path / "canary"
    start = time.monotonic()
    run = gradescope_root.run_autograder(root, canary, userns=userns, timeout=300,
                                         system=system)
    assert run.returncode == 0, run.stdout + run.stderr
    print(f"run_autograder: {time.monotonic() - start:.1f} s")
    assert digest(root / "source") == source  # nothing of the grader changed
    results = root / "results" / "results.json"
    report = json.loads(results.read_text())
    return report, run.stdout, results, canary


@pytest.fixture(scope="module", params=ROOTS)
def attacked(request, tmp_path_factory):
    """One run without user namespaces: every attack in the graded notebook, three copies."""
    system = system_python(request.param)
    tmp_path = tmp_path_factory.mktemp("attacked")
    attack = SOLVED
    for cell in ATTACKS:
        attack = with_cell(cell, attack)
    copies = dict.fromkeys(COPIES, SOLVED)
    # the attacks handed in last: the copy graded
    report, out, results, canary = autograde(tmp_path, copies | {EXAMPLE.name: attack},
                                             system=system)
    return report, results, canary, tmp_path / "autograder"


def scored(report):
    return [t for t in report["tests"] if t.get("max_score")]


def test_a_cell_cannot_edit_the_grader(attacked):
    report, _, canary, _ = attacked
    assert not (canary / "edited").exists()
    assert "Permission denied" in (canary / "refused").read_text()
    assert "without bubblewrap." in report["output"]
    assert "not asked for" not in report["output"]  # why: the instructor's log only (#39 L1)
    # its own answers, no more: 0.2, then 0.3 in two parts (the second hidden)
    assert [t.get("score") for t in scored(report)] == [1.0, 1.0, 1.0]


def test_a_daemon_is_killed_before_results_json_is_written(attacked):
    report, results, canary, _ = attacked
    assert report["score"] == 3 and len(scored(report)) == 3
    assert not (canary / "forged").exists()
    # it ran after the notebook ended, and was dead before results.json was written
    last_sign_of_life = float((canary / "alive").read_text())
    assert last_sign_of_life < results.stat().st_mtime
    assert all("process(es) it left running were killed" in t["output"]
               for t in scored(report))


def test_forged_rows_find_no_grades_file(attacked):
    report, _, canary, _ = attacked
    assert (canary / "found").read_text() == "[]" and not (canary / "forged").exists()
    assert all(t.get("score", 0) <= t.get("max_score", 0) for t in report["tests"])


def test_the_student_cannot_stop_the_killing(attacked):
    # the daemon stopped every process of its own user it could see but the notebook's: the
    # killing is root's, so run_autograder ended and wrote results.json all the same
    report, results, canary, _ = attacked
    assert results.exists() and report["score"] == 3
    stopped = (canary / "stopped").read_text() if (canary / "stopped").exists() else ""
    assert "os.kill" not in stopped


def test_submission_metadata_is_unreadable_to_the_student(attacked):
    _, _, canary, root = attacked
    assert not (canary / "metadata").exists()
    assert "Permission denied" in (canary / "metadata-refused").read_text()
    mode = (root / "submission_metadata.json").stat()
    assert stat.S_IMODE(mode.st_mode) == 0o600 and mode.st_uid == 0


def test_one_chapter_handed_in_again_under_any_name_is_graded_once(attacked):
    # again_00_example_exercises.ipynb matches by name; copy.ipynb and final_answer.ipynb only
    # by their exercise labels: each would be graded as the chapter, so all are one chapter
    report, _, _, _ = attacked
    assert report["score"] == 3
    assert {t["name"].split(":")[0] for t in scored(report)} == {EXAMPLE.name}
    ignored = [t for t in report["tests"] if t["name"].endswith(": ignored")]
    assert sorted(t["name"] for t in ignored) == sorted(f"{n}: ignored" for n in COPIES)
    assert all(t["score"] == t["max_score"] == 0 and f"{EXAMPLE.name} is graded, because it "
               "was handed in last (by the files' modification times)" in t["output"]
               for t in ignored)


@pytest.mark.parametrize("where", ROOTS)
def test_with_bubblewrap_the_same_attacks_fail_and_the_output_says_so(tmp_path, where):
    # the attacks in front of honest answers: 3 points show that the notebook ran (attack 40: in
    # a Python 3.10 root no notebook started in the sandbox, and an attack "scored 0" unrun)
    attack = with_cell(EDIT_GRADER + DAEMON + FORGE_ROWS + READ_METADATA, fmt.load(EXAMPLE))
    report, out, _, canary = autograde(tmp_path, {EXAMPLE.name: attack}, userns=True,
                                       system=system_python(where))
    assert report["score"] == 3 and "inside a bubblewrap sandbox" in report["output"], report
    assert not any((canary / n).exists() for n in ("edited", "forged", "alive", "found",
                                                   "metadata"))


def test_with_bubblewrap_an_honest_notebook_is_not_said_to_leave_processes(tmp_path):
    """The instructor's own notebook once read "1 process(es) it left running were killed" on
    every test (issue 35, item 11): the sandbox's processes, not yet ended with it."""
    report, _, _, _ = autograde(tmp_path, {EXAMPLE.name: SOLVED}, userns=True)
    assert report["score"] == 3 and "inside a bubblewrap sandbox" in report["output"]
    assert not any("left running" in t["output"] for t in report["tests"])


def test_results_json_is_written_when_grading_itself_fails(tmp_path, monkeypatch):
    from mha_grade import gradescope, sandbox

    def broken(*args):
        raise RuntimeError("processes of student survive: [1234]")

    monkeypatch.setattr(gradescope, "_run", broken)
    monkeypatch.setattr(gradescope, "prepare", lambda: sandbox.User("nobody-here", 2**31 - 7,
                                                                    2**31 - 7))
    report = gradescope.run(tmp_path)
    written = json.loads((tmp_path / "results" / "results.json").read_text())
    assert written == report and report["score"] == 0
    assert [t["name"] for t in report["tests"]] == ["autograder"]
    assert "processes of student survive" in report["tests"][0]["output"]
