"""The instructor's machine against hostile names and notebooks (issue 23): output files never
written through a symbolic link, names made safe for a terminal and a spreadsheet, hidden
entries and FIFOs reported, Ctrl-C that stops at once and resumes, a flooding or
alarm-ignoring notebook stopped from outside, and the review flags.

The end-to-end tests grade the example chapter (a few seconds a notebook); the others call the
grader's functions directly.
"""

import contextlib
import csv
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pytest
from exercise_notebooks import EXAMPLE, fmt, student_edition

from mha_grade import assignments, compare, escape, outputs, sandbox, submissions, workers
from mha_grade import flags as flagging
from mha_grade.run import Settings, without_check_calls

GRADER = [sys.executable, "-m", "mha_grade", "grade"]
NAME = EXAMPLE.name
needs_sandbox = pytest.mark.skipif(sandbox.unavailable() is not None,
                                   reason=str(sandbox.unavailable()))


def student():
    return student_edition.student_edition(fmt.load(EXAMPLE))


def with_cell(text, nb=None):
    nb = nb or student()
    for i, c in enumerate(nb["cells"]):
        if "solution" in fmt.tags(c):
            nb["cells"][i:i] = [{"cell_type": "code", "metadata": {}, "outputs": [],
                                 "execution_count": None, "source": text}]
            return nb
    raise AssertionError("no solution cell")


def rows(path):
    with open(path, newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def run_grader(folder, *options, timeout=600):
    # no calibration (test_grading_limits.py tests it): one more run of the example first
    return subprocess.run([*GRADER, str(folder), "--source", str(EXAMPLE), "--no-calibrate",
                           *options], capture_output=True, text=True, timeout=timeout)


# ---------------------------------------------------------------------------------------------
# Names

@pytest.mark.parametrize("name, shown", [
    ("=HYPERLINK(\"http://x\")", "'=HYPERLINK(\"http://x\")"),
    ("+cmd|' /C calc'!A0", "'+cmd|' /C calc'!A0"),
    ("-2+3", "'-2+3"),
    ("@SUM(A1)", "'@SUM(A1)"),
    ("'quoted", "''quoted"),
    ("\tTAB", "\\u0009TAB"),  # escaped: no longer starts with a tab
    ("ok\x1b[2K\r3/3", "ok\\u001b[2K\\u000d3/3"),
    ("evil\u202egpj.ipynb", "evil\\u202egpj.ipynb"),
    ("caf\udce9", "caf\\xe9"),  # the byte 0xE9 of a Latin-1 name, as os hands it over
    ("back\\slash", "back\\\\slash"),
])
def test_names_are_made_safe_for_terminals_and_spreadsheets(name, shown):
    assert escape.cell(escape.display(name)) == shown
    assert escape.display(name).isprintable()


def test_display_keeps_different_names_apart():
    names = ["a\\x41", "a\udc41", "aA", "a\\u0041", "a\x41"]
    assert len({escape.display(n) for n in names}) == len(set(names))


# ---------------------------------------------------------------------------------------------
# Output files

def outcome(name, points):
    assignment = assignments.load_assignment(EXAMPLE)
    return compare.Outcome(name, assignment, points={"0.2": points, "0.3": 0},
                         status={"0.1": "by hand", "0.2": "correct", "0.3": "wrong"})


def test_a_symlink_named_like_an_output_file_is_replaced_never_followed(tmp_path):
    target = tmp_path / "bashrc"
    target.write_text("echo the instructor's shell\n")
    out = tmp_path / "out"
    out.mkdir()
    for name in ["grading_log.csv.part", "grades.csv.part", "grades.csv", "grading_log.csv"]:
        (out / name).symlink_to(target)
    writer = outputs.Writer(out)
    writer.add(outcome("=cmd|calc", 1))
    warnings = writer.close()
    assert target.read_text() == "echo the instructor's shell\n"
    for name in ["grades.csv", "grading_log.csv"]:
        assert not (out / name).is_symlink() and (out / name).is_file()
    assert rows(out / "grades.csv")[1]["notebook"] == "'=cmd|calc"
    assert any("not a regular file" in w for w in warnings)


def test_a_csv_is_never_replaced_by_a_shorter_one_silently(tmp_path):
    writer = outputs.Writer(tmp_path)
    for name in ["a.ipynb", "b.ipynb"]:
        writer.add(outcome(name, 1))
    assert writer.close() == []
    writer = outputs.Writer(tmp_path)
    writer.add(outcome("a.ipynb", 0))
    warnings = writer.close()
    assert any("grades.csv had 6 rows and now has 3" in w for w in warnings)
    assert len(rows(tmp_path / "grades.previous.csv")) == 6
    assert len(rows(tmp_path / "grades.csv")) == 3


def test_an_interrupted_runs_part_files_are_kept_aside_by_a_fresh_run(tmp_path):
    writer = outputs.Writer(tmp_path)
    writer.add(outcome("a.ipynb", 1))
    writer.close(finish=False)
    writer = outputs.Writer(tmp_path)  # not --resume
    assert any("kept as grading_log.previous.csv.part" in n for n in writer.notes)
    writer.close(finish=False)
    assert len(rows(tmp_path / "grading_log.previous.csv.part")) == 3


# ---------------------------------------------------------------------------------------------
# Flags

def read(*cells):
    return submissions.read_notebook(json.dumps(with_cell("\n".join(cells))).encode())


@pytest.mark.parametrize("code, flag", [
    ("from os import fork\nfork()", "processes"),
    ("from os import (getpid,\n    fork as f)", "processes"),
    ("import os as o\no.forkpty()", "processes"),
    ("import mha.checks.ch00 as c", "patches the grading"),
    ("from mha import checks", "patches the grading"),
    ("from mha.checks import ch00", "patches the grading"),
    ("!cat /etc/passwd", "shell escapes"),
    ("open('/autograder/results/results.json', 'w')", "touches the grader's files"),
    ("import importlib\nvars(importlib.import_module('o''s'))['fo''rk']()", "obfuscation"),
    ("getattr(m, 'spearman_difference_bootstrap')(x)", "obfuscation"),
    ("from importlib import import_module as im\nim('mha.che''cks.ch08')", "obfuscation"),
    # outside attack, round 5: a name held in a variable, a kernel of one's own, the garbage
    # collector, a process spawned in an earlier cell
    ("import mha\nname = 'answer' + '_watch'\ngetattr(mha, name).observe = print", "obfuscation"),
    ("import mha\nsetattr(mha, n, None)", "obfuscation"),
    ("import torch\n@torch.library.custom_op('me::sm', mutates_args=())\ndef sm(x): ...",
     "low-level"),
    ("from torch.library import Library\nlib = Library('me', 'DEF')", "low-level"),
    ("import gc\nmodes = [o for o in gc.get_objects() if hasattr(o, 'forbidden')]", "low-level"),
    ("import os\nos.posix_spawn('/bin/true', ['true'], {})", "processes"),
    # attack 41: the watch's hook or dispatch mode read, its record cleared
    ("import sys\nh = sys.getprofile()", "reaches past the answer watch"),
    ("import threading\nh = threading.gettrace()", "reaches past the answer watch"),
    ("import torch\nm = torch._C._get_dispatch_stack_at(0)", "reaches past the answer watch"),
    ("from torch.utils._python_dispatch import _get_current_dispatch_mode_stack as s",
     "reaches past the answer watch"),
])
def test_review_flags_see_more_import_forms(code, flag):
    assignment = assignments.load_assignment(EXAMPLE)
    assert flag in flagging.flags(read(code), assignment)


@pytest.mark.parametrize("code, flag", [
    ('import sys\n_s = getattr (sys, "set" "profile")', "patches the grading"),
    ('import sys\n_s = getattr (sys, "set" "profile")', "obfuscation"),
    ('import mha\nsetattr (mha, "x", 1)', "obfuscation"),
    ("exit exec (bytes.fromhex('7072696e74').decode())", "obfuscation"),  # attack 46
    # attack 51: the builtin in brackets, in a string annotation that typing evaluates
    ("def _(x: \"(exec)(bytes.fromhex('7072696e74').decode()) or int\"):\n    return x",
     "obfuscation"),
    ("def _(x: \"( eval ) ('1') or int\"):\n    return x", "obfuscation"),
    ("import mha\nx = mha . checks . ch06 . _rotate_reference", "patches the grading"),
    ("import mha\nx = (mha\n     .checks)", "patches the grading"),
    ("from mha . checks . ch06 import _rotate_reference as r", "patches the grading"),
    ("import torch\ntorch . softmax = lambda *a, **k: 0", "patches the grading"),
    ("import sys\nsys . monitoring", "patches the grading"),
    ("import sys\nsys . stdout = None", "patches the grading"),
])
def test_flags_read_names_however_they_are_spaced(code, flag):
    """Attack 35: spaces around a dot or before a parenthesis, and a name split into two string
    literals, hid these from the flags (Python reads them as written without)."""
    assignment = assignments.load_assignment(EXAMPLE)
    assert flag in flagging.flags(without_check_calls(read(code), assignment), assignment)


# The second attack's forms (round 4, attack2): a check's wrapper patched through an
# alias of its module (whose honest import the flags do not read), or through its closure; a
# reference reached through a module's insides.
@pytest.mark.parametrize("code, flag", [
    ("from mha.checks import ch00\nch00.scaled_scores = print", "patches the grading"),
    ("import mha.checks.ch00 as c\nc.scaled_scores = print", "patches the grading"),
    ("import mha.checks.ch0 as c\nc.scaled_scores = print", "patches the grading"),
    ("import mha.checks.ch01\nmha.checks.ch01.stable_softmax(print)", "patches the grading"),
    ("from mha.checks.ch00 import scaled_scores as s\n"
     "cells = [c.cell_contents for c in s.__closure__]", "obfuscation"),
    ("import mha\nf = mha.__getattribute__('pool_kv' + '_heads')", "obfuscation"),
    ("import sys as s\nm = s.modules['mha.kv_sharing']", "obfuscation"),
    ("import functools, mha\nf = functools.reduce(getattr, ['kv_sharing', 'x'], mha)",
     "obfuscation"),
    ("import mha\nf = \uff47etattr(mha, 'pool_kv_heads')", "obfuscation"),  # fullwidth g
    ("x = 1\n" * 20_000, "code too large to read (a cell over 64 KB, or over 256 KB in all)"),
])
def test_a_patched_wrapper_or_a_module_reached_through_its_insides_is_flagged(code, flag):
    assignment = assignments.load_assignment(EXAMPLE)
    nb = without_check_calls(read(code), assignment)
    assert flag in flagging.flags(nb, assignment)


@pytest.mark.parametrize("code", [
    "from mha.checks import ch00 as checks\n"
    "checks.scaled_scores(lambda q, k: q @ k.T / k.shape[-1] ** 0.5)",
    "import torch\nmodules = torch.nn.ModuleList([torch.nn.Linear(2, 2)])\nm = modules[0]",
    # instructor 48: a mistyped checks module (ch0 for ch00) raises when imported or called,
    # and patches nothing
    "import mha.checks.ch0\nmha.checks.ch0.scaled_scores(lambda q, k: q @ k.T)",
    "from mha.checks import ch0 as c",
])
def test_honest_code_raises_no_flag(code):
    assignment = assignments.load_assignment(EXAMPLE)
    assert flagging.flags(without_check_calls(read(code), assignment), assignment) == []


def test_many_crafted_cells_are_read_in_seconds_and_what_is_not_read_is_flagged():
    """The flags read at most 256 KB of a submission's new cells, measured after NFKC (one
    character can normalise to 18), with patterns that never scan past a line: five cells of
    60 KB each that made the old patterns backtrack for minutes."""
    assignment = assignments.load_assignment(EXAMPLE)
    nb = student()
    for filler in ("getattr(", "\n", "from mha import ", "getattr(", "\ufdfa"):
        nb = with_cell(filler * (60_000 // len(filler)), nb)
    start = time.monotonic()
    found = flagging.flags(without_check_calls(
        submissions.read_notebook(json.dumps(nb).encode()), assignment), assignment)
    assert time.monotonic() - start < 15
    assert "code too large to read (a cell over 64 KB, or over 256 KB in all)" in found


def test_reading_the_flags_of_a_crafted_cell_takes_no_time():
    """Many aliases of a checks module, or a cell just under the size the flags read, built to
    make the patterns backtrack: read in seconds (a pass per alias took minutes)."""
    assignment = assignments.load_assignment(EXAMPLE)
    aliases = "\n".join(f"from mha.checks import ch00 as a{i}" for i in range(1500))
    for code in (aliases + "\nx = 1" * 4000, "getattr(" * 8000, "\n" * 65_000,
                 "getattr(" * 4096 + "\ufdfa" * 32_768):
        start = time.monotonic()
        flagging.flags(without_check_calls(read(code), assignment), assignment)
        assert time.monotonic() - start < 15


@pytest.mark.parametrize("code, flagged", [
    ("import mha\ndef scaled_scores(q, k):\n    return mha.scoring.scaled_scores(q, k)", True),
    ("from mha.scoring import scaled_scores as s\ndef scaled_scores(q, k):\n"
     "    return s(q, k)", True),
    ("from mha import scaled_scores", True),
    # between two fullwidth quotes, which normalise to '"' only outside a string (attack 42)
    ('t = "\uff02"\nfrom mha import scaled_scores\nu = "\uff02"', True),
    ("import mha\nprint(mha.attention)", False),
    ("def scaled_scores(q, k):\n    return q @ k.T / k.shape[-1] ** 0.5", False),
])
def test_an_answer_calling_the_checks_reference_is_flagged(monkeypatch, code, flagged):
    check = __import__("mha.checks.ch00", fromlist=["x"])
    for function in vars(check).values():  # the attribute the checks carry (0.2's reference)
        if getattr(function, "exercise", None) == "0.2":
            monkeypatch.setattr(function, "reference_names", ("mha.scaled_scores",),
                                raising=False)
    assignment = assignments.load_assignment(EXAMPLE)
    assert assignment.references["0.2"] == ("mha.scaled_scores",)
    found = [f for f in flagging.flags(read(code), assignment) if "exercise 0.2" in f]
    assert found == (["calls the reference of exercise 0.2 (mha.scaled_scores)"]
                     if flagged else [])


CHAPTER_9 = Path(__file__).parent.parent / "notebooks" / "09_decoders.ipynb"
POOL = "pool_kv_heads_answer"  # stands for 9.5's answer; mha's pool_kv_heads is its reference


@pytest.fixture(scope="module")
def chapter_9():
    return assignments.load_assignment(CHAPTER_9)


def answered(code, *, in_answer_cell):
    """Chapter 9's student edition with ``code`` as 9.5's answer cell, or in a new last cell."""
    nb = student_edition.student_edition(fmt.load(CHAPTER_9))
    if in_answer_cell:
        (cell,) = [c for c in nb["cells"] if fmt.source(c).startswith("def mean_pool_kv(")]
        cell["source"] = code
    else:
        nb["cells"].append({"cell_type": "code", "source": code, "metadata": {},
                            "outputs": [], "execution_count": None})
    return submissions.read_notebook(json.dumps(nb).encode())


# the attack of round 3 (#8): none of these was flagged; mha.pool_kv_heads is used by the
# chapter's own later code, which made the name "given" everywhere
@pytest.mark.parametrize("in_answer_cell", [True, False], ids=["answer cell", "new cell"])
@pytest.mark.parametrize("code, introspects", [
    (f"from mha import pool_kv_heads\n{POOL} = pool_kv_heads", False),
    (f"from mha.kv_sharing import pool_kv_heads as p\n{POOL} = p", False),
    (f"from mha import *\n{POOL} = pool_kv_heads", True),
    (f"from mha.kv_sharing import *\n{POOL} = pool_kv_heads", True),
    (f"import inspect\n{POOL} = dict(inspect.getmembers(mha))['pool_kv_heads']", True),
    (f"import operator\n{POOL} = operator.attrgetter('pool_kv_heads')(mha)", True),
])
def test_every_import_form_of_a_reference_is_flagged(chapter_9, code, introspects,
                                                     in_answer_cell):
    found = flagging.flags(answered(code, in_answer_cell=in_answer_cell), chapter_9)
    reference = "calls the reference of exercise 9.5"
    assert any(f.startswith(reference) for f in found) or introspects, found
    assert any(f.startswith("star import or introspection") for f in found) == introspects


def test_a_reference_the_chapter_uses_is_flagged_in_an_answer_cell_only(chapter_9):
    code = f"{POOL} = mha.pool_kv_heads"
    assert "mha.pool_kv_heads" in chapter_9.given  # the chapter's later code uses it
    assert any("exercise 9.5" in f for f in flagging.flags(
        answered(code, in_answer_cell=True), chapter_9))
    # in a cell of the student's own that is no answer: the chapter's code does the same
    assert flagging.flags(answered(code, in_answer_cell=False), chapter_9) == []


# ---------------------------------------------------------------------------------------------
# Duplicates: one student's chapter in several notebooks, by name or by exercise labels

@pytest.mark.parametrize("rule", ["latest", "best"])
def test_one_students_copies_of_a_chapter_cost_one_grading_by_default(tmp_path, rule):
    """Issue 35, item 7: copies found by name or by exercise labels are one chapter; by
    default only the one handed in last is graded (the others get a row saying so), with
    --copies best every one is, each row naming the others."""
    solved = json.dumps(fmt.load(EXAMPLE))
    names = ["copy.ipynb", NAME, "final_answer.ipynb"]  # the last by its labels; handed in last
    (tmp_path / "ann").mkdir()
    for number, name in enumerate(names):
        (tmp_path / "ann" / name).write_text(solved)
        os.utime(tmp_path / "ann" / name, (1.7e9 + number, 1.7e9 + number))
    (tmp_path / "bob").mkdir()
    (tmp_path / "bob" / "mine.ipynb").write_text(solved)  # one copy: no duplicate
    chapters = [assignments.load_assignment(EXAMPLE)]
    found = {f.relative: f for f in submissions.find_submissions(tmp_path, chapters, rule=rule)}
    assert found["bob/mine.ipynb"].problem == "" and found["bob/mine.ipynb"].path
    graded = [n for n in names if found[f"ann/{n}"].path is not None]
    assert graded == (names if rule == "best" else ["final_answer.ipynb"])
    for name in names:
        problem = found[f"ann/{name}"].problem
        assert "chapter 00 handed in 3 times by ann" in problem, problem
        others = [f"ann/{n}" for n in names if n != name]
        if rule == "best" or name in graded:
            assert problem.startswith("duplicate:") and all(o in problem for o in others)
        else:
            assert problem.startswith("ignored copy:")
            assert "ann/final_answer.ipynb (handed in last, by" in problem


# ---------------------------------------------------------------------------------------------
# Resources: the process limit of an instructor who is not root, one CPU per sandbox (root)

NOBODY = 65534


def nobody_runs(argv, limit):
    """Run ``argv`` as the user nobody with ``limit`` (sandbox._limit's preexec function)."""
    def preexec():
        limit()
        os.setgroups([])
        os.setgid(NOBODY)
        os.setuid(NOBODY)
    return subprocess.run(argv, preexec_fn=preexec, capture_output=True, text=True, timeout=60)


@needs_sandbox
@pytest.mark.skipif(os.geteuid() != 0, reason="makes processes of the user nobody")
def test_a_busy_non_root_instructor_can_still_sandbox(monkeypatch):
    # 70 tasks of the instructor's user already running: a fixed RLIMIT_NPROC of 64 (what the
    # grader set before) leaves no room for bwrap, the limit counted from them does
    sleepers = [subprocess.Popen(["sleep", "60"], preexec_fn=lambda: os.setuid(NOBODY))
                for _ in range(70)]
    try:
        monkeypatch.setattr(sandbox.os, "geteuid", lambda: NOBODY)  # the grader as nobody
        monkeypatch.setattr(sandbox.os, "getuid", lambda: NOBODY)
        limits = sandbox.Limits()
        cgroup = sandbox.PidsCgroup(limits.processes)
        assert cgroup.path is None  # not root: no cgroup, the rlimit alone
        limit = sandbox._limit(cgroup, limits, None, True)
        monkeypatch.undo()
        assert sandbox.process_limit(limits, None) == limits.processes  # root: as before
        bwrap = ["bwrap", "--unshare-all", "--ro-bind", "/", "/", "--proc", "/proc", "--dev",
                 "/dev", "sh", "-c", "sleep 0 & sleep 0 & wait"]
        ran = nobody_runs(bwrap, limit)
        assert ran.returncode == 0, ran.stderr

        def fixed():
            resource.setrlimit(resource.RLIMIT_NPROC, (limits.processes, limits.processes))
        try:  # the old limit, for comparison: no room even to become the user, or for bwrap
            assert nobody_runs(bwrap, fixed).returncode != 0
        except BlockingIOError:
            pass
    finally:
        for sleeper in sleepers:
            sleeper.kill()
            sleeper.wait()


HOG = """
import os, sys, time
end = time.monotonic() + float(sys.argv[1])
children = []
for _ in range(6):
    pid = os.fork()
    if pid == 0:
        os.setsid()  # a scheduler group of its own: fair shares per session do not bound it
        while time.monotonic() < end:
            pass
        os._exit(0)
    children.append(pid)
for pid in children:
    os.waitpid(pid, 0)
t = os.times()
print(t.children_user + t.children_system)
"""


def quota(cgroup):
    """The CPUs a sandbox's cgroup may use (cgroup v2's cpu.max or v1's cfs quota)."""
    if cgroup.cpu_path is not None:
        return int((cgroup.cpu_path / "cpu.cfs_quota_us").read_text()) / int(
            (cgroup.cpu_path / "cpu.cfs_period_us").read_text())
    limit, period = (cgroup.path / "cpu.max").read_text().split()
    return int(limit) / int(period)


@pytest.mark.skipif(os.geteuid() != 0, reason="cgroups are the grader's as root only")
def test_a_sandbox_uses_at_most_its_cpu_quota_however_many_processes_it_starts():
    every = sandbox.PidsCgroup(64)  # what every sandbox gets
    try:
        if not every.cpu_limited:
            pytest.skip("no cpu cgroup controller here")
        assert quota(every) == 1.0
    finally:
        every.remove()
    # the quota holds: a quarter of a CPU, so that the bound shows on a loaded machine too
    # (six spinners there get about one CPU uncapped)
    cgroup = sandbox.PidsCgroup(64, cpus=0.25)
    try:
        start = time.monotonic()
        hog = subprocess.run([sys.executable, "-S", "-c", HOG, "3"], preexec_fn=cgroup.enter,
                             capture_output=True, text=True, timeout=60, check=True)
        wall = time.monotonic() - start
    finally:
        cgroup.remove()
    cpu = float(hog.stdout)
    print(f"six spinning processes for {wall:.1f} s used {cpu:.2f} CPU-seconds")
    assert cpu <= 0.25 * wall * 1.2 + 0.1, (cpu, wall)  # a period's slack at the end


# four forked children that each touch half a GB and hold it: 2 GB together (the attack of
# round 3, #6, at a quarter of its size: 4 x 1.75 GB held at once under a per-process limit)
BOMB = """
import os, sys, time
size = int(sys.argv[1])
children = []
for _ in range({children}):
    pid = os.fork()
    if pid == 0:
        block = bytearray(size)
        block[::4096] = b"\\x01" * len(block[::4096])  # touched: resident, not just reserved
        time.sleep(3)
        os._exit(0)
    children.append(pid)
killed = [os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == -9 for pid in children]
print(sum(killed))
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="cgroups are the grader's as root only")
def test_a_forking_memory_bomb_is_stopped_at_the_sandboxs_total_and_spares_its_neighbour():
    limit, block = 1536 * 2**20, 512 * 2**20  # 1.5 GB for 4 x 0.5 GB
    every = sandbox.PidsCgroup(64, memory=sandbox.Limits().total_memory)
    try:
        if not every.memory_limited:
            pytest.skip("no memory cgroup controller here")
    finally:
        every.remove()
    bomb, neighbour = (sandbox.PidsCgroup(64, memory=limit) for _ in range(2))
    try:
        runs = [subprocess.Popen([sys.executable, "-S", "-c", BOMB.format(children=n),
                                  str(block)], preexec_fn=cgroup.enter, text=True,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE)
                for cgroup, n in ((bomb, 4), (neighbour, 1))]
        (bombed, _), (spared, _) = (run.communicate(timeout=120) for run in runs)
    finally:
        bomb.remove()
        neighbour.remove()
    assert int(bombed) >= 1 and bomb.memory_kills >= 1  # killed by the kernel, and counted
    assert int(spared) == 0 and neighbour.memory_kills == 0 and runs[1].returncode == 0
    assert sandbox.memory_note(bomb, limit) == (
        f"the kernel killed {bomb.memory_kills} of its process(es) at the sandbox's memory "
        "limit (1.5 GB for all its processes together)")
    assert sandbox.memory_note(neighbour, limit) == ""


# ---------------------------------------------------------------------------------------------
# End to end: hidden entries, FIFOs, undecodable names, limits kept from outside, resume

IGNORE_ALARM = ("import signal, time\nsignal.signal(signal.SIGALRM, signal.SIG_IGN)\n"
                "time.sleep(1000)")
FLOOD = ("import os\nfor fd in range(3, 12):\n    try:\n"
         "        os.write(fd, b'[' * (5 * 2**20) + b'\\n')\n    except OSError:\n        pass")
JUNK = ("import os\nfor _ in range(10_000):\n    for fd in range(3, 12):\n        try:\n"
        "            os.write(fd, b'[[[' * 1000 + b'\\n')\n        except OSError:\n"
        "            pass")


@needs_sandbox
def test_a_hostile_class_folder_is_graded_and_resumed(tmp_path):
    folder = tmp_path / "class"
    folder.mkdir()
    honest = json.dumps(fmt.load(EXAMPLE))
    weird = os.fsdecode(b"\xff\x1b[31m=evil\xe2\x80\xae")  # not UTF-8, ESC, formula, U+202E
    (folder / weird).mkdir()
    (folder / weird / NAME).write_text(honest)
    (folder / "=HYPERLINK(1).txt").write_text("x")
    (folder / f".{NAME}").write_text(honest)
    (folder / ".ipynb_checkpoints").mkdir()
    (folder / ".ipynb_checkpoints" / NAME).write_text(honest)
    os.mkfifo(folder / f"pipe_{NAME}")
    (folder / "alarm").mkdir()
    (folder / "alarm" / NAME).write_text(json.dumps(with_cell(IGNORE_ALARM)))
    (folder / "flood").mkdir()
    (folder / "flood" / NAME).write_text(json.dumps(with_cell(FLOOD)))
    (folder / "junk").mkdir()
    (folder / "junk" / NAME).write_text(json.dumps(with_cell(JUNK)))
    start = time.monotonic()
    # a cell limit that the example's honest cells keep even on a loaded machine (torch is
    # imported before the first cell, under the notebook's limit only)
    run = run_grader(folder, "--jobs", "2", "--cell-timeout", "10", "--timeout", "200")
    seconds = time.monotonic() - start
    assert run.returncode == 0, run.stdout + run.stderr
    assert "\x1b" not in run.stdout + run.stderr and "\u202e" not in run.stdout
    log = {r["notebook"]: r for r in rows(folder / "grading_log.csv")}
    shown = "\\xff\\u001b[31m=evil\\u202e/" + NAME
    assert {r["points"] for r in rows(folder / "grades.csv") if r["notebook"] == shown} \
        == {"", "1", "2"}, log.get(shown)
    assert "'=HYPERLINK(1).txt" in log
    assert "hidden file" in log[f".{NAME}"]["problem"]
    assert "hidden folder" in log[".ipynb_checkpoints"]["problem"]
    assert "a FIFO" in log[f"pipe_{NAME}"]["problem"]
    assert "did not let itself be interrupted" in log[f"alarm/{NAME}"]["problem"]
    assert "more than 4 MB" in log[f"flood/{NAME}"]["problem"]
    assert "lines that are not messages" in log[f"junk/{NAME}"]["problem"]
    assert seconds < 180, seconds  # the alarm-ignoring cell was stopped 10 + 10 s in
    # --resume after all that: every row kept, nothing graded again
    for name in ["grades.csv", "grading_log.csv"]:
        os.replace(folder / name, folder / f"{name}.part")
    before = rows(folder / "grading_log.csv.part")
    again = run_grader(folder, "--resume")
    assert again.returncode == 0, again.stdout + again.stderr
    assert "grading 0 notebook(s)" in again.stdout
    assert sorted(map(str, rows(folder / "grading_log.csv"))) == sorted(map(str, before))


def sandboxes_with(marker):
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if marker.encode() in open(f"/proc/{pid}/cmdline", "rb").read():
                found.append(pid)
        except OSError:
            pass
    return found


@contextlib.contextmanager
def sigint_in_children(handler):
    """Start processes with SIGINT as a terminal gives it (``signal.default_int_handler``: a
    Python handler here becomes SIG_DFL in the child at exec) or as a background job of a script
    does (``signal.SIG_IGN``: ``cmd &`` in a non-interactive shell, as a CI script may start the
    suite; Python keeps an inherited SIG_IGN and Ctrl-C does nothing)."""
    previous = signal.signal(signal.SIGINT, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def sigint_ignored(pid):
    ignored = next(int(line.split()[1], 16) for line in open(f"/proc/{pid}/status")
                   if line.startswith("SigIgn:"))
    return bool(ignored & 1 << (signal.SIGINT - 1))


def started_at(pid):
    """When ``pid`` started (clock ticks after boot), ``None`` if it is gone: with the pid, names
    a process that a reused pid cannot pass for."""
    try:
        return int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def descendants(pid):
    """(pid, start) of every process below ``pid`` now."""
    children = {}
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            fields = open(f"/proc/{entry}/stat").read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append((int(entry), int(fields[19])))
    found, todo = [], [pid]
    while todo:
        below = children.get(todo.pop(), [])
        found += below
        todo += [child for child, _ in below]
    return found


@pytest.fixture
def class_being_graded(tmp_path):
    """``start(sigint)``: the grader running on a class of one quick notebook and two that
    sleep, as (its process, the class folder, the sleepers' marker), once the quick one is
    graded and a sleeper runs. A test that fails leaves nothing of it running."""
    started = []

    def start(sigint):
        folder = tmp_path / "class"
        marker = f"SLEEPER_{uuid.uuid4().hex}"
        sleeper = with_cell(f"import subprocess, sys, time\nsubprocess.Popen([sys.executable, "
                            f"'-c', 'import time; time.sleep(600)', {marker!r}])\n"
                            "time.sleep(600)")
        for who, nb in [("a_quick", fmt.load(EXAMPLE)), ("b_slow", sleeper),
                        ("c_slow", sleeper)]:
            (folder / who).mkdir(parents=True)
            (folder / who / NAME).write_text(json.dumps(nb))
        with sigint_in_children(sigint):
            process = subprocess.Popen([*GRADER, str(folder), "--source", str(EXAMPLE),
                                        "--jobs", "2", "--no-calibrate"],
                                       stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                       text=True)
        started.append((process, marker))
        part = folder / "grading_log.csv.part"
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and not (
                part.exists() and "a_quick" in part.read_text() and sandboxes_with(marker)):
            time.sleep(0.2)
        assert sandboxes_with(marker), "the slow notebook never started"
        process.below = descendants(process.pid)  # its grading processes and sandboxes
        return process, folder, marker

    yield start
    for process, marker in started:
        below = getattr(process, "below", [])
        if process.poll() is None:
            below = below + descendants(process.pid)  # also if start() failed before it looked
            process.kill()
            process.wait()
        left = [*below,
                *((int(pid), started_at(pid)) for pid in sandboxes_with(marker))]
        for pid, start_time in left:
            if start_time is not None and started_at(pid) == start_time:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
        process.communicate()  # last: the grading processes held its pipes open


def stops_within_seconds(process, sig, folder, marker):
    """``sig`` ends the run within seconds, with its exit status 130, no sandbox left, and the
    quick notebook alone in the .part files."""
    interrupted = time.monotonic()
    process.send_signal(sig)
    out, err = process.communicate(timeout=60)
    stopped = time.monotonic() - interrupted
    assert process.returncode == 130, out + err
    assert stopped < 10, stopped
    time.sleep(0.5)
    assert sandboxes_with(marker) == []
    assert "--resume" in err and not (folder / "grades.csv").exists()
    for part in ["grading_log.csv.part", "grades.csv.part"]:
        assert {r["notebook"] for r in rows(folder / part)} == {f"a_quick/{NAME}"}, part


@needs_sandbox
def test_ctrl_c_stops_within_seconds_keeps_the_part_files_and_resume_grades_the_rest(
        class_being_graded):
    process, folder, marker = class_being_graded(signal.default_int_handler)
    assert not sigint_ignored(process.pid)  # else Ctrl-C would do nothing: not a hang
    stops_within_seconds(process, signal.SIGINT, folder, marker)
    for who in ["b_slow", "c_slow"]:  # the students fix their notebooks; resume grades them
        (folder / who / NAME).write_text(json.dumps(fmt.load(EXAMPLE)))
    run = run_grader(folder, "--resume")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "resuming: 1 notebook(s) already graded" in run.stdout
    assert "grading 2 notebook(s)" in run.stdout
    assert {r["notebook"] for r in rows(folder / "grades.csv") if r["points"] == "2"} == {
        f"{who}/{NAME}" for who in ["a_quick", "b_slow", "c_slow"]}


@needs_sandbox
def test_a_background_run_ignores_ctrl_c_and_sigterm_stops_it_keeping_the_part_files(
        class_being_graded):
    """book/instructors.md: a run started in the background from a script ignores Ctrl-C, as
    background jobs do, and SIGTERM to the grader (``kill $!``) stops it the same way."""
    process, folder, marker = class_being_graded(signal.SIG_IGN)
    assert sigint_ignored(process.pid)
    process.send_signal(signal.SIGINT)
    time.sleep(2)
    assert process.poll() is None and sandboxes_with(marker)  # still grading
    stops_within_seconds(process, signal.SIGTERM, folder, marker)


def test_an_interrupt_stops_the_grading_processes_ignoring_ctrl_c_then_restores_it(
        monkeypatch):
    """While grade_all stops its grading processes after an interrupt a second Ctrl-C is
    ignored; then SIGINT is as it was (a background job's stays ignored)."""
    during_stop = []

    class Stoppable:
        def __init__(self, jobs, config, users=None):
            pass

        def run(self, items):
            yield items[0], None

        def stop(self, wait=5.0, interrupt=True):
            during_stop.append(signal.getsignal(signal.SIGINT))

    def interrupted(outcome):
        raise KeyboardInterrupt

    monkeypatch.setattr(workers, "Workers", Stoppable)
    settings = Settings(60, 30, False, sandbox.Limits())
    for handler in [lambda signum, frame: None, signal.SIG_IGN]:
        with sigint_in_children(handler):
            with pytest.raises(KeyboardInterrupt):
                workers.grade_all([submissions.Found("a/x.ipynb", Path("x.ipynb"))], [],
                                  settings, seed=0, sources=[], prefix=sandbox.Prefix.existing(
                                      Path(tempfile.gettempdir())), hide=[], jobs=1,
                                  on_outcome=interrupted)
            assert signal.getsignal(signal.SIGINT) is handler
    assert during_stop == [signal.SIG_IGN, signal.SIG_IGN]


HOPPER = """\
import os, sys, time
os.setsid()
end = time.monotonic() + 20
while time.monotonic() < end:  # forks and exits: its pid changes faster than /proc is read
    if os.fork():
        os._exit(0)
    with open(sys.argv[1], "w") as beat:
        beat.write(str(time.monotonic()))
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="makes processes of another user")
def test_a_process_that_keeps_changing_its_pid_is_killed_too():
    """A process that forks and exits in a loop slipped past killing by /proc listing (outside
    attack, reviews/2026-11-27/attack_recheck.md V1 in the review archive, branch
    reviews-archive); the one-pass kill(-1) ends it."""
    user = sandbox.User("hopper", 54321, 54321)
    tmp_path = Path(tempfile.mkdtemp())  # pytest's own is root's alone
    tmp_path.chmod(0o777)
    (tmp_path / "hopper.py").write_text(HOPPER)
    beat = tmp_path / "beat"
    subprocess.Popen(["setpriv", f"--reuid={user.uid}", f"--regid={user.gid}", "--clear-groups",
                      sys.executable, "-S", str(tmp_path / "hopper.py"), str(beat)])
    deadline = time.monotonic() + 10
    while not beat.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert beat.exists(), "the hopper did not start"
    sandbox.kill_user(user)
    time.sleep(0.5)
    before = beat.read_text()
    time.sleep(1.0)
    assert beat.read_text() == before, "the hopper is still forking"
    assert sandbox.processes_of(user.uid) == []
    shutil.rmtree(tmp_path)


PRECOMPUTED = '''ROT = {}
for d in range(2, 66, 2):
    eye = torch.eye(d, dtype=torch.float64)
    for p in range(0, 128):
        ROT[d, p] = mha.apply_rotary(eye, torch.full((d,), p))'''
READS_IT = '''def rope_complex(x, positions):
    rows = [x[i] @ ROT[x.shape[1], int(p)].to(x.dtype) for i, p in enumerate(positions)]
    return torch.stack(rows)'''
EXPERIMENT = "y = mha.apply_rotary(torch.randn(1, 4, 8), torch.arange(4))\nprint(y.shape)"
OWN = "def rope_complex(x, positions):\n    return x * 2"


@pytest.mark.parametrize("other, answer, flagged", [
    (PRECOMPUTED, READS_IT, True), (EXPERIMENT, READS_IT.replace("ROT", "y"), True),
    (EXPERIMENT, OWN, False), (PRECOMPUTED, OWN, False)])
def test_a_reference_precomputed_in_another_cell_for_the_answer_is_flagged(other, answer,
                                                                           flagged):
    """Attack 35 (F3): the rotation matrices of mha.apply_rotary, computed in a new cell before
    the answer, which only multiplied by them: the reference never ran while the check called
    the answer, and the chapter's own code uses it, so nothing was flagged."""
    chapter_6 = assignments.load_assignment(
        Path(__file__).resolve().parents[1] / "notebooks" / "06_positional_encoding.ipynb")
    nb = {"cells": [{"cell_type": "code", "source": other, "metadata": {}},
                    {"cell_type": "code", "source": answer, "metadata": {"tags": ["solution"]}}]}
    found = flagging.flags(nb, chapter_6)
    assert any(f.startswith("calls the reference of exercise 6.2") for f in found) == flagged, \
        found
