"""A hostile class: every attack of issue 14, as a student would write it, in one grading run.

Each submission starts from the student edition of the example notebook (exercises 0.2, 1 point,
and 0.3, 2 points) and adds a trick. The tests assert that the trick earns nothing (zero, or the
points of the part that is honest), that the honest submissions graded in the same run keep
their grades, that no canary (a secret in the grader's environment, a file in its home, the
solutions, another student's notebook) reaches the sandbox or any CSV, that no file outside the
sandbox changes, and that no process of the sandbox outlives the grading.

Two submissions of chapter 1 (whose 1.2 forbids torch.softmax) are graded in the same run: one
hides torch.softmax from the answer watch in a way the watch does not see, and is left to the
instructor because its code is not plain (issue 35); one adds a harmless cell and keeps full marks.

Where an attack *looks* for something (a secret, a file, a process, the network), its answer to
0.2 is right only if it finds nothing: 1 point for 0.2 shows that the sandbox hid it.
"""

import base64
import csv
import functools
import hashlib
import json
import os
import socket
import subprocess
import sys
import threading
import time

import pytest
from exercise_notebooks import EXAMPLE, fmt, student_edition

from conventions import ROOT

GRADER = [sys.executable, "-m", "mha_grade", "grade"]
NAME = EXAMPLE.name
CH01 = ROOT / "notebooks" / "01_attention_recap.ipynb"
SECRET = "GRADER_SECRET_c4n4ry_9f2e"  # the value of GRADER_SECRET in the grader's environment
SSH_CANARY = "SSH_PRIVATE_KEY_c4n4ry_77a1"
OTHER_CANARY = "OTHER_STUDENT_c4n4ry_31b8"
SOLVED_02 = "def scaled_scores(q, k):\n    return q @ k.T / math.sqrt(k.shape[-1])"
SOLVED_03 = "def causal_mask(n):\n    return torch.tril(torch.ones(n, n)).bool()"
WRONG_02 = "def scaled_scores(q, k):\n    return q @ k.T"
WRONG_03 = "def causal_mask(n):\n    return torch.ones(n, n).triu().bool()"


def student():
    return student_edition.student_edition(fmt.load(EXAMPLE))


def code(text):
    return {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None,
            "source": text}


def answer(nb, function, text):
    for cell in nb["cells"]:
        if "solution" in fmt.tags(cell) and f"def {function}(" in fmt.source(cell):
            cell["source"] = text
            return nb
    raise AssertionError(function)


def with_cells(*cells, before="scaled_scores", nb=None):
    nb = nb or student()
    for i, c in enumerate(nb["cells"]):
        if "solution" in fmt.tags(c) and f"def {before}(" in fmt.source(c):
            nb["cells"][i:i] = [code(text) for text in cells]
            return nb
    raise AssertionError(before)


def solve_02_if(condition: str, setup: str = "") -> str:
    """An answer to 0.2 that is right only when ``condition`` holds (evaluated at call time)."""
    return (f"{setup}\ndef scaled_scores(q, k):\n    if not ({condition}):\n"
            f"        raise RuntimeError('found something')\n"
            f"    return q @ k.T / math.sqrt(k.shape[-1])")


def attacks(paths):
    """name -> (notebook or bytes, expected {exercise: points}); ``paths`` are the grader's."""
    made = {}
    honest_full = fmt.load(EXAMPLE)
    # a place to keep the other student's canary, and the honest ones
    other = student()
    answer(other, "scaled_scores", SOLVED_02 + f"\n# {OTHER_CANARY}")
    made["honest_other"] = (other, {"0.2": 1, "0.3": 0})
    made["honest_full"] = (honest_full, {"0.2": 1, "0.3": 2})
    made["honest_untouched"] = (student(), {"0.2": 0, "0.3": 0})

    # 1. a detached process that rewrites grades.csv after grading ends
    detached = (
        "import subprocess, sys, textwrap\n"
        "script = textwrap.dedent('''\n"
        "    import os, time, pathlib\n"
        "    for _ in range(200):\n"
        f"        p = pathlib.Path({str(paths['folder'])!r}) / 'grades.csv'\n"
        "        if p.exists() or (p.parent / 'grading_log.csv.part').exists():\n"
        "            time.sleep(1)\n"
        "            p.write_text('notebook,exercise,points,max_points\\\\n')\n"
        "        time.sleep(0.1)\n"
        "''')\n"
        "subprocess.Popen([sys.executable, '-c', script, 'ATTACK_MARKER_detached'],\n"
        "                 start_new_session=True)\n")
    made["detached_rewriter"] = (with_cells(detached), {"0.2": 0, "0.3": 0})

    # 2. the grader's environment: /proc/*/environ, /proc/$PPID/environ, os.environ
    env_probe = (
        "import glob, os\n"
        "def _found():\n"
        "    text = repr(dict(os.environ))\n"
        "    for p in glob.glob('/proc/*/environ') + ['/proc/%d/environ' % os.getppid()]:\n"
        "        try:\n"
        "            text += open(p, 'rb').read().decode('latin-1')\n"
        "        except OSError:\n"
        "            pass\n"
        f"    return {SECRET!r} in text or 'GRADER_SECRET' in text\n")
    made["reads_environ"] = (answer(student(), "scaled_scores",
                                    solve_02_if("not _found()", env_probe)),
                             {"0.2": 1, "0.3": 0})
    # 3. the same, but exfiltrating: the error message carries whatever it read
    leak = (env_probe + "def scaled_scores(q, k):\n"
            "    import glob\n"
            "    text = repr(dict(os.environ))\n"
            "    for p in glob.glob('/proc/*/environ') + glob.glob('/proc/*/cmdline'):\n"
            "        try:\n            text += open(p, 'rb').read().decode('latin-1')\n"
            "        except OSError:\n            pass\n"
            f"    for p in [{str(paths['ssh'])!r}, {str(paths['other'])!r},\n"
            f"              {str(paths['solution'])!r}]:\n"
            "        try:\n            text += open(p).read()[:3000]\n"
            "        except OSError as e:\n            text += str(e)\n"
            "    raise RuntimeError(text[-3000:])\n")
    made["leaks_in_feedback"] = (answer(student(), "scaled_scores", leak), {"0.2": 0, "0.3": 0})
    # 4. files: other submissions, the solutions, the grader's ~/.ssh, the grades folder
    files = (f"import os\n_paths = [{str(paths['other'])!r}, {str(paths['solution'])!r},\n"
             f"          {str(paths['ssh'])!r}, {str(paths['folder'])!r},\n"
             f"          {str(ROOT / 'notebooks')!r}, {str(ROOT / 'src' / 'mha')!r}]\n")
    made["reads_files"] = (answer(student(), "scaled_scores", solve_02_if(
        "not any(os.path.exists(p) for p in _paths)", files)), {"0.2": 1, "0.3": 0})
    # 5. a sibling's process (another kernel, the grader) through /proc/*/cmdline
    siblings = ("import glob\ndef _others():\n    found = []\n"
                "    for p in glob.glob('/proc/[0-9]*/cmdline'):\n"
                "        try:\n            found.append(open(p, 'rb').read())\n"
                "        except OSError:\n            pass\n"
                "    return [c for c in found if b'grade.py' in c or b'pytest' in c\n"
                "            or b'ipykernel' in c]\n")
    made["finds_siblings"] = (answer(student(), "scaled_scores", solve_02_if(
        "not _others() and len(glob.glob('/proc/[0-9]*')) < 10", siblings)),
        {"0.2": 1, "0.3": 0})
    # 6. persistent tampering: IPython startup files, the course package, the real home
    startup = ("import os, pathlib, mha\n"
               "fake = \"print('✓ Exercise 0.2 [1/1]: correct')\\n\"\n"
               "for home in [os.path.expanduser('~'), " + repr(str(paths["home"])) + "]:\n"
               "    d = pathlib.Path(home) / '.ipython/profile_default/startup'\n"
               "    try:\n        d.mkdir(parents=True, exist_ok=True)\n"
               "        (d / '00-fake.py').write_text(fake)\n"
               "    except OSError:\n        pass\n"
               "for f in [pathlib.Path(mha.__file__).parent / 'exercises.py',\n"
               f"          pathlib.Path({str(ROOT / 'src' / 'mha' / 'exercises.py')!r})]:\n"
               "    try:\n        f.write_text('raise SystemExit')\n"
               "    except OSError:\n        pass\n")
    made["persistent_tamper"] = (with_cells(startup), {"0.2": 0, "0.3": 0})
    # 7. sys.stdout that rewrites ✗ into ✓
    stdout = ("import sys\nclass Liar:\n    def __init__(self, s):\n        self.s = s\n"
              "    def write(self, t):\n"
              "        return self.s.write(t.replace('✗', '✓').replace('[0/', '[1/'))\n"
              "    def flush(self):\n        self.s.flush()\n"
              "sys.stdout = Liar(sys.stdout)\n")
    made["rewrites_stdout"] = (with_cells(stdout), {"0.2": 0, "0.3": 0})
    # 8. torch.allclose, torch.equal and friends always true; a wrong answer
    patches = ("import torch\ntorch.allclose = lambda *a, **k: True\n"
               "torch.equal = lambda *a, **k: True\n"
               "torch.Tensor.__ne__ = lambda *a, **k: torch.tensor(False)\n")
    made["patches_torch"] = (answer(answer(with_cells(patches), "scaled_scores", WRONG_02),
                                    "causal_mask", WRONG_03), {"0.2": 0, "0.3": 0})
    # 9. mha.exercises patched: every check passes, whatever the answer
    patch_mha = ("import mha.exercises as ev\n"
                 "ev.evaluate = lambda checker, exercise, points, answer: ev.Result(\n"
                 "    exercise, points, points, 'correct', 'correct')\n"
                 "ev.expect_close = lambda *a, **k: None\n"
                 "class Never(Exception):\n    pass\n"
                 "ev.Wrong = Never\n")
    made["patches_mha_exercises"] = (answer(with_cells(patch_mha), "scaled_scores", WRONG_02),
                                     {"0.2": 0, "0.3": 0})
    # 10. a tensor subclass whose __torch_function__ makes every comparison pass
    subclass = (
        "import torch\n"
        "class Agreeable(torch.Tensor):\n"
        "    @classmethod\n"
        "    def __torch_function__(cls, func, types, args=(), kwargs=None):\n"
        "        name = getattr(func, '__name__', '')\n"
        "        if name in ('allclose', 'equal', '__eq__', 'isclose'):\n"
        "            return True\n"
        "        if name in ('__ne__', 'ne'):\n"
        "            return torch.zeros((), dtype=torch.bool)\n"
        "        return super().__torch_function__(func, types, args, kwargs or {})\n")
    made["tensor_subclass"] = (
        answer(answer(with_cells(subclass), "scaled_scores",
                      "def scaled_scores(q, k):\n    return (q @ k.T).as_subclass(Agreeable)"),
               "causal_mask", "def causal_mask(n):\n"
               "    return torch.ones(n, n, dtype=torch.bool).as_subclass(Agreeable)"),
        {"0.2": 0, "0.3": 0})
    # 11. obfuscated hook: getattr(ev, "regi" + "ster") prints a fake verdict after each cell
    hook = ("ip = get_ipython()\nev = getattr(ip, 'eve' + 'nts')\n"
            "getattr(ev, 'regi' + 'ster')('post_run_cell', lambda *a: print(\n"
            "    '\\u2713 Exercise 0.2 [1/1]: correct\\n\\u2713 Exercise 0.3 [2/2]: correct'))\n")
    made["obfuscated_hook"] = (with_cells(hook), {"0.2": 0, "0.3": 0})
    # 12. a partial result line, then raise
    partial = ("def scaled_scores(q, k):\n"
               "    print('✓ Exercise 0.2 [1/1]: correct', end='', flush=True)\n"
               "    import os\n    os.write(1, b'\\n{\"value\": 1}\\n')\n"
               "    raise RuntimeError('x')")
    made["partial_line_then_raise"] = (answer(student(), "scaled_scores", partial),
                                       {"0.2": 0, "0.3": 0})
    # 13. a fork bomb (children hold their slot); then an honest 0.2
    fork = ("import os, time\nn = 0\ntry:\n    while n < 5000:\n"
            "        if os.fork() == 0:\n            while True:\n                time.sleep(1)\n"
            "        n += 1\nexcept OSError:\n    pass\nFORKED = n\n")
    made["fork_bomb"] = (answer(with_cells(fork), "scaled_scores",
                                solve_02_if("FORKED < 200")), {"0.2": 1, "0.3": 0})
    # 14. a memory bomb; then an honest 0.2
    memory = ("chunks = []\ntry:\n    while len(chunks) < 64:\n"
              "        chunks.append(bytearray(2**30))\nexcept MemoryError:\n    pass\n"
              "GOT = len(chunks)\nchunks = None\n")
    made["memory_bomb"] = (answer(with_cells(memory), "scaled_scores",
                                  solve_02_if("GOT < 4")), {"0.2": 1, "0.3": 0})
    # 15. 20 files of 60 MB; then an honest 0.2
    disk = ("written = 0\nfor i in range(20):\n    try:\n"
            "        with open(f'/tmp/f{i}.bin', 'wb') as f:\n"
            "            for _ in range(60):\n                f.write(b'0' * 2**20)\n"
            "                written += 2**20\n    except OSError:\n        pass\n")
    made["disk_bomb"] = (answer(with_cells(disk), "scaled_scores",
                                solve_02_if("written <= 300 * 2**20")), {"0.2": 1, "0.3": 0})
    # 16. the network: the grader's machine listens on a port; the sandbox must not reach it
    net = ("import socket\ndef _reach():\n    try:\n"
           f"        socket.create_connection(('127.0.0.1', {paths['port']}), timeout=2)\n"
           "        return True\n    except OSError:\n        pass\n    try:\n"
           "        socket.create_connection(('1.1.1.1', 53), timeout=2)\n"
           "        return True\n    except OSError:\n        return False\n"
           "REACHED = _reach()\n")
    made["network"] = (answer(with_cells(net), "scaled_scores", solve_02_if("not REACHED")),
                       {"0.2": 1, "0.3": 0})
    # 17. kills its parent (in its PID namespace) and every process it can see
    killer = ("import os, signal\nfor pid in range(1, 4000):\n    if pid != os.getpid():\n"
              "        try:\n            os.kill(pid, signal.SIGKILL)\n"
              "        except OSError:\n            pass\n")
    made["kills_processes"] = (answer(with_cells(killer, before="causal_mask",
                                                 nb=answer(student(), "scaled_scores",
                                                           SOLVED_02)),
                                      "causal_mask", SOLVED_03), {"0.2": 1, "0.3": 0})
    # 18. an answer that hangs when called with the grader's inputs
    made["hangs_in_call"] = (answer(student(), "scaled_scores",
                                    "def scaled_scores(q, k):\n    while True:\n        pass"),
                             {"0.2": 0, "0.3": 0})
    # 19. a vandal: deletes the other submissions, writes a fake grades.csv; then solves 0.2
    vandal = (f"import pathlib, shutil\nroot = pathlib.Path({str(paths['folder'])!r})\n"
              "for p in list(root.iterdir()) if root.exists() else []:\n"
              "    shutil.rmtree(p, ignore_errors=True)\n"
              "try:\n"
              "    (root / 'grades.csv').write_text('notebook,exercise,points,max_points\\n')\n"
              "except OSError:\n    pass\n")
    made["vandal"] = (with_cells(vandal, nb=answer(student(), "scaled_scores", SOLVED_02)),
                      {"0.2": 1, "0.3": 0})
    # attack 40: ways past the answer watch (mha.answer_watch), each answer calling 0.2's
    # reference (reached by pkgutil) beside its honest sum
    reference = ('import pkgutil\n_ref = pkgutil.resolve_name("mha:att" + "ention")\n'
                 '_mask = pkgutil.resolve_name("mha.att" + "ention:causal_mask")\n')
    solved_02_calling = SOLVED_02.replace("    return", "    _ref(q[None], k[None], k[None])\n"
                                                      "    return")
    # 20. F1: the watch's module by its dotted name, its observe (and what observe reads) replaced
    quiet = (reference + '_w = pkgutil.resolve_name("mha." + "answer" + "_wat" + "ch")\n'
             "def _quiet(call, references, forbidden_ops):\n"
             "    try:\n        return call(), set()\n"
             "    except Exception as error:\n        return error, set()\n"
             "_w.observe = _quiet\n_w.content = lambda code: None\n"
             "_w.watched_codes = lambda names: {}\n")
    made["watch_replaced"] = (with_cells(quiet, nb=answer(student(), "scaled_scores",
                                                          solved_02_calling)),
                              {"0.2": 1, "0.3": 0})
    # 21. F1b: code run from a string (timeit of base64) during the call: no flagged text
    hidden = base64.b64encode(b"_ref(q[None], k[None], k[None])").decode()
    run_hidden = (f"    timeit.timeit(base64.b64decode({hidden!r}).decode(), "
                  "globals={**globals(), 'q': q, 'k': k}, number=1)\n    return")
    made["timeit_b64"] = (with_cells(reference + "import timeit, base64\n", nb=answer(
        student(), "scaled_scores", SOLVED_02.replace("    return", run_hidden))),
        {"0.2": 1, "0.3": 0})
    # 22. F3: the frames walked up to the grader's runner, whose requests then lose their watch;
    # 0.3's answer calls its reference afterwards
    unwatch = ("import sys as _sys\ndef _unwatch():\n    f = _sys._getframe()\n"
               "    while f is not None:\n"
               "        for v in list(f.f_locals.values()):\n"
               "            if hasattr(v, 'busy') and hasattr(v, 'serve'):\n"
               "                plain = v.serve\n"
               "                v.serve = lambda request, table: plain(\n"
               "                    {k: x for k, x in request.items() if k != 'watch'}, table)\n"
               "                return\n"
               "        f = f.f_back\n")
    made["frame_walk"] = (answer(with_cells(reference + unwatch, nb=answer(
        student(), "scaled_scores", SOLVED_02.replace("    return", "    _unwatch()\n    return"))),
        "causal_mask", SOLVED_03.replace("    return", "    _mask(n, n)\n    return")),
        {"0.2": 1, "0.3": 2})
    # attack 41: the watch's record, its helpers and its reply reached another way; each answer
    # calls 0.2's reference beside its honest sum
    chars = 'def _nm(*c):\n    return "".join(map(chr, c))\n'
    # 23. F1: the profile hook (sys.getprofile, named with chr), whose closure holds the record,
    # cleared after the reference ran
    clear_record = (reference + "import sys as _s\n" + chars +
                    "_GP = _nm(103, 101, 116, 112, 114, 111, 102, 105, 108, 101)\n"
                    "def _tidy():\n"
                    "    for c in getattr(getattr(_s, _GP)(), '__closure__', None) or ():\n"
                    "        if type(c.cell_contents) is set:\n"
                    "            c.cell_contents.clear()\n")
    made["record_cleared"] = (with_cells(clear_record, nb=answer(student(), "scaled_scores",
        solved_02_calling.replace("    return", "    _tidy()\n    return"))),
        {"0.2": 0, "0.3": 0})
    # 24. F2: a helper process forked by a cell before the check (fork named with chr), which
    # runs the reference whenever the answer writes to its pipe
    helper = (reference + "import os as _os, torch as _t\n" + chars +
              "_r1, _w1 = _os.pipe()\n_r2, _w2 = _os.pipe()\n"
              "if getattr(_os, _nm(102, 111, 114, 107))() == 0:\n"
              "    _os.close(_w1)\n"
              "    while _os.read(_r1, 1):\n"
              "        _ref(_t.ones(1, 2, 3), _t.ones(1, 2, 3), _t.ones(1, 2, 3))\n"
              "        _os.write(_w2, b'.')\n"
              "    _os._exit(0)\n")
    made["helper_process"] = (with_cells(helper, nb=answer(student(), "scaled_scores",
        SOLVED_02.replace("    return", "    _os.write(_w1, b'.')\n    _os.read(_r2, 1)\n"
                                          "    return"))),
        {"0.2": 1, "0.3": 0})
    # 25. F3: json's default encoder (which the runner's json.dumps read at each call) replaced
    # by one that empties "entered"
    quiet_json = (reference + "import json as _j\n"
                  "class _Enc(type(_j._default_encoder)):\n"
                  "    def encode(self, o):\n"
                  "        if type(o) is dict and type(o.get('entered')) is list:\n"
                  "            o = {**o, 'entered': []}\n"
                  "        return super().encode(o)\n"
                  "_j._default_encoder = _Enc()\n")
    made["json_encoder"] = (with_cells(quiet_json, nb=answer(student(), "scaled_scores",
                                                             solved_02_calling)),
                            {"0.2": 1, "0.3": 0})
    # 26. F4: builtins.sorted (which serve called on the record) replaced by a filter
    quiet_sorted = (reference + "import builtins as _b\n_sorted = sorted\n"
                    "def _quiet(items, *a, **k):\n"
                    "    out = _sorted(items, *a, **k)\n"
                    "    if type(items) is set and any(type(x) is str and x.startswith('mha.')\n"
                    "                                  for x in items):\n"
                    "        return []\n"
                    "    return out\n"
                    "_b.sorted = _quiet\n")
    made["builtins_sorted"] = (with_cells(quiet_sorted, nb=answer(student(), "scaled_scores",
                                                                  solved_02_calling)),
                               {"0.2": 1, "0.3": 0})
    # 27. attack 50, F1: the answer records the inputs of a call and computes nothing; a cell
    # outside the watched call computes their results and calls the check again, until the
    # answer only looks results up (the same inputs at every call: 1.2 full marks with
    # torch.softmax in that cell). Each call now draws inputs of its own: 0.
    replay = ("_seen, _store = [], {}\n"
              "def _key(q, k):\n"
              "    return str(q.tolist()) + str(k.tolist())\n"
              "def scaled_scores(q, k):\n"
              "    if _key(q, k) in _store:\n"
              "        return _store[_key(q, k)]\n"
              "    _seen.append((q, k))\n"
              "    return torch.zeros(q.shape[0], k.shape[0])\n"
              "for _ in range(4):\n"
              "    mha.checks.ch00.scaled_scores(scaled_scores)\n"
              "    for q, k in _seen:\n"
              "        _store[_key(q, k)] = q @ k.T / math.sqrt(k.shape[-1])\n")
    made["replays_recorded_inputs"] = (answer(student(), "scaled_scores", replay),
                                       {"0.2": 0, "0.3": 0})
    # 28. attack 53, F1: matplotlib's figure hooks ("module:function", called on every new
    # figure) set through plt.style.use, which the plain-code rule reads as plain; the hook
    # pickle.load(figure) read a pickle of exec from the figure's own read(). The runner keeps
    # the hooks empty: the style cell raises, and 0.2 is right only if no hook ran.
    hooked = ("import builtins, pickle\n"
              "class _Run:\n"
              "    def __reduce__(self):\n"
              "        return (exec, ('import builtins; builtins.HOOKED = 1',))\n"
              "class _Sheet(plt.Figure):\n"
              "    data, at = pickle.dumps(_Run()), 0\n"
              "    def read(self, n):\n"
              "        self.at += n\n"
              "        return self.data[self.at - n:self.at]\n"
              "    def readline(self):\n"
              "        end = self.data.index(b'\\n', self.at) + 1\n"
              "        line, self.at = self.data[self.at:end], end\n"
              "        return line\n"
              "    def peek(self, n=1):\n"
              "        return self.data[self.at:self.at + n]\n"
              "try:\n"
              "    plt.style.use({'figure.hooks': ['pickle:load']})\n"
              "finally:\n"
              "    plt.figure(FigureClass=_Sheet)\n")
    made["figure_hooks_by_style"] = (
        with_cells("import matplotlib.pyplot as plt", hooked,
                   nb=answer(student(), "scaled_scores", solve_02_if(
                       "not getattr(builtins, 'HOOKED', 0)", "import builtins"))),
        {"0.2": 1, "0.3": 0})
    return made | watch_blind_spots()


@functools.cache
def ch01_points():
    """Chapter 1's exercises as grades.csv gives its solutions: each autograded exercise's
    points, the sum of its checks' in mha.checks.ch01 (declared there, not by the grader), and
    "" for those the grader's exercise list grades by hand. Built from the course's data, not
    written out: a new exercise in chapter 1 needs no edit here (maintainer 44 F1)."""
    import mha.checks.ch01
    from mha_grade.assignments import load_assignment

    points = {}
    for check in vars(mha.checks.ch01).values():
        if callable(check) and hasattr(check, "checker"):
            points[check.exercise] = points.get(check.exercise, 0) + check.max_points
    by_hand = [e.name for e in load_assignment(CH01).exercises if not e.checks]
    assert points and by_hand and not set(points) & set(by_hand), (points, by_hand)
    return {**{e: f"{p:g}" for e, p in points.items()}, **dict.fromkeys(by_hand, "")}


# torch.softmax with torch's Python dispatch key excluded by a guard entered and left from
# builtins only: no event reaches the profile hook meanwhile, so the watch does not see it
# (mha.answer_watch's docstring; tests/test_answer_watch.py)
BLINDED_SOFTMAX = (
    "def stable_softmax(scores, temperature):\n"
    "    guard = torch._C._ExcludeDispatchKeyGuard(\n"
    "        torch._C.DispatchKeySet(torch._C.DispatchKey.Python))\n"
    "    kind = type(guard)\n"
    "    return list(map(lambda *steps: steps[1], map(kind.__enter__, [guard]),\n"
    "                    map(torch.softmax, [scores / temperature], [-1]),\n"
    "                    map(kind.__exit__, [guard], [None], [None], [None])))[0]")


def watch_blind_spots():
    """Issue 35, in chapter 1 (whose 1.2 forbids torch.softmax): the chapter's solutions with
    1.2's answer calling torch.softmax where the watch does not see it (before: full marks, no
    flag; now: 1.2 left to the instructor), and with a harmless cell of the student's own
    (full marks). Expected points are grades.csv's: "" where the instructor grades."""
    blinded = fmt.load(CH01)
    for c in blinded["cells"]:
        if "solution" in fmt.tags(c) and "def stable_softmax(" in fmt.source(c):
            c["source"] = BLINDED_SOFTMAX
    printing = fmt.load(CH01)
    at = next(i for i, c in enumerate(printing["cells"])
              if "solution" in fmt.tags(c) and "def stable_softmax(" in fmt.source(c))
    printing["cells"].insert(at, code('print("my own softmax follows")'))
    return {"watch_blinded": (blinded, {**ch01_points(), "1.2": ""}),
            "honest_ch01_print": (printing, ch01_points())}


MALFORMED = {
    "tags-5": {"cells": [{"cell_type": "code", "metadata": {"tags": 5}, "source": "1"}]},
    "source-5": {"cells": [{"cell_type": "code", "metadata": {}, "source": 5}]},
    "cells-1": {"cells": [1]},
    "no_cells": {"metadata": {}},
    "a_list": [1, 2, 3],
}


@pytest.fixture(scope="module")
def attacked(tmp_path_factory):
    base = tmp_path_factory.mktemp("attacks")
    folder, home, out = base / "submissions", base / "home", base / "submissions"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_rsa").write_text(SSH_CANARY)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.settimeout(0.2)
    connections = []
    stop = threading.Event()

    def accept():
        while not stop.is_set():
            try:
                connections.append(listener.accept())
            except OSError:
                pass

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    paths = {"folder": folder, "home": home, "ssh": home / ".ssh" / "id_rsa",
             "other": folder / "honest_other" / NAME, "solution": EXAMPLE,
             "port": listener.getsockname()[1]}
    made = attacks(paths)
    for who, (nb, _) in made.items():
        path = folder / who / (CH01.name if who in CH01_NOTEBOOKS else NAME)
        path.parent.mkdir(parents=True)
        path.write_bytes(nb if isinstance(nb, bytes) else json.dumps(nb).encode())
    malformed = folder  # one file per student, flat: tags-5_00_example_exercises.ipynb ...
    # (not tags_5_00_...: a Canvas download's user 5, submission 00)
    for name, nb in MALFORMED.items():
        (malformed / f"{name}_{NAME}").write_text(json.dumps(nb))
    (malformed / f"not-json_{NAME}").write_bytes(b"\x00\xff{{{ not json")
    with (malformed / f"huge_{NAME}").open("wb") as handle:
        handle.write(b'{"cells": [], "padding": "' + b"x" * (21 * 2**20) + b'"}')
    (folder / "upper").mkdir()
    (folder / "upper" / f"{EXAMPLE.stem}.IPYNB").write_text(json.dumps(fmt.load(EXAMPLE)))
    (folder / "upper" / "notes.txt").write_text("hello")
    (folder / "link").mkdir()
    (folder / "link" / NAME).symlink_to(paths["ssh"])
    (folder / "twice").mkdir()
    (folder / "twice" / NAME).write_text(json.dumps(fmt.load(EXAMPLE)))
    (folder / "twice" / f"copy {NAME}").write_text(json.dumps(fmt.load(EXAMPLE)))
    os.utime(folder / "twice" / NAME, (1.7e9, 1.7e9))  # the copy handed in last
    (folder / "wrong_name").mkdir()
    (folder / "wrong_name" / "01_attention_recap.ipynb").write_text(json.dumps(
        fmt.load(EXAMPLE)))
    watched = {p: hashlib.sha256(p.read_bytes()).hexdigest()
               for p in [ROOT / "src" / "mha" / "exercises.py", EXAMPLE, paths["ssh"],
                         paths["other"]]}
    env = {k: v for k, v in os.environ.items()}
    env.update(GRADER_SECRET=SECRET, HOME=str(home))
    start = time.monotonic()
    run = subprocess.run(
        [*GRADER, str(folder), "--source", str(EXAMPLE),
         "--source", str(ROOT / "notebooks" / "01_attention_recap.ipynb"), "--jobs", "2",
         "--timeout", "40", "--no-calibrate", "--cell-timeout", "6", "--memory-gb", "1.5",
         "--disk-mb", "256",
         "--out", str(out)], capture_output=True, text=True, timeout=900, env=env)
    seconds = time.monotonic() - start
    assert run.returncode == 0, run.stdout + run.stderr
    grades_text = (out / "grades.csv").read_text()
    time.sleep(3)  # a detached process would strike now
    stop.set()
    thread.join()
    listener.close()
    with (out / "grades.csv").open() as handle:
        grades = list(csv.DictReader(handle))
    with (out / "grading_log.csv").open() as handle:
        log = list(csv.DictReader(handle))
    return {"made": made, "grades": grades, "log": log, "out": run.stdout + run.stderr,
            "folder": folder, "home": home, "watched": watched, "grades_text": grades_text,
            "connections": connections, "seconds": seconds, "outdir": out}


CH01_NOTEBOOKS = ("watch_blinded", "honest_ch01_print")


def points(attacked, who, name=NAME):
    return {r["exercise"]: r["points"] for r in attacked["grades"]
            if r["notebook"] == f"{who}/{name}"}


ATTACKS = ["detached_rewriter", "reads_environ", "leaks_in_feedback", "reads_files",
           "finds_siblings", "persistent_tamper", "rewrites_stdout", "patches_torch",
           "patches_mha_exercises", "tensor_subclass", "obfuscated_hook",
           "partial_line_then_raise", "fork_bomb", "memory_bomb", "disk_bomb", "network",
           "kills_processes", "hangs_in_call", "vandal", "watch_replaced", "timeit_b64",
           "frame_walk", "record_cleared", "helper_process", "json_encoder", "builtins_sorted",
           "replays_recorded_inputs", "figure_hooks_by_style"]


@pytest.mark.parametrize("who", ATTACKS)
def test_an_attack_earns_only_what_its_honest_part_deserves(attacked, who):
    expected = attacked["made"][who][1]
    assert points(attacked, who) == {"0.1": "", **{k: str(v) for k, v in expected.items()}}


def test_a_softmax_the_watch_does_not_see_leaves_1_2_to_the_instructor(attacked):
    """Issue 35: the watch's verdict decides points only over plain code. The notebook that
    hid torch.softmax from the watch got full marks for 1.2, unflagged; its code is not plain,
    so 1.2 has no points until the instructor enters them, and says why, to the student and in
    a flag; its other exercises keep theirs."""
    name = CH01.name
    assert points(attacked, "watch_blinded", name) == {**ch01_points(), "1.2": ""}
    rows = {r["exercise"]: r for r in attacked["log"]
            if r["notebook"] == f"watch_blinded/{name}"}
    assert rows["1.2"]["status"] == "left to the instructor"
    assert "your notebook uses the private attribute _ExcludeDispatchKeyGuard" in \
        rows["1.2"]["message"] and "your instructor grades this exercise by hand" in \
        rows["1.2"]["message"]
    assert "exercise 1.2 left to the instructor: its code is not plain" in rows["1.2"]["flags"]
    max_points = {r["exercise"]: r["max_points"] for r in attacked["grades"]
                  if r["notebook"] == f"watch_blinded/{name}"}
    assert max_points["1.2"] == "1"  # still an autograded exercise's row, to grade by hand


@pytest.mark.parametrize("who", ["honest_other", "honest_full", "honest_untouched",
                                 "honest_ch01_print"])
def test_honest_students_graded_beside_the_attacks_keep_their_grades(attacked, who):
    expected = attacked["made"][who][1]
    name = CH01.name if who in CH01_NOTEBOOKS else NAME
    wanted = expected if who in CH01_NOTEBOOKS else \
        {"0.1": "", **{k: str(v) for k, v in expected.items()}}
    assert points(attacked, who, name) == wanted
    flags = {r["flags"] for r in attacked["log"] if r["notebook"] == f"{who}/{name}"}
    assert flags == {""}


def test_grades_csv_is_not_rewritten_after_grading(attacked):
    assert (attacked["outdir"] / "grades.csv").read_text() == attacked["grades_text"]
    assert len(attacked["grades"]) > 3 * len(ATTACKS)


def _parent(pid):
    try:
        return int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return 0


def _cmdline(pid):
    try:
        return open(f"/proc/{pid}/cmdline", "rb").read()
    except OSError:
        return b""


def test_no_process_of_a_sandbox_survives_grading(attacked):
    """No sandbox process is left without a grader above it (other test workers may be grading
    at the same time: their sandboxes have their grader (mha_grade) as an ancestor)."""
    survivors = []
    for pid in [int(p) for p in os.listdir("/proc") if p.isdigit()]:
        cmdline = _cmdline(pid)
        if b"ATTACK_MARKER" in cmdline or b"run_notebook.py" in cmdline:
            ancestor, graded_by = pid, None
            while ancestor > 1 and graded_by is None:
                ancestor = _parent(ancestor)
                if b"mha_grade" in _cmdline(ancestor):
                    graded_by = ancestor
            if graded_by is None:
                survivors.append(cmdline)
    assert survivors == []


def test_no_secret_solution_or_grader_path_reaches_any_csv(attacked):
    text = "".join(p.read_text() for p in attacked["outdir"].glob("*.csv"))
    for secret in [SECRET, "GRADER_SECRET", SSH_CANARY, OTHER_CANARY, str(ROOT),
                   str(attacked["folder"]), str(attacked["home"]),
                   "q.shape[-1])\\n    ### END"]:
        assert secret not in text, secret
    # the leak's message is the grader's words plus a short excerpt, one line
    row = next(r for r in attacked["log"] if r["notebook"] == f"leaks_in_feedback/{NAME}"
               and r["exercise"] == "0.2")
    assert row["status"] == "error" and len(row["message"]) <= 500


def test_no_file_outside_the_sandbox_changes(attacked):
    for path, digest in attacked["watched"].items():
        assert hashlib.sha256(path.read_bytes()).hexdigest() == digest, path
    assert not (attacked["home"] / ".ipython").exists()
    assert attacked["connections"] == []


def test_tampering_attempts_are_flagged_and_honest_ones_are_not(attacked):
    flags = {r["notebook"].split("/")[0]: r["flags"] for r in attacked["log"]}
    for who in ["reads_environ", "persistent_tamper", "rewrites_stdout", "patches_torch",
                "patches_mha_exercises", "tensor_subclass", "obfuscated_hook",
                "partial_line_then_raise", "network"]:
        assert flags[who], who


# attack 40: what each way past the answer watch must leave in its flags (run-time ones say
# "seen when its check called the answer"); none may hide the reference 0.2's answer calls
PAST_THE_WATCH = {
    "watch_replaced": ["reaches past the answer watch",
                       "calls the reference of exercise 0.2 (seen when"],
    "timeit_b64": ["reaches past the answer watch", "defeats the answer watch in exercise 0.2",
                   "calls the reference of exercise 0.2 (seen when"],
    "frame_walk": ["reaches past the answer watch", "defeats the answer watch in exercise 0.2",
                   "calls the reference of exercise 0.3 (seen when"],
    # attack 41
    "record_cleared": ["defeats the answer watch in exercise 0.2 (seen when its check called the "
                       "answer: it reached past the watch",
                       "calls the reference of exercise 0.2 (seen when"],
    "helper_process": ["defeats the answer watch in exercise 0.2 (seen when its check called the "
                       "answer: it started a thread or a process"],
    "json_encoder": ["calls the reference of exercise 0.2 (seen when"],
    "builtins_sorted": ["calls the reference of exercise 0.2 (seen when"],
}


@pytest.mark.parametrize("who", list(PAST_THE_WATCH))
def test_ways_past_the_answer_watch_are_flagged_and_hide_no_reference(attacked, who):
    """Attack 40: the watch's module reached by pkgutil and its observe replaced (F1), code run
    from a base64 string by timeit (F1b), the frames walked up to the runner to strip the watch
    from later requests (F3): each is named in the flags, and the reference still seen. Attack
    41: the record cleared through the profile hook, a helper process forked before the check,
    json's default encoder and ``builtins.sorted`` replaced: the same."""
    flags = " | ".join(r["flags"] for r in attacked["log"] if r["notebook"] == f"{who}/{NAME}")
    for wanted in PAST_THE_WATCH[who]:
        assert wanted in flags, (wanted, flags)


@pytest.mark.parametrize("name,reason", [
    (f"tags-5_{NAME}", "1 cell(s) with malformed tags (tags ignored)"),
    (f"source-5_{NAME}", "1 malformed cell(s) skipped"),
    (f"cells-1_{NAME}", "1 malformed cell(s) skipped"),
    (f"no_cells_{NAME}", "not a notebook: no list of cells"),
    (f"a_list_{NAME}", "not a notebook: no list of cells"),
    (f"not-json_{NAME}", "not a notebook: the file is not JSON"),
    (f"huge_{NAME}", "larger than 20 MB: not graded"),
    (f"upper/{EXAMPLE.stem}.IPYNB", "the name must end in .ipynb"),
    ("upper/notes.txt", "not a notebook (.ipynb): skipped"),
    (f"link/{NAME}", "a symbolic link: not followed"),
    (f"twice/{NAME}", f"ignored copy: chapter 00 handed in 2 times by twice: twice/copy {NAME} "
                      "(handed in last, by the files' modification times) is graded"),
    (f"twice/copy {NAME}", "duplicate: chapter 00 handed in 2 times by twice: this copy "
                           f"(handed in last, by the files' modification times) is graded; not "
                           f"graded: twice/{NAME}"),
    ("wrong_name/01_attention_recap.ipynb", "saved as chapter 01 (01_attention_recap) but its "
                                            "exercises are chapter 00's"),
])
def test_every_odd_file_gets_a_row_with_a_reason_and_the_run_goes_on(attacked, name, reason):
    rows = [r for r in attacked["log"] if r["notebook"] == name]
    assert rows, name
    text = " ".join(r["problem"] + " " + r["status"] + " " + r["message"] for r in rows)
    assert reason in text, text
    if not name.startswith(("twice/", "wrong_name/")):
        assert "duplicate" not in text, text
        for row in attacked["grades"]:
            if row["notebook"] == name:
                assert row["points"] in ("", "0"), row


def test_a_chapter_saved_under_another_name_is_graded_as_its_own(attacked):
    assert points(attacked, "wrong_name", "01_attention_recap.ipynb") == {
        "0.1": "", "0.2": "1", "0.3": "2"}
