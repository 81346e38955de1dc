"""The host against a notebook graded as root (issue 35): the notebook never runs as the host's
root, keeps no capability, cannot write the kernel's settings or use its keyrings, and each
grading process has a uid of its own, so that ending one submission's processes ends no other's;
the grading process spends a bounded CPU on one submission's messages."""

import csv
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

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
# the kernel's keyring of the uid outlives the sandbox: one notebook left data there for the
# next graded as the same uid (outside attack); a key added here is revoked at once
import ctypes, platform
calls = {"x86_64": (248, 250), "aarch64": (217, 219)}[platform.machine()]
libc = ctypes.CDLL(None, use_errno=True)
def add_key():
    key = libc.syscall(calls[0], b"user", b"probe", b"x", 1, -4)  # KEY_SPEC_USER_KEYRING
    if key == -1:
        raise OSError(ctypes.get_errno(), "add_key")
    libc.syscall(calls[1], 3, key)  # KEYCTL_REVOKE
attempt("add a key to the uid's keyring", add_key)
# io_uring (its operations pass seccomp unseen) and userfaultfd: kernel surface no notebook needs
def kernel_call(number, *args):
    def call():
        fd = libc.syscall(number, *args)
        if fd == -1:
            raise OSError(ctypes.get_errno(), str(number))
        os.close(fd)
    return call
ring_params = ctypes.create_string_buffer(120)
io_uring_setup, userfaultfd = {"x86_64": (425, 323), "aarch64": (425, 282)}[platform.machine()]
attempt("set up an io_uring", kernel_call(io_uring_setup, 1, ring_params))
attempt("open a userfaultfd", kernel_call(userfaultfd, 1))  # UFFD_USER_MODE_ONLY
# a user namespace gives its maker every capability inside it: more of the kernel to attack
def new_user_namespace():
    if os.fork() == 0:  # in a child: the notebook's own process stays as it is
        os._exit(0 if libc.unshare(0x10000000) == 0 else 1)  # CLONE_NEWUSER
    if os.wait()[1] == 0:
        return
    raise PermissionError("unshare refused")
attempt("make a user namespace", new_user_namespace)
# a message whose check key is a list once made grading the notebook fail (TypeError)
for fd in os.listdir("/proc/self/fd"):
    try:
        flags = int(open(f"/proc/self/fdinfo/{fd}").read().split("flags:")[1].split()[0], 8)
        if os.readlink(f"/proc/self/fd/{fd}").startswith("pipe:") and flags & 3 == 1:
            os.write(int(fd), b'{"ready": ["x"], "types": []}\n')
    except OSError:
        pass
done = sorted(k for k, v in tried.items() if v == "done")
short = [tried["uid"], tried["gid"], tried["groups"], tried["effective capabilities"],
         tried["uid map"][:2], tried["setuid 0"], done]
raise RuntimeError("PROBE" + json.dumps(short, separators=(",", ":")) + "PROBE")
'''


# Valid messages that mean nothing, each a line just under the 4 MB a message may have: parsing
# one costs the grading process most of a second of CPU, outside the sandbox's cgroup
MEANINGLESS = ("import os\nline = b'{\"x\":[' + b'[],' * (2**20 - 10) + b'[]]}\\n'\n"
               "for _ in range(200):\n    for fd in range(3, 12):\n        try:\n"
               "            os.write(fd, line)\n        except OSError:\n            pass")


def notebook_with(cell):
    nb = student_edition.student_edition(fmt.load(EXAMPLE))
    nb["cells"].insert(1, {"cell_type": "code", "metadata": {}, "outputs": [],
                           "execution_count": None, "source": cell})
    return nb


def grade_as_root(folder, *options):
    """The grading log's rows by notebook, or the grader's refusal (its stderr)."""
    run = subprocess.run([sys.executable, "-m", "mha_grade", "grade", str(folder), "--source",
                          str(EXAMPLE), "--no-calibrate", "--jobs", "2", *options],
                         capture_output=True, text=True, timeout=600)
    if "cannot grade as root here" in run.stderr:
        return run.stderr
    assert run.returncode == 0, run.stderr
    with open(folder / "grading_log.csv", newline="", encoding="utf-8") as handle:
        return {row["notebook"].split("/")[0]: row for row in csv.DictReader(handle)}


def probe(row):
    keys = ["uid", "gid", "groups", "effective capabilities", "uid map", "setuid 0", "done"]
    return dict(zip(keys, json.loads(row["first_error"].split("PROBE")[1]), strict=True))


@pytest.fixture(scope="module")
def graded_as_root(tmp_path_factory):
    """Two students' probes, graded as root two at a time, in the sandbox (beside a third
    student's flood of messages) and without it."""
    found = {}
    for mode in ("sandbox", "no-sandbox"):
        folder = tmp_path_factory.mktemp(mode)
        students = {"ada": PROBE, "bob": PROBE} | ({"flood": MEANINGLESS}
                                                  if mode == "sandbox" else {})
        for name, cell in students.items():
            (folder / name).mkdir()
            (folder / name / EXAMPLE.name).write_text(json.dumps(notebook_with(cell)))
        start = time.monotonic()
        found[mode] = grade_as_root(folder, *(["--no-sandbox"] if mode == "no-sandbox"
                                              else []))
        found[mode + " seconds"] = time.monotonic() - start
    return found


@pytest.mark.parametrize("mode", ["sandbox", "no-sandbox"])
def test_a_notebook_graded_as_root_is_an_unprivileged_user(graded_as_root, mode):
    if isinstance(graded_as_root[mode], str):
        assert "closed to other users" in graded_as_root[mode]  # refused, with the reason
        pytest.skip("the unprivileged user cannot start this Python outside the sandbox")
    tried = [probe(graded_as_root[mode][name]) for name in ("ada", "bob")]
    for found in tried:
        assert found["uid"] in sandbox.SPARE_UIDS and found["gid"] == found["uid"]
        assert found["groups"] in ([], [found["gid"]])
        assert int(found["effective capabilities"], 16) == 0
        assert found["setuid 0"] == "PermissionError"
    # a uid of its own per grading process: killing one's processes leaves the other's
    assert tried[0]["uid"] != tried[1]["uid"]
    assert not any("grader failed" in row["problem"]
                   for row in graded_as_root[mode].values())


def test_the_kernels_settings_and_keyrings_are_closed_to_a_notebook_graded_as_root(
        graded_as_root):
    for name in ("ada", "bob"):
        found = probe(graded_as_root["sandbox"][name])
        # no user namespace whose uid 0 is the host's root (uid_map "0 0 1"), or not as uid 0
        assert found["uid map"] != ["0", "0"] or found["uid"] != 0
        assert found["done"] == [], found  # every write, open, signal and key refused


def test_a_flood_of_valid_messages_is_stopped_at_the_graders_cpu_budget(graded_as_root):
    problem = graded_as_root["sandbox"]["flood"]["problem"]
    assert f"more than {GRADER_CPU_SECONDS:.0f} s of CPU" in problem
    # its 200 lines would take the grader minutes of CPU; the probes beside it are graded too
    assert graded_as_root["sandbox seconds"] < 120


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



def test_a_linked_environment_runs_the_python_its_bind_holds(tmp_path, monkeypatch):
    """Issue 39 H2: with .venv a symbolic link (an environment kept on another disk), the
    sandbox bound the real folder but ran the linked path, which does not exist inside: every
    notebook got 0. The program and PATH name the real folder, the one bound."""
    link = tmp_path / "venv"
    link.symlink_to(sys.prefix)
    monkeypatch.setattr(sandbox.sys, "prefix", str(link))
    plan = tmp_path / "plan.json"
    plan.write_text("{}")
    prefix = sandbox.Prefix()
    try:
        options, program = sandbox.command(prefix, plan, sandbox.Limits(),
                                           sandbox.User("s", sandbox.SPARE_UIDS[0],
                                                        sandbox.SPARE_UIDS[0]))
    finally:
        prefix.remove()
    real = os.path.realpath(sys.prefix)
    python = program[program.index("--") + 1]
    assert python == os.path.join(real, "bin", "python") and os.path.exists(python)
    bound = {options[i + 2] for i, o in enumerate(options) if o == "--ro-bind"}
    assert any(real == b or real.startswith(b + os.sep) for b in bound)
    path = options[options.index("PATH", options.index("--setenv")) + 1]
    assert path.startswith(os.path.join(real, "bin") + ":")


# Run by Debian's own Python (any user may run it), as the sandbox runs a notebook without root
WRITES = r'''
import json, os
def write(path, mb):
    try:
        with open(path, "wb") as handle:
            for _ in range(mb):
                handle.write(b"x" * 2**20)
        return "written"
    except OSError as error:
        return os.strerror(error.errno)
print(json.dumps({"/": write("/file", 1), "/opt": write("/opt/file", 1),
                  "/dev": write("/dev/file", 1), "/tmp/home": write("/tmp/home/file", 1),
                  "/dev/shm, 40 MB": write("/dev/shm/a", 40),
                  "/dev/shm, 40 MB more": write("/dev/shm/b", 40)}))
'''


@pytest.mark.skipif(not os.access("/usr/bin/python3", os.X_OK), reason="no system Python")
def test_without_root_a_notebook_writes_only_to_its_sized_tmp_and_dev_shm(monkeypatch):
    """Outside attack: graded without root, the sandbox's own root and /dev are tmpfs the
    notebook owns, bounded by nothing (2 GB written into /dev). Here the sandbox's options for a
    grader without root run as `nobody`: only /tmp and a 64 MB /dev/shm take writes."""
    work = Path(tempfile.mkdtemp())  # not under pytest's folder, which is root's alone
    try:
        (work / "grader").mkdir()
        (work / "plan.json").write_text("{}")
        for path in (work, work / "grader", work / "plan.json"):
            path.chmod(0o755)

        class Grader:  # the read-only copy of the grader a sandbox binds: empty here
            root = work / "grader"

        monkeypatch.setattr(os, "geteuid", lambda: 1000)
        monkeypatch.setattr(sandbox, "python_paths", list)  # this Python is root's: not bound
        options, _ = sandbox.command(Grader, work / "plan.json", sandbox.Limits())
        monkeypatch.undo()
        run = subprocess.run(["setpriv", "--reuid", "65534", "--regid", "65534",
                              "--clear-groups", "bwrap", *options, "/usr/bin/python3", "-c",
                              WRITES], capture_output=True, text=True, timeout=60, cwd="/")
    finally:
        shutil.rmtree(work)
    if run.returncode and "namespace" in run.stderr:
        pytest.skip(f"no user namespaces for a user here: {run.stderr.strip()}")
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout) == {
        "/": "Read-only file system", "/opt": "Read-only file system",
        "/dev": "Read-only file system", "/tmp/home": "written",
        "/dev/shm, 40 MB": "written", "/dev/shm, 40 MB more": "No space left on device"}


@pytest.mark.skipif(shutil.which("bwrap") is None or os.geteuid() != 0,
                    reason="bubblewrap as root, as the Gradescope image grades")
def test_the_sandbox_holds_every_link_to_the_interpreter_and_the_grader_stops_without_one(
        tmp_path, monkeypatch):
    """Attack 40 (F4): in a Python 3.10 root the venv's python was a link to /root/bin/python3, a
    link to pyenv's; /root/bin was not bound, so no notebook started and the class scored 0. The
    chain's links are made in the sandbox; a sandbox that cannot start Python stops the grader
    before it grades anything."""
    real = os.path.realpath(sys.executable)
    links = tmp_path / "bin_elsewhere"  # stands for /root/bin: bound by nothing
    links.mkdir()
    (links / "python3").symlink_to(real)
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(links / "python3")
    monkeypatch.setattr(sys, "prefix", str(venv))
    assert sandbox.interpreter_links(str(venv / "bin" / "python")) == [
        (str(links / "python3"), str(venv / "bin" / "python")), (real, str(links / "python3"))]
    user = sandbox.reserve_users(1)[0]
    assert sandbox.cannot_start_python_in_sandbox(user) is None
    # without the links (as before): the grader says why, and stops
    monkeypatch.setattr(sandbox, "interpreter_links", lambda python: [])
    why = sandbox.cannot_start_python_in_sandbox(user)
    assert why and "cannot start" in why and "score 0" in why, why
