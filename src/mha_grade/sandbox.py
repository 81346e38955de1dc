"""A bubblewrap sandbox for one submission (Linux): what it sees, what it may use, how it ends.

Each submission runs in ``bwrap`` (https://github.com/containers/bubblewrap, Debian's
``bubblewrap``) with:

- new user, PID, network, IPC, UTS and cgroup namespaces (``--unshare-all``): ``/proc`` shows the
  submission's own processes only, and there is no network but a loopback device;
- never the host's root: when the grader is root, bubblewrap sets the sandbox up as root but with
  no user namespace (whose uid 0 would be the host's root), and ``setpriv`` (util-linux) makes
  the notebook's process an unprivileged ``User`` with no capabilities before Python starts; a
  local grading run reserves one such user per grading process (``reserve_users``);
  ``/proc/sys`` is read-only in every mode, so the kernel's settings cannot be written;
- no environment but a few variables set here (``--clearenv``): nothing of the grader's;
- read-only: the system (``/usr``, ``/lib*``, ``/bin``, a few files of ``/etc``), the Python
  environment (the interpreter and its site-packages), and a *copy* of the course package
  ``mha`` with the in-sandbox runner, made once per grading run (never the editable sources);
- writable: a fresh ``/tmp`` (the home folder is ``/tmp/home``) on a tmpfs of a fixed size, the
  cap on all the bytes the submission can write;
- the plan of the one submission it runs, read-only, and nothing else of the grader's machine:
  not the other submissions, the instructor's notebooks, the grades, or the home folder;
- no kernel keyrings (a seccomp filter: they outlive the sandbox, per uid), no new user
  namespace, and no system call of another architecture's numbering;
- resource limits: address space (``RLIMIT_AS``), processes (``RLIMIT_NPROC``, and a ``pids``
  cgroup when the grader runs as root), the size of
  one file (``RLIMIT_FSIZE``), CPU seconds, no core files; as root also a ``memory`` cgroup, the
  bound on the memory of *all* the sandbox's processes together (``RLIMIT_AS`` is per process:
  without root, a sandbox's bound is that times its processes);
- an end: ``--die-with-parent`` and a wall-clock limit kept by the grader, which kills
  bwrap; the sandbox's PID 1 dies with it and the kernel kills every process of its PID namespace,
  even one that started a session of its own.
"""

from __future__ import annotations

import contextlib
import errno
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Limits:
    memory: int = 6 * 2**30  # bytes of address space per process (torch reserves a lot)
    # bytes resident in the whole sandbox, every process and no swap (a memory cgroup: root only)
    total_memory: int = 6 * 2**30
    processes: int = 64
    file_size: int = 64 * 2**20  # one file
    disk: int = 512 * 2**20  # everything written (the tmpfs of /tmp)
    shared_memory: int = 64 * 2**20  # /dev/shm (POSIX semaphores and shared memory)
    cpu_seconds: int = 1200


SYSTEM_PATHS = ["/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32"]
ETC_FILES = ["/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/localtime",
             "/etc/nsswitch.conf", "/etc/fonts", "/etc/alternatives", "/etc/ssl/certs",
             "/etc/mime.types"]


@dataclass(frozen=True)
class User:
    """An unprivileged account the submission runs as (Gradescope: the grader is root)."""

    name: str
    uid: int
    gid: int

    def drop(self) -> None:
        """In a child before exec: become this user for good, with no way back to root (no
        supplementary groups, and no_new_privs, so that no setuid program can change it)."""
        os.setgroups([])
        os.setgid(self.gid)
        os.setuid(self.uid)
        _no_new_privileges()

    def become(self) -> list[str]:
        """The command prefix that runs a program as this user, from root inside the sandbox:
        no groups, no capabilities (none inherited, an empty bounding set), no_new_privs."""
        return ["setpriv", f"--reuid={self.uid}", f"--regid={self.gid}", "--clear-groups",
                "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs", "--"]


def _no_new_privileges() -> None:
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")


def unavailable(user: User | None = None) -> str | None:
    """Why this machine cannot sandbox (``None`` when it can), for ``user`` if given (as root,
    a user is what the notebooks run as: one that has no account is tried if none is given)."""
    if platform.system() != "Linux":
        return (f"the sandbox uses Linux namespaces (bubblewrap); this is {platform.system()}: "
                "grade inside a Linux container or virtual machine")
    if shutil.which("bwrap") is None:
        return "bubblewrap is not installed (Debian/Ubuntu: apt-get install bubblewrap)"
    as_root = os.geteuid() == 0
    if as_root and shutil.which("setpriv") is None:
        return ("setpriv (util-linux) is not installed: as root, the sandbox needs it to run "
                "notebooks as an unprivileged user (Debian/Ubuntu: apt-get install util-linux)")
    if as_root:
        user = user or User("nobody-yet", SPARE_UIDS[-1], SPARE_UIDS[-1])
        argv = [*NAMESPACES_AS_ROOT, "--die-with-parent", *CAPABILITIES_AS_ROOT,
                "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev", *user.become(), "true"]
    else:
        argv = ["--unshare-all", "--die-with-parent", "--ro-bind", "/", "/", "--proc", "/proc",
                "--dev", "/dev", "true"]
    try:
        run = subprocess.run(["bwrap", *argv], capture_output=True, text=True, timeout=30,
                             preexec_fn=user.drop if user and not as_root else None)
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"bubblewrap does not start: {error}"
    if run.returncode != 0:
        return ("bubblewrap cannot make namespaces here (unprivileged user namespaces may be "
                f"disabled): {run.stderr.strip()[:200]}")
    return None


def cannot_start_python(user: User) -> str | None:
    """Why ``user`` cannot start this Python and import torch outside a sandbox (``None`` if
    it can): as root, ``--no-sandbox`` runs the notebooks as that user, on the host's paths."""
    python = os.path.join(os.path.realpath(sys.prefix), "bin", "python")
    try:
        run = subprocess.run([python, "-s", "-c", "import torch"], capture_output=True,
                             text=True, timeout=120, preexec_fn=user.drop, env={}, cwd="/")
        why = run.stderr.strip()[-200:] if run.returncode else None
    except (OSError, subprocess.TimeoutExpired) as error:
        why = str(error)
    return why and (f"the unprivileged user the notebooks run as cannot start {python} and "
                    f"import torch ({why}): a folder above the environment is closed to other "
                    "users; grade in the sandbox (without --no-sandbox), which binds the "
                    "environment for them")


# As root, bubblewrap makes no user namespace: one whose uid 0 is the host's root would make the
# notebook host root (it could write /proc/sys). The notebook's process becomes an unprivileged
# user instead, through setpriv, which needs these two capabilities (and SETPCAP, to empty its
# bounding set); it loses all of them when its uid changes.
NAMESPACES_AS_ROOT = ["--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts",
                      "--unshare-cgroup-try"]
CAPABILITIES_AS_ROOT = ["--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add",
                        "CAP_SETGID", "--cap-add", "CAP_SETPCAP"]

# Local grading as root runs each grading process's notebooks as a uid of its own from this range:
# uids that no account has, so that killing every process of one ends that submission's only.
SPARE_UIDS = range(2**31 - 1100, 2**31 - 100)
RESERVED = Path("/run/mha-grade")  # a lock file per uid in use (root's alone)


def reserve_users(count: int) -> list[User]:
    """``count`` users for one local grading run as root: uids of ``SPARE_UIDS`` that no account
    or group has, no process runs as, and no other grading run holds (a lock held until this
    process ends). ``RuntimeError`` if too few are free."""
    import fcntl
    import grp
    import pwd

    folder = RESERVED if RESERVED.parent.is_dir() else Path(tempfile.gettempdir(),
                                                               "mha-grade-root")
    folder.mkdir(mode=0o700, exist_ok=True)
    if folder.is_symlink() or folder.stat().st_uid != 0:
        raise RuntimeError(f"{folder} is not root's own folder: remove it")
    busy = set()
    for entry in os.listdir("/proc"):
        with contextlib.suppress(OSError):
            busy.add(os.stat(f"/proc/{entry}").st_uid)
    users: list[User] = []
    for uid in SPARE_UIDS:
        if len(users) == count:
            break
        try:
            pwd.getpwuid(uid)
            continue
        except KeyError:
            pass
        try:
            grp.getgrgid(uid)
            continue
        except KeyError:
            pass
        if uid in busy:
            continue
        handle = os.open(folder / str(uid), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(handle)
            continue
        _HELD.append(handle)  # the lock lasts as long as this process
        users.append(User(f"student-{uid}", uid, uid))
    if len(users) < count:
        raise RuntimeError(f"only {len(users)} of the {count} users needed are free in "
                           f"uids {SPARE_UIDS.start}-{SPARE_UIDS.stop - 1}")
    return users


_HELD: list[int] = []


# The kernel's keyrings are kept per uid, beyond the processes that fill them: a notebook could
# leave data in its uid's keyring for the next notebook graded as that uid (an outside attack:
# reviews of issue 35). A seccomp filter (bwrap --seccomp) refuses the three keyring system calls,
# as Docker's default profile does, and every call of another architecture's numbering (32-bit
# or x32 calls on x86_64), which the notebook's Python never makes. It also refuses a new user
# namespace (unshare or clone with CLONE_NEWUSER; clone3, whose flags it cannot read, answers
# ENOSYS, so that the C library falls back to clone): one gives its maker every capability
# inside it, more of the kernel to attack (the same outside attack). io_uring (whose operations
# seccomp cannot see) and userfaultfd, which no notebook needs, are refused as Docker refuses them.
SYSCALLS = {  # AUDIT_ARCH_*; refused: add_key, request_key, keyctl, io_uring_setup, _enter,
    # _register, userfaultfd; unshare, clone; clone3
    "x86_64": (0xC000003E, (248, 249, 250, 425, 426, 427, 323), (272, 56), 435),
    "aarch64": (0xC00000B7, (217, 218, 219, 425, 426, 427, 282), (97, 220), 435)}
CLONE_NEWUSER = 0x10000000


def seccomp_filter() -> bytes | None:
    """The seccomp program (classic BPF, ``struct sock_filter`` records) for this machine's
    architecture; ``None`` where it has none here (keyrings and user namespaces then stay
    open)."""
    import struct

    if platform.machine() not in SYSCALLS:
        return None
    arch, refused, namespaces, clone3 = SYSCALLS[platform.machine()]
    load, jeq, jge, jset, ret = 0x20, 0x15, 0x35, 0x45, 0x06  # BPF_LD|W|ABS, BPF_JMP|JEQ|K, ..
    allow, refuse = 0x7FFF0000, 0x00050000 | errno.EPERM  # SECCOMP_RET_ALLOW, RET_ERRNO
    absent = 0x00050000 | errno.ENOSYS
    # the program's last four records: allow, refuse, absent, and the flags test of a
    # namespace call; a jump's offset counts the records it skips
    calls = [*refused, clone3, *namespaces]
    targets = ["refuse"] * len(refused) + ["absent"] + ["flags"] * len(namespaces)
    n = len(calls)
    # where each jump lands, counted from the first test: after the n tests come allow,
    # refuse, absent, then the flags test; a jump from record k to record t skips t - k - 1
    at = {"allow": n, "refuse": n + 1, "absent": n + 2, "flags": n + 3}
    head = [(load, 0, 0, 4),                    # the call's architecture
            (jeq, 1, 0, arch),                  # this machine's: on; any other: refused
            (ret, 0, 0, refuse),
            (load, 0, 0, 0),                    # the call's number
            (jge, at["refuse"], 0, 0x40000000)]  # x32 numbering: refused
    tests = [(jeq, at[t] - i - 1, 0, call) for i, (call, t) in enumerate(zip(calls, targets,
                                                                              strict=True))]
    tail = [(ret, 0, 0, allow),
            (ret, 0, 0, refuse),
            (ret, 0, 0, absent),
            (load, 0, 0, 16),                   # the first argument's low word: the flags
            (jset, 0, 1, CLONE_NEWUSER),
            (ret, 0, 0, refuse),
            (ret, 0, 0, allow)]
    program = head + tests + tail
    return b"".join(struct.pack("=HBBI", *instruction) for instruction in program)


class Prefix:
    """The read-only copy of ``mha`` and of the runner that every sandbox of one run sees."""

    def __init__(self, package: Path | None = None):
        import mha

        package = package or Path(mha.__file__).resolve().parent
        self.root = Path(tempfile.mkdtemp(prefix="mha-grader-"))
        shutil.copytree(package, self.root / "mha",
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        shutil.copy(HERE / "run_notebook.py", self.root / "run_notebook.py")
        for path in sorted(self.root.rglob("*"), reverse=True):
            path.chmod(0o555 if path.is_dir() else 0o444)
        self.root.chmod(0o555)

    @classmethod
    def existing(cls, root: Path) -> Prefix:
        """The prefix another process of this grading run made (a grading process's view)."""
        prefix = cls.__new__(cls)
        prefix.root = root
        return prefix

    def remove(self) -> None:
        for path in [self.root, *self.root.rglob("*")]:
            if path.is_dir():
                path.chmod(0o755)
        shutil.rmtree(self.root, ignore_errors=True)


def python_paths() -> list[str]:
    """Folders the Python environment needs: the interpreter's and every site-packages folder,
    except folders that hold ``mha`` sources themselves (an editable install)."""
    paths = [sys.base_prefix, sys.prefix]
    for entry in sys.path:  # site-packages folders only (not tools/, tests/ or src/)
        if (entry and os.path.isdir(entry) and not os.path.isdir(os.path.join(entry, "mha"))
                and os.path.basename(entry) in ("site-packages", "dist-packages")):
            paths.append(entry)
    out: list[str] = []
    for path in paths:
        path = os.path.realpath(path)
        if path not in out and not any(path.startswith(p + os.sep) for p in out):
            out.append(path)
    return out


def interpreter_links(python: str) -> list[tuple[str, str]]:
    """The chain of links from ``python`` to the interpreter it runs: each (its target, where
    the link is, in a folder without links)."""
    links, path = [], python
    for _ in range(40):  # the kernel's own limit on a chain of links
        folder = os.path.realpath(os.path.dirname(path))
        path = os.path.join(folder, os.path.basename(path))
        if not os.path.islink(path):
            break
        target = os.readlink(path)
        links.append((target, path))
        path = os.path.join(folder, target)
    return links


def cannot_start_python_in_sandbox(user: User | None) -> str | None:
    """Why this Python does not start in the sandbox as the notebooks get it (``None`` if it
    does): every notebook would then crash at once and score 0 for the grader's own failure."""
    with tempfile.TemporaryDirectory(prefix="mha-probe-") as folder:
        plan = Path(folder) / "plan.json"
        plan.write_text("{}")
        options, runner = command(Prefix.existing(Path(folder)), plan, Limits(), user)
        program = [*runner[:-2], "-c", "import sys"]  # the interpreter, without the runner
        try:
            run = subprocess.run(["bwrap", *options, *program], capture_output=True, text=True,
                                 timeout=120, env={})
            why = (run.stderr.strip()[-200:] or f"exit status {run.returncode}") \
                if run.returncode else None
        except (OSError, subprocess.TimeoutExpired) as error:
            why = str(error)
    return why and (f"the sandbox cannot start {program[-3]} ({why}): no notebook could run, "
                    "and each would score 0 for the grader's own failure")


def command(prefix: Prefix, plan: Path, limits: Limits,
            user: User | None = None) -> tuple[list[str], list[str]]:
    """bwrap's options and the program they run: the in-sandbox runner on ``plan`` (a JSON
    file). As root, ``user`` is required: the program runs as that user (see the module)."""
    as_root = os.geteuid() == 0
    if as_root and user is None:
        raise ValueError("user: as root, the sandbox runs notebooks as an unprivileged user")
    # the environment as it really is: a .venv that is a link is bound at its target
    python = os.path.join(os.path.realpath(sys.prefix), "bin", "python")
    argv = ([*NAMESPACES_AS_ROOT, *CAPABILITIES_AS_ROOT] if as_root
            else ["--unshare-all", "--cap-drop", "ALL"])
    argv += ["--die-with-parent", "--new-session", "--clearenv", "--hostname", "sandbox",
             # the tmpfs first: the environment may live under /tmp (a CI clone), and a bind
             # made before it would be hidden by it
             "--size", str(limits.disk), "--perms", "1777", "--tmpfs", "/tmp"]
    made = {"/", "/tmp"}

    def bind(source: str, dest: str) -> list[str]:
        """A read-only bind, after the folders above ``dest`` (bwrap makes them 700 as root)."""
        folders = [str(p) for p in reversed(Path(dest).parents) if str(p) not in made]
        made.update(folders + [dest])
        return [arg for folder in folders for arg in ("--dir", folder)] + [
            "--ro-bind", source, dest]

    bound = []
    for path in SYSTEM_PATHS + ETC_FILES + python_paths():
        if os.path.islink(path):
            argv += ["--symlink", os.readlink(path), path]
            made.add(path)
        elif os.path.exists(path):
            argv += bind(path, path)
            bound.append(path)
    # the links from the environment's python to the interpreter, where no bind holds them (a
    # venv's python -> /root/bin/python3 -> pyenv's: no notebook could start; attack 40)
    for target, link in interpreter_links(python):
        if not any(link == p or link.startswith(p.rstrip(os.sep) + os.sep) for p in bound):
            folders = [str(p) for p in reversed(Path(link).parents) if str(p) not in made]
            made.update(folders + [link])
            argv += [arg for folder in folders for arg in ("--dir", folder)]
            argv += ["--symlink", target, link]
    # the kernel's settings read-only (their values are the sandbox's own namespaces'); the rest
    # of /proc stays as it is: a process may write its own files there (clear_refs, to measure)
    argv += ["--proc", "/proc", "--ro-bind", "/proc/sys", "/proc/sys", "--dev", "/dev",
             "--size", str(limits.shared_memory), "--perms", "1777", "--tmpfs", "/dev/shm",
             *bind(str(prefix.root), "/opt/grader"), *bind(str(plan), "/opt/plan.json"),
             "--perms", "0777", "--dir", "/tmp/home", "--chdir", "/tmp/home",
             # only /tmp and /dev/shm, both sized, take writes: the root and /dev are tmpfs that
             # a notebook run without root owns (an outside attack wrote 2 GB into /dev)
             "--remount-ro", "/dev", "--remount-ro", "/"]
    env = {"PATH": f"{os.path.dirname(python)}:/usr/local/bin:/usr/bin:/bin",
           "HOME": "/tmp/home",
           "LANG": "C.UTF-8", "MPLBACKEND": "Agg", "MPLCONFIGDIR": "/tmp/home/.matplotlib",
           "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONDONTWRITEBYTECODE": "1",
           "PYTHONWARNINGS": "ignore", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "TMPDIR": "/tmp", "USER": "student",
           "PYTHONPATH": "/opt/grader"}  # for Python processes the notebook starts, too
    for key, value in env.items():
        argv += ["--setenv", key, value]
    program = [python, "-s", "/opt/grader/run_notebook.py", "/opt/plan.json"]
    return argv, (user.become() if as_root else []) + program


class PidsCgroup:
    """The cgroups of one sandbox (root only; cgroup v1 or v2): ``pids.max`` caps its processes
    and, where the ``cpu`` controller is available, a quota of one CPU (``cpu.max`` in v2,
    ``cpu.cfs_quota_us`` in v1) bounds how much it can slow the sandboxes beside it; with
    ``memory``, where the ``memory`` controller is available, all its processes together hold at
    most that many bytes, without swap (``memory.max`` and ``memory.swap.max`` in v2,
    ``memory.limit_in_bytes`` and ``memory.memsw.limit_in_bytes`` in v1): past it the kernel
    kills one of them, and ``memory_kills`` counts those kills (read when the cgroup goes)."""

    def __init__(self, limit: int, cpus: float = 1.0, memory: int | None = None):
        self.path: Path | None = None  # the pids cgroup (v2: pids and cpu together)
        self.cpu_path: Path | None = None  # v1: the cpu cgroup, apart
        self.memory_path: Path | None = None  # where memory is limited (v2: self.path)
        self.cpu_limited = False
        self.memory_kills = 0
        if os.geteuid() != 0:
            return
        name = f"mha-grade-{uuid.uuid4().hex[:12]}"
        period = 100_000
        quota = str(int(cpus * period))
        for base in (Path("/sys/fs/cgroup/pids"), Path("/sys/fs/cgroup")):
            if (base / "cgroup.procs").exists() and (
                    base.name == "pids" or "pids" in _read(base / "cgroup.controllers")):
                _remove_stale(base)
                try:
                    path = base / name
                    if base.name != "pids":  # v2: the cpu controller where it may be enabled
                        _write(base / "cgroup.subtree_control", "+cpu")
                    path.mkdir()
                    (path / "pids.max").write_text(str(limit))
                    self.path = path
                    if base.name != "pids":
                        self.cpu_limited = _write(path / "cpu.max", f"{quota} {period}")
                        if memory is not None and _write(base / "cgroup.subtree_control",
                                                         "+memory") and _write(
                                path / "memory.max", str(memory)):
                            _write(path / "memory.swap.max", "0")  # absent: no swap at all
                            self.memory_path = path
                    break
                except OSError:
                    continue
        v1 = Path("/sys/fs/cgroup/cpu")
        if not self.cpu_limited and (v1 / "cpu.cfs_quota_us").exists():
            _remove_stale(v1)
            try:
                (v1 / name).mkdir()
                self.cpu_path = v1 / name
                self.cpu_limited = (_write(self.cpu_path / "cpu.cfs_period_us", str(period))
                                    and _write(self.cpu_path / "cpu.cfs_quota_us", quota))
            except OSError:
                pass
        v1 = Path("/sys/fs/cgroup/memory")
        if memory is not None and self.memory_path is None and (
                v1 / "memory.limit_in_bytes").exists():
            _remove_stale(v1)
            try:
                (v1 / name).mkdir()
                self.memory_path = v1 / name
                # memsw (memory and swap together) only after the limit, never below it
                if not (_write(self.memory_path / "memory.limit_in_bytes", str(memory))
                        and (not (self.memory_path / "memory.memsw.limit_in_bytes").exists()
                             or _write(self.memory_path / "memory.memsw.limit_in_bytes",
                                       str(memory)))):
                    self.memory_path = _remove(self.memory_path)
            except OSError:
                pass

    @property
    def memory_limited(self) -> bool:
        return self.memory_path is not None

    def enter(self) -> None:  # in the child, before it runs bwrap
        for path in dict.fromkeys((self.path, self.cpu_path, self.memory_path)):
            if path is not None:
                (path / "cgroup.procs").write_text(str(os.getpid()))

    def kills(self) -> int:
        """How many of the cgroup's processes the kernel killed at its memory limit."""
        if self.memory_path is None:
            return self.memory_kills
        for name in ("memory.events", "memory.oom_control"):  # v2, v1 (Linux 4.13 and later)
            for line in _read(self.memory_path / name).splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill" and value.strip().isdigit():
                    return int(value)
        return 0

    def remove(self) -> None:
        self.memory_kills = self.kills()
        self.path = _remove(self.path)
        self.cpu_path = _remove(self.cpu_path)
        if self.memory_path is not None and self.memory_path.exists():
            self.memory_path = _remove(self.memory_path)
        else:
            self.memory_path = None


def memory_note(cgroup: PidsCgroup, total_memory: int) -> str:
    """What a grading row says when the kernel killed processes at the sandbox's memory limit
    (after ``stop``), else ''."""
    if not cgroup.memory_kills:
        return ""
    return (f"the kernel killed {cgroup.memory_kills} of its process(es) at the sandbox's "
            f"memory limit ({total_memory / 2**30:g} GB for all its processes together)")


def _remove(path: Path | None) -> Path | None:
    """Kill what is left in the cgroup ``path`` and remove it; ``None`` once it is gone."""
    import time

    if path is None or not path.exists():
        return None
    for _ in range(50):
        for pid in _read(path / "cgroup.procs").split():
            try:
                os.kill(int(pid), 9)
            except (OSError, ValueError):
                pass
        try:
            path.rmdir()
            return None
        except OSError:
            time.sleep(0.1)
    return path


def _write(path: Path, text: str) -> bool:
    try:
        path.write_text(text)
        return True
    except OSError:
        return False


def _remove_stale(base: Path) -> None:
    """Empty cgroups left by a grader that was killed (an hour old or more)."""
    import time

    for path in base.glob("mha-grade-*"):
        try:
            if time.time() - path.stat().st_mtime > 3600 and not _read(
                    path / "cgroup.procs").strip():
                path.rmdir()
        except OSError:
            pass


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def tasks_of(uid: int) -> int:
    """How many tasks (threads included) the user ``uid`` has: what ``RLIMIT_NPROC`` counts."""
    count = 0
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.stat(f"/proc/{entry}").st_uid == uid:
                    count += len(os.listdir(f"/proc/{entry}/task"))
            except OSError:
                continue  # gone already
    return count


def process_limit(limits: Limits, user: User | None) -> int:
    """The ``RLIMIT_NPROC`` of a sandbox. The kernel counts it against *every* task of the uid,
    so for the instructor's own uid (not root, and no user of its own) it is the tasks the
    instructor already has plus the sandbox's allowance: a busy desktop can still sandbox. The
    residual risk (book/instructors.md): sandboxes of one run share that uid, so one that grows
    late still takes from the allowance of one started before it."""
    if user is not None or os.geteuid() == 0:
        return limits.processes  # a user of its own (or root, whom the kernel exempts)
    return tasks_of(os.getuid()) + limits.processes


def _limit(cgroup: PidsCgroup, limits: Limits, user: User | None, count_processes: bool):
    processes = process_limit(limits, user)  # counted in the parent, before the fork

    def limit() -> None:  # in the child, before exec: inherited by everything it starts
        cgroup.enter()
        resource.setrlimit(resource.RLIMIT_AS, (limits.memory, limits.memory))
        if count_processes:  # counts every process of the user: not the instructor's own
            resource.setrlimit(resource.RLIMIT_NPROC, (processes, processes))
        resource.setrlimit(resource.RLIMIT_FSIZE, (limits.file_size, limits.file_size))
        resource.setrlimit(resource.RLIMIT_CPU, (limits.cpu_seconds, limits.cpu_seconds))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if user is not None:  # last: the limits above are the grader's to set
            user.drop()

    return limit


def start(prefix: Prefix, plan: Path, limits: Limits,
          user: User | None = None) -> tuple[subprocess.Popen, PidsCgroup]:
    """Start the sandbox (as ``user`` if given); its stdin and stdout are the protocol's pipes."""
    cgroup = PidsCgroup(limits.processes, memory=limits.total_memory)
    # as root, bwrap runs as root and the runner becomes ``user`` inside (``command``)
    limit = _limit(cgroup, limits, None if os.geteuid() == 0 else user, True)

    options, runner = command(prefix, plan, limits, user)
    # bwrap's options through a pipe (--args), so that /proc/1/cmdline in the sandbox does not
    # list the grader's folders
    read, write = os.pipe()
    fds = [read]
    program = seccomp_filter()
    if program is not None:  # bwrap reads it whole before the sandbox starts: a pipe holds it
        seccomp, into = os.pipe()
        os.write(into, program)
        os.close(into)
        fds.append(seccomp)
        options = ["--seccomp", str(seccomp), *options]
    try:
        process = subprocess.Popen(["bwrap", "--args", str(read), *runner],
                                   stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                   stderr=subprocess.DEVNULL, preexec_fn=limit,
                                   start_new_session=True, env={}, pass_fds=fds)
    finally:
        for fd in fds:
            os.close(fd)
    with os.fdopen(write, "wb") as pipe:
        pipe.write(b"".join(o.encode() + b"\0" for o in options))
    return process, cgroup


def start_unsandboxed(prefix: Prefix, plan: Path, limits: Limits, work: Path,
                      user: User | None = None) -> tuple[subprocess.Popen, PidsCgroup]:
    """The same runner with the same limits but no isolation (``--no-sandbox``); as ``user``
    if given (Gradescope without user namespaces), which owns ``work`` and nothing else."""
    cgroup = PidsCgroup(limits.processes, memory=limits.total_memory)
    home = work / "home"
    home.mkdir()
    if user is not None:
        os.chown(home, user.uid, user.gid)
    limit = _limit(cgroup, limits, user, user is not None)

    env = {"PATH": f"{sys.prefix}/bin:/usr/local/bin:/usr/bin:/bin", "HOME": str(home),
           "LANG": "C.UTF-8", "MPLBACKEND": "Agg", "OMP_NUM_THREADS": "1",
           "MKL_NUM_THREADS": "1", "PYTHONDONTWRITEBYTECODE": "1", "PYTHONWARNINGS": "ignore",
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONPATH": str(prefix.root)}
    process = subprocess.Popen(
        [os.path.join(sys.prefix, "bin", "python"), "-s", str(prefix.root / "run_notebook.py"),
         str(plan)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        preexec_fn=limit, start_new_session=True, env=env, cwd=home)
    return process, cgroup


def stop(process: subprocess.Popen, cgroup: PidsCgroup) -> None:
    """Kill the sandbox and everything in it."""
    try:
        os.killpg(process.pid, 9)
    except OSError:
        pass
    try:
        process.kill()
    except OSError:
        pass
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass
    cgroup.remove()
    # stdin only: closing stdout would wait for the thread reading it, blocked for as long as
    # a process that escaped the kill holds the pipe (its reader ends when the pipe does)
    try:
        if process.stdin:
            process.stdin.close()
    except OSError:
        pass


def processes_of(uid: int) -> list[int]:
    """The live processes (not zombies) whose real user is ``uid``, in this PID namespace."""
    return processes_of_among([int(e) for e in os.listdir("/proc") if e.isdigit()], uid)


def processes_of_among(pids: list[int], uid: int) -> list[int]:
    found = []
    for entry in pids:
        try:
            with open(f"/proc/{entry}/status", encoding="utf-8", errors="replace") as handle:
                status = dict(line.split(":", 1) for line in handle if ":" in line)
        except OSError:
            continue  # gone already
        if int(status.get("Uid", "-1 0").split()[0]) == uid and not status.get(
                "State", "").strip().startswith(("Z", "X")):
            found.append(int(entry))
    return found


def _handle(pid: int, uid: int) -> int | None:
    """A pidfd of ``pid`` if it is still a process of ``uid``: signals sent through it never
    reach another process that got the number after this one ended (root may signal any).
    Where the kernel has no pidfd, ``-pid``, checked just before."""
    try:
        handle = os.pidfd_open(pid)
    except (OSError, AttributeError) as error:  # no pidfd (Linux < 5.3): the pid, rechecked
        unsupported = isinstance(error, AttributeError) or error.errno == errno.ENOSYS
        return -pid if unsupported and processes_of_among([pid], uid) else None
    if pid in processes_of_among([pid], uid):
        return handle
    os.close(handle)
    return None


# A real uid no process has: the one-pass killer below runs under it (see _kill_all_at_once).
UNUSED_UID = 2**31 - 3


def _kill_all_at_once(uid: int) -> None:
    """``kill(-1, SIGKILL)`` with ``uid`` as the effective uid, from a forked child of root: the
    kernel signals every process of the user in one pass, so a process that forks and exits in a
    loop (its pid changing faster than /proc can be read) cannot slip past. The child's real uid
    is one no process has, so the user's processes cannot signal (stop) it and no one else's
    processes are hit; its saved uid stays root's. Only as root."""
    import signal

    if os.geteuid() != 0:
        return
    child = os.fork()
    if child == 0:
        try:
            os.setresuid(UNUSED_UID, uid, 0)
            os.kill(-1, signal.SIGKILL)
        finally:
            os._exit(0)
    os.waitpid(child, 0)


def wait_for_exit(user: User, seconds: float = 2.0) -> None:
    """Wait until ``user`` has no process, for at most ``seconds``: the kernel ends a sandbox's
    processes with its PID namespace a moment after ``stop``, and only processes that outlive
    that moment were left running by the notebook."""
    import time

    end = time.monotonic() + seconds
    while processes_of(user.uid) and time.monotonic() < end:
        time.sleep(0.02)


def kill_user(user: User, rounds: int = 200) -> int:
    """Kill every process of ``user``, however it detached itself; the number found.

    Each round a child of root kills all of them in one pass (``_kill_all_at_once``); then root
    signals, itself, every process whose real uid is the user's, round after round until
    ``/proc`` shows none: nothing the user runs takes part, so nothing the user can
    stop or slow down (SIGSTOP, ptrace) holds it up, and SIGKILL ends stopped processes too.
    Each round first stops all it finds (SIGSTOP: a stopped process forks no more), then kills
    them. ``RuntimeError`` if some survive every round (never expected)."""
    import signal
    import time

    found: set[int] = set()
    for _ in range(rounds):
        found.update(processes_of(user.uid))  # counted, then killed in one pass: /proc can
        _kill_all_at_once(user.uid)            # miss a process whose pid keeps changing
        pids = processes_of(user.uid)
        if not pids:
            return len(found)
        found.update(pids)
        handles = [h for h in (_handle(pid, user.uid) for pid in pids) if h is not None]
        for sig in (signal.SIGSTOP, signal.SIGKILL):
            for handle in handles:
                try:
                    if handle < 0:
                        os.kill(-handle, sig)
                    else:
                        signal.pidfd_send_signal(handle, sig)
                except OSError:
                    pass  # gone already
        for handle in handles:
            if handle >= 0:
                os.close(handle)
        time.sleep(0.01)
    raise RuntimeError(f"processes of {user.name} survive: {processes_of(user.uid)}")
