"""The host against a notebook graded as root (issue 35): the notebook never runs as the host's
root, keeps no capability, cannot write the kernel's settings, and each grading process has a uid
of its own, so that ending one submission's processes ends no other's."""

import csv
import errno
import json
import os
import subprocess
import sys
import time

import pytest
from exercise_notebooks import EXAMPLE, fmt, student_edition

from mha_grade import sandbox
from mha_grade.run import GRADER_CPU_SECONDS

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="grading as root"),
    pytest.mark.skipif(sandbox.unavailable() is not None, reason=str(sandbox.unavailable())),
]

# Tries each way the notebook could act as the host's root, then reports them all in its error
# (the grading log keeps a notebook's first error). Writes put back the value they read, and
# files are opened for writing without truncating: a success would change nothing.
PROBE = r'''
import json, os
tried = {"uid": os.getuid(), "gid": os.getgid(), "groups": os.getgroups()}
status = dict(line.split(":", 1) for line in open("/proc/self/status") if ":" in line)
tried["effective capabilities"] = status["CapEff"].strip()
tried["uid map"] = open("/proc/self/uid_map").read().split()
def attempt(name, action):
    try:
        action()
        tried[name] = "done"
    except OSError as error:
        tried[name] = type(error).__name__
def put_back(path):
    value = open(path).read()
    with open(path, "w") as handle:
        handle.write(value)
attempt("write vm.swappiness", lambda: put_back("/proc/sys/vm/swappiness"))
for name in ("/proc/sys/kernel/core_pattern", "/proc/sys/kernel/panic",
             "/proc/sys/vm/drop_caches", "/proc/sysrq-trigger"):
    attempt("open " + name, lambda: os.close(os.open(name, os.O_WRONLY)))
attempt("setuid 0", lambda: os.setuid(0))
attempt("signal PID 1", lambda: os.kill(1, 0))
done = sorted(k for k, v in tried.items() if v == "done")
short = [tried["uid"], tried["gid"], tried["groups"], tried["effective capabilities"],
         tried["uid map"][:2], tried["setuid 0"], done]
raise RuntimeError("PROBE" + json.dumps(short, separators=(",", ":")) + "PROBE")
'''


def probing_notebook():
    nb = student_edition.student_edition(fmt.load(EXAMPLE))
    nb["cells"].insert(1, {"cell_type": "code", "metadata": {}, "outputs": [],
                           "execution_count": None, "source": PROBE})
    return nb


def probes(log):
    with open(log, newline="", encoding="utf-8") as handle:
        errors = {row["notebook"]: row["first_error"] for row in csv.DictReader(handle)}
    keys = ["uid", "gid", "groups", "effective capabilities", "uid map", "setuid 0", "done"]
    return {name: dict(zip(keys, json.loads(error.split("PROBE")[1]), strict=True))
            for name, error in errors.items()}


@pytest.fixture(scope="module")
def graded_as_root(tmp_path_factory):
    """Two students' probes, graded as root two at a time, in the sandbox and without it."""
    found = {}
    for mode in ("sandbox", "no-sandbox"):
        folder = tmp_path_factory.mktemp(mode)
        for name in ("ada", "bob"):
            (folder / name).mkdir()
            (folder / name / EXAMPLE.name).write_text(json.dumps(probing_notebook()))
        run = subprocess.run([sys.executable, "-m", "mha_grade", "grade", str(folder),
                              "--source", str(EXAMPLE), "--no-calibrate", "--jobs", "2",
                              *(["--no-sandbox"] if mode == "no-sandbox" else [])],
                             capture_output=True, text=True, timeout=600)
        if mode == "no-sandbox" and "cannot grade as root here" in run.stderr:
            found[mode] = run.stderr  # this machine's Python is closed to other users
            continue
        assert run.returncode == 0, run.stderr
        found[mode] = probes(folder / "grading_log.csv")
    return found


@pytest.mark.parametrize("mode", ["sandbox", "no-sandbox"])
def test_a_notebook_graded_as_root_is_an_unprivileged_user(graded_as_root, mode):
    if isinstance(graded_as_root[mode], str):
        assert "closed to other users" in graded_as_root[mode]  # refused, with the reason
        pytest.skip("the unprivileged user cannot start this Python outside the sandbox")
    tried = list(graded_as_root[mode].values())
    assert len(tried) == 2
    for probe in tried:
        assert probe["uid"] in sandbox.SPARE_UIDS and probe["gid"] == probe["uid"]
        assert probe["groups"] in ([], [probe["gid"]])
        assert int(probe["effective capabilities"], 16) == 0
        assert probe["setuid 0"] == "PermissionError"
    # a uid of its own per grading process: killing one's processes leaves the other's
    assert tried[0]["uid"] != tried[1]["uid"]


def test_the_kernels_settings_are_closed_to_a_notebook_graded_as_root(graded_as_root):
    for probe in graded_as_root["sandbox"].values():
        # no user namespace whose uid 0 is the host's root (uid_map "0 0 1"), or not as uid 0
        assert probe["uid map"] != ["0", "0"] or probe["uid"] != 0
        assert probe["done"] == [], probe  # every write, open and signal refused


def test_two_grading_runs_never_share_a_uid():
    first = sandbox.reserve_users(2)
    second = sandbox.reserve_users(2)  # held by this process's first locks: others are taken
    assert len({u.uid for u in first + second}) == 4
    assert all(u.uid in sandbox.SPARE_UIDS for u in first + second)


def test_a_uid_with_a_running_process_is_never_reserved():
    uid = sandbox.SPARE_UIDS[0]
    user = sandbox.User("someone", uid, uid)
    sleeper = subprocess.Popen(["sleep", "30"], preexec_fn=user.drop)
    try:
        assert uid not in {u.uid for u in sandbox.reserve_users(3)}
    finally:
        sleeper.kill()
        sleeper.wait()


def test_without_setpriv_root_is_told_why_it_cannot_sandbox(monkeypatch):
    which = sandbox.shutil.which
    monkeypatch.setattr(sandbox.shutil, "which", lambda n: None if n == "setpriv" else which(n))
    assert "setpriv" in sandbox.unavailable()


# Valid messages that mean nothing, each a line just under the 4 MB a message may have: parsing
# one costs the grading process most of a second of CPU, outside the sandbox's cgroup
MEANINGLESS = ("import os\nline = b'{\"x\":[' + b'[],' * (2**20 - 10) + b'[]]}\\n'\n"
               "for _ in range(200):\n    for fd in range(3, 12):\n        try:\n"
               "            os.write(fd, line)\n        except OSError:\n            pass")


def test_a_flood_of_valid_messages_is_stopped_at_the_graders_cpu_budget(tmp_path):
    nb = student_edition.student_edition(fmt.load(EXAMPLE))
    nb["cells"].insert(1, {"cell_type": "code", "metadata": {}, "outputs": [],
                           "execution_count": None, "source": MEANINGLESS})
    (tmp_path / "flood").mkdir()
    (tmp_path / "flood" / EXAMPLE.name).write_text(json.dumps(nb))
    start = time.monotonic()
    run = subprocess.run([sys.executable, "-m", "mha_grade", "grade", str(tmp_path),
                          "--source", str(EXAMPLE), "--no-calibrate", "--timeout", "600"],
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    with open(tmp_path / "grading_log.csv", newline="", encoding="utf-8") as handle:
        problem = next(csv.DictReader(handle))["problem"]
    assert f"more than {GRADER_CPU_SECONDS:.0f} s of CPU" in problem
    assert time.monotonic() - start < 120  # 200 lines would take minutes of the grader's CPU


# The kernel's keyring of a uid outlives the sandbox (outside attack): one notebook wrote to it,
# the next graded as the same uid read it. Every keyring call must fail, in every sandbox.
KEYRING = r'''
import ctypes, platform
calls = {"x86_64": (248, 249, 250), "aarch64": (217, 218, 219)}[platform.machine()]
libc = ctypes.CDLL(None, use_errno=True)
text = b"left by an earlier notebook"
add = libc.syscall(calls[0], b"user", b"drop", text, len(text), -4)  # the uid's keyring
add_errno = ctypes.get_errno()
found = libc.syscall(calls[1], b"user", b"drop", None, -4)
# and a message whose check key is a list (it once made grading the notebook fail)
import os
for fd in os.listdir("/proc/self/fd"):
    try:
        flags = int(open(f"/proc/self/fdinfo/{fd}").read().split("flags:")[1].split()[0], 8)
        if os.readlink(f"/proc/self/fd/{fd}").startswith("pipe:") and flags & 3 == 1:
            os.write(int(fd), b'{"ready": ["x"], "types": []}\n')
    except OSError:
        pass
raise RuntimeError(f"PROBE{[add, add_errno, found]}PROBE")
'''


@pytest.mark.skipif(sandbox.keyring_filter() is None, reason="no filter for this architecture")
def test_a_notebook_can_leave_nothing_in_its_uids_keyring_nor_break_its_grading(tmp_path):
    nb = student_edition.student_edition(fmt.load(EXAMPLE))
    nb["cells"].insert(1, {"cell_type": "code", "metadata": {}, "outputs": [],
                           "execution_count": None, "source": KEYRING})
    for name in ("ada", "bob"):  # one grading process: the same uid, one after the other
        (tmp_path / name).mkdir()
        (tmp_path / name / EXAMPLE.name).write_text(json.dumps(nb))
    run = subprocess.run([sys.executable, "-m", "mha_grade", "grade", str(tmp_path),
                          "--source", str(EXAMPLE), "--no-calibrate", "--jobs", "1"],
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    with open(tmp_path / "grading_log.csv", newline="", encoding="utf-8") as handle:
        log = list(csv.DictReader(handle))
    assert not any("grader failed" in row["problem"] for row in log)
    errors = {row["first_error"] for row in log}
    assert len(errors) == 1  # the same for both: refused, nothing found
    add, add_errno, found = json.loads(errors.pop().split("PROBE")[1])
    assert add == -1 and add_errno == errno.EPERM and found == -1
