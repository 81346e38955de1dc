"""Plain code (mha_grade.plain_code): the student code over which the answer watch's verdict on a
forbidden op decides points (issue 35). Every attack that reached the watch from a student's
cell is not plain; every honest answer of the course is; an exercise that forbids ops is left
to the instructor when a notebook's code is not plain, and no other exercise changes."""

from __future__ import annotations

import ast
import inspect
import json
import time

import pytest
import test_answer_watch as watch_tests
import test_grading_attacks as attack_tests
from exercise_notebooks import fmt
from test_checks_variants import VARIANTS

from mha.exercises import Result
from mha_grade import gradescope, outputs
from mha_grade.assignments import load_assignment
from mha_grade.compare import LEFT_TO_INSTRUCTOR, Outcome, leave_to_instructor, score
from mha_grade.flags import answer_cells
from mha_grade.plain_code import why_not_plain

from conventions import NOTEBOOKS, ROOT

# one rule each: (code, a word of the reason it is not plain)
NOT_PLAIN = [
    ("x.__class__", "dunder attribute __class__"),
    ("__builtins__", "dunder name"),
    ("def __init__(self): pass", "dunder definition"),
    ("def f(__x__): pass", "dunder argument"),
    ("f(__x__=1)", "dunder keyword"),
    ("match x:\n    case C(__dict__=d): pass", "dunder match attribute"),
    ("import torch as __t__", "dunder import"),
    ("name = '__globals__'", "a string that names a dunder"),
    ("torch._C", "private attribute _C"),
    ("from torch import _C", "private attribute _C"),
    ("getattr(torch, 'exp')", "builtin getattr"),
    ("g = getattr", "builtin getattr"),
    ("setattr", "builtin setattr"),
    ("delattr", "builtin delattr"),
    ("vars()", "builtin vars"),
    ("globals()", "builtin globals"),
    ("locals()", "builtin locals"),
    ("dir(torch)", "builtin dir"),
    ("eval('1')", "builtin eval"),
    ("exec('1')", "builtin exec"),
    ("compile('1', 'x', 'eval')", "builtin compile"),
    ("breakpoint()", "builtin breakpoint"),
    ("open('f')", "builtin open"),
    ("memoryview(b'')", "builtin memoryview"),
    ("type('H', (torch.Tensor,), {})", "type other than type(x)"),
    ("make = type", "type other than type(x)"),
    # attack 47: type(int) is type itself, bound or called: a class with any dunder
    ("T = type(int)", "type other than type(x)"),
    ("type(type(1))('C', (), {})", "type other than type(x)"),
    ("x = [type(int)]", "type other than type(x)"),
    ("e.tb_frame", "frame or code attribute tb_frame"),
    ("f.f_back", "frame or code attribute f_back"),
    ("g.gi_frame", "frame or code attribute gi_frame"),
    ("c.co_consts", "frame or code attribute co_consts"),
    ("c.cell_contents", "frame or code attribute cell_contents"),
    ("match e:\n    case E(tb_frame=f): pass", "frame or code attribute tb_frame"),
    ("import sys", "an import of sys"),
    ("import os.path", "an import of os.path"),
    ("from json import dumps", "an import of json"),
    ("import threading", "an import of threading"),
    ("import scipy.stats", "an import of scipy.stats"),
    ("from torch import *", "a star import"),
    ("from . import x", "a relative import"),
    ("import torch.utils.data", "an import of torch.utils.data"),
    ("import mha.exercises", "an import of mha.exercises"),
    ("from mha import exercises", "exercises, a door"),
    ("torch.sys", "sys, a door"),
    ("sys.exc_info()", "the module sys"),  # bound by chapter 1's setup cell, not the student
    ("os.fork()", "the module os"),
    ("np.ctypeslib", "ctypeslib, a door"),
    ("torch.load(f)", "load, a door"),
    ("torch.library.Library", "library, a door"),
    ("torch.ops.aten", "ops, a door"),
    ("torch.jit.script(f)", "jit, a door"),
    ("f = torch.compile(f)", "compile, a door"),
    ("torch.cond(p, f, g, (x,))", "cond, a door"),
    ("torch.utils", "utils, a door"),
    ("torch.overrides", "overrides, a door"),
    ("import matplotlib\nmatplotlib.use('Agg')", "use, a door"),
    ("mha.answer_watch", "answer_watch, a door"),
    ("import torch\ntorch.exp = lambda t: t", "an attribute of a module changed (torch.exp)"),
    ("import torch.nn.functional as F\ndel F.softmax", "an attribute of a module changed"),
    ("import mha\nc = mha.checks\nc.x = 1", "an attribute of a module changed (c.x)"),
    ("'{0.f_back}'.format(frame)", "a format string that reads f_back"),
    ("'{0:{1._x}}'.format(a, b)", "a format string that reads _x"),
    ("text.format(x)", "format or format_map on something other than a string literal"),
    ("str.format_map('{a}', m)", "format or format_map on something other"),
    ("%timeit f()", "a cell IPython rewrites before it runs"),
    ("!pip install x", "a cell IPython rewrites before it runs"),
    ("ｇetattr(torch, 'exp')", "builtin getattr"),  # fullwidth: Python reads it NFKC
    # attack 42: fullwidth quotes, apostrophes and backslashes stay characters of a string
    ('t = "\uff02"\nf = getattr(1, "real")\nu = "\uff02"', "builtin getattr"),
    ("t = '\uff07'\nf = getattr(1, 'real')\nu = '\uff07'", "builtin getattr"),
    ('t = "\uff3c"\nf = getattr(1, "real")', "builtin getattr"),
    # IPython's shell runs strings
    ('get_ipython().ex("import sys")', "builtin get_ipython"),
    ('x = get_ipython().ev("1+1")', "builtin get_ipython"),
    ('get_ipython().run_cell("x=1")', "builtin get_ipython"),
    ('get_ipython().run_line_magic("timeit", "1")', "builtin get_ipython"),
    ('get_ipython().system("id")', "builtin get_ipython"),
    ("shell = get_ipython", "builtin get_ipython"),
    # modules outside the allowlist, however reached (looked up in the grader's import)
    ("import numpy as np\nnp.testing.measure('1')", "the module numpy.testing"),
    ("import numpy as np\nnp.testing.runstring('1', {})", "the module numpy.testing"),
    ("np.testing.assert_allclose(1, 1)", "the module numpy.testing"),  # np: the instructor's
    ("from numpy import testing", "an import of numpy.testing"),
    ("from numpy.testing import measure", "an import of numpy.testing"),
    ("import numpy\nt = numpy\nu = t\nu.testing.measure('1')", "the module numpy.testing"),
    ("import numpy as np\nt: object = np.random\nt.mtrand.x", "module numpy.random.mtrand"),
    ("import torch\ntorch.nn.modules.linear.Linear", "the module torch.nn.modules"),
    ("import torch\ntorch.backends.cudnn.enabled", "the module torch.backends"),
    ("import dataclasses\ndataclasses.re.compile('x')", "the module re"),
    ("import torch.distributions.constraints", "an import of torch.distributions.constraints"),
    ("import typing\ntyping.get_type_hints(f)", "get_type_hints, a door"),
    ("import numpy as np\nnp.savetxt('x.py', [], header='1')", "savetxt, a door"),
    ("import numpy as np\nnp.test(extra_argv=['-p', 'x'])", "test, a door"),
    ("torch.from_file('x.py', True, 9)", "from_file, a door"),
    ("torch.get_device_module('cpu').x", "get_device_module, a door"),
    ("torch.import_ir_module_from_buffer(cu, b, 'cpu', {})", "import_ir_module_from_buffer"),
    # a module passed, stored or put in a container is not followed
    ("import numpy as np\n[np][0].testing.measure('1')", "a module used as a value (np)"),
    ("import numpy as np\nf(np)", "a module used as a value (np)"),
    ("import numpy as np\ndef f(m=np):\n    return m", "a module used as a value (np)"),
    ("import numpy as np\nself.m = np", "a module used as a value (np)"),
    ("import numpy as np\nm, n = np, np", "a module used as a value (np)"),
    ("import numpy as np\n[(m := np)][0]", "a module used as a value (np)"),
    ("import torch\nreturn_linalg = lambda: torch.linalg", "a module used as a value"),
    # attack 52: matplotlib's backend registry imports a module by a computed name and returns
    # it (then its exec); Enum's functional API makes dunders from computed names; bar_label's
    # format string reads attributes; figure hooks name a function to call by a string
    ("import matplotlib.pyplot as plt\n"
     "b = plt.backend_registry.load_backend_module('module:' + '//builtins')",
     "backend_registry, a door"),
    ("f = some_call()\nrun = f.exec", "exec, a door"),
    ("f = some_call()\ng = f.getattr", "getattr, a door"),
    ("import matplotlib.pyplot as plt\nE = plt.Enum('E', {'a': 1})", "Enum, a door"),
    ("import matplotlib.pyplot as plt\nF = plt.Enum", "Enum, a door"),
    ("import matplotlib.pyplot as plt\nplt.gca().bar_label(c, fmt=s)", "bar_label, a door"),
    ("import matplotlib.pyplot as plt\nplt.gca().bar_label(c, fmt='{0.f_back}')",
     "bar_label, a door"),
    ("import matplotlib.pyplot as plt\nplt.gca().bar_label(c, **options)", "bar_label, a door"),
    ("import matplotlib.pyplot as plt\nlabel = plt.gca().bar_label", "bar_label, a door"),
    # attack 53: a string set as the default tensor type names a module that torch imports (a
    # storage's type(...) too: the grading runner guards that one); savefig's raw formats
    # write a buffer of chosen bytes to any file; the doors that are a module's attributes
    # stay doors there and on what a call returns
    ("import torch\ntorch.set_default_tensor_type('this.x')", "set_default_tensor_type"),
    ("import matplotlib.pyplot as plt\nplt.savefig('x.py', format='raw')", "format='raw'"),
    ("import matplotlib.pyplot as plt\nplt.gcf().savefig('x.py', format='RGBA')",
     "format='RGBA'"),
    ("import matplotlib.pyplot as plt\nplt.savefig('x.py', format=f)", "format= given"),
    ("import matplotlib.pyplot as plt\nplt.gcf().canvas.print_figure('x.py', 72, 'w', 'w', "
     "'portrait', 'raw')", "'raw', a raw pixel buffer"),
    ("import torch\nm = torch.load", "load, a door"),
    ("import numpy as np\nnp.test()", "test, a door"),
    ("import torch\ntorch.nn.Linear(2, 2).test", "test, a door"),
    ("import torch\ntorch.nn.Linear(2, 2).ops", "ops, a door"),
    # attack 54: a module kept as a class's attribute, on a name the rule takes for the
    # student's own (A.m.load, A.m.testing.measure); pathlib's Path re-exported
    ("import numpy as np\nclass A:\n    m = np\nA.m.load", "a module used as a value (np)"),
    ("import torch\nclass A:\n    m: object = torch", "a module used as a value (torch)"),
    ("class A:\n    import numpy as m", "an import in a class body"),
    ("class A:\n    class B:\n        from numpy import testing as t", "an import in a class body"),
    ("import matplotlib\nmatplotlib.Path('x.py').write_text('1')", "Path, a door"),
    ("from matplotlib import Path", "Path, a door"),
    # attack 55: the same under a statement of the class body; functools' wrappers set
    # attributes whose names are strings (a computed __code__)
    ("import numpy as np\nclass Box:\n    if True:\n        lib = np\nBox.lib.load",
     "a module used as a value (np)"),
    ("class A:\n    try:\n        import numpy as m\n    except ImportError:\n        pass",
     "an import in a class body"),
    ("import numpy as np\nclass A:\n    for _ in [1]:\n        with x:\n            m: object = np",
     "a module used as a value (np)"),
    ("import functools\nD = '_' * 2 + 'code' + '_' * 2\nfunctools.update_wrapper(f, g, "
     "assigned=[D], updated=[])", "update_wrapper, a door"),
    ("from functools import wraps", "wraps, a door"),
    ("import matplotlib.pyplot as plt\nplt.rcParams['figure.hooks'] = ['builtins:print']",
     "rcParams, a door"),
    ("import matplotlib.pyplot as plt\nplt.rcParams['animation.ffmpeg_path'] = 'x'",
     "rcParams, a door"),
    # attack 51: a singledispatch function's register evaluates the string annotations of
    # what it registers (typing.get_type_hints): code the rule never reads
    ("import functools\n@functools.singledispatch\ndef f(x):\n    return x\n"
     "@f.register\ndef _(x: \"(exec)('print(1)') or int\"):\n    return x",
     "singledispatch, a door"),
    ("from functools import singledispatchmethod", "singledispatchmethod, a door"),
    ("import typing\ndef h(x: typing.ForwardRef('int')):\n    return x", "ForwardRef, a door"),
    # attack 48: a metaclass reached as an attribute makes a class with any dunder (a __del__
    # made of builtins, freed inside a kernel), and a weak reference's callback runs inside
    # the kernel that frees its object, where the answer watch's dispatch mode is suspended
    ("import typing\nC = typing.ABCMeta('C', (), {})", "the metaclass ABCMeta"),
    ("from typing import ABCMeta as M", "the metaclass ABCMeta"),
    ("import typing\nM = typing.NamedTupleMeta", "the metaclass NamedTupleMeta"),
    ("from torch.optim import lr_scheduler\nk = lr_scheduler.ref(s, f)", "a weak reference"),
    ("from torch.optim.lr_scheduler import ref", "a weak reference"),
    # only the harmless forms of what honest notebooks write
    ("%matplotlib qt", "a cell IPython rewrites before it runs"),
    ("if 1:\n    %matplotlib inline", "a cell IPython rewrites before it runs"),
    ("from __future__ import annotations, division", "an import of __future__"),
    ("from __future__ import annotations as a", "an import of __future__"),
    ("class A:\n    def f(self):\n        def __init__(s): pass", "dunder definition"),
    ("class A:\n    def __call__(self): pass", "dunder definition __call__"),
    ("class A:\n    def __init__(self):\n        m = super().__init__", "dunder attribute"),
    ("class A:\n    def __init__(self):\n        super(A, self).__init__()", "dunder"),
    ("f.__name__ = 'softmax'", "dunder attribute __name__"),
    ("del f.__doc__", "dunder attribute __doc__"),
    ("x.__qualname__", "dunder attribute __qualname__"),
    ("import matplotlib.pyplot as plt\nplt.matplotlib.use('Agg')", "use, a door"),
    ("import matplotlib.pyplot as plt\nstyle = plt.style\nstyle.core.use", "matplotlib.style"),
]

PLAIN = [
    "import torch\nimport torch.nn.functional as F\nimport numpy as np\nimport math",
    "from mha.checks import ch01\nimport mha.checks.ch02\nfrom mha import attention",
    "import matplotlib.pyplot as plt\nplt.plot([1, 2])",
    "from itertools import product\nfrom functools import partial\nfrom collections import "
    "Counter\nimport random, time",
    "type(x)\nisinstance(x, torch.Tensor)",
    "'{:.4f} and {0[1]}'.format(x)\nf'{x.shape}'",
    "w = torch.zeros(3)\nw[torch.arange(2)] = 1.0",
    "import matplotlib\nmatplotlib.rcParams['figure.dpi'] = 80",
    "def f(x):\n    global y\n    y = x\n    return torch.vmap(torch.exp)(x)",
    "class Net(torch.nn.Module):\n    def forward(self, x):\n        return x",
    "print('hello')",
    "code = 1\nmodules = [code]",  # plain variables, though code and modules are also doors
    # attack 53: honest notebooks that used a door's name on their own objects, or a bar's
    # label with a literal format
    "import torch\nnet = torch.nn.Sequential(torch.nn.Linear(2, 2))\n"
    "n = sum(1 for _ in net.modules())",
    "class Config:\n    def __init__(self):\n        self.test, self.ops = True, 0\n"
    "        self.ops += 1\n    def load(self, kinds, code):\n        return kinds.scan",
    "import matplotlib.pyplot as plt\nfig, ax = plt.subplots()\nbars = ax.bar([1, 2], [3, 4])\n"
    "ax.bar_label(bars)\nax.bar_label(bars, fmt='{:.2f}')\nax.bar_label(bars, fmt='%.1f')",
    "import torch\nx = torch.ones(2)\nx.type(torch.float64)\nx.type('torch.DoubleTensor')\n"
    "x.type()\nx.type(dtype=torch.float16)",
    # attack 54: honest forms the fixes of attack 53 flagged: a cast back to a dtype held in a
    # name, the course's own timer, a format= of one's own function, modules of a model
    "import torch\ndef f(x, dtype=torch.float32):\n    d = x.dtype\n    return x.double().type(d)"
    ".type(dtype)",
    "import mha\nt = mha.measure.time_call(lambda: 1, repeats=3)\nfrom mha import measure\n"
    "import mha.analysis.measure",
    "def show(x, format):\n    return x\nfor f in ('a', 'b'):\n    show(1, format=f)",
    "import torch\nclass A:\n    size = 3\n    def f(self):\n        return torch.zeros(self.size)",
    "import numpy as np\nclass A:\n    def f(self):\n        m = np\n        return m.zeros(2)",

    "import matplotlib.pyplot as plt\nplt.savefig('f.png', format='png')",
    "",
    # the harmless forms of what honest notebooks write (attack 42's honest.py)
    "%matplotlib inline\nimport torch",
    "import matplotlib.pyplot as plt\nplt.style.use('ggplot')",
    "import matplotlib\nmatplotlib.style.use('ggplot')",
    "from typing import Optional\nimport typing\nx: typing.Any = None",
    "from __future__ import annotations",
    "import torch\nclass M(torch.nn.Module):\n    def __init__(self):\n        super().__init__()"
    "\n        self.w = torch.nn.Parameter(torch.zeros(2))\n    def forward(self, x):\n"
    "        return x * self.w",
    "x = 1\nprint(type(x).__name__, f.__doc__, __name__)",
    "import copy\nfrom dataclasses import dataclass, field",
    "import warnings\nwarnings.filterwarnings('ignore')",
    "import matplotlib.colors as mcolors\nfrom matplotlib import cm",
    "display(1)",
    "import torch\ntorch.testing.assert_close(torch.ones(1), torch.ones(1))",
    "import torch\nprint(torch.special.erf(torch.ones(1)), torch.linalg.norm(torch.ones(2)))",
    "import numpy as np\nrng = np.random.default_rng(0)\nx = rng.random(3)\nnp.linalg.norm(x)",
    "import torch.nn.functional as F\nfrom torch import nn\nL = torch.linalg\nL.svd(x)",
    "import mha\nfrom mha.checks import ch01\nc = mha.checks\nc.ch02.scaled_scores",
]


@pytest.mark.parametrize("code,reason", NOT_PLAIN, ids=[c for c, _ in NOT_PLAIN])
def test_each_rule_makes_code_not_plain(code, reason):
    found = why_not_plain([code])
    assert any(reason in why for why in found), found


@pytest.mark.parametrize("code", PLAIN)
def test_plain_code_is_plain(code):
    assert why_not_plain([code]) == []


# attack 42's cells (/tmp/attack42), each of which got full marks for 1.2 while torch.softmax
# ran: the payload clears the watch's record through the profile hook's closure
PAYLOAD = (
    "import sys, itertools, torch\nD = \"_\" * 2\ndef stable_softmax(scores, temperature):\n"
    "    w = torch.softmax(scores / temperature, dim=-1)\n"
    "    hook = next(itertools.starmap(sys.getprofile, [()]))\n"
    "    for cell in getattr(hook, D + \"closure\" + D) or ():\n"
    "        v = cell.cell_contents\n"
    "        if isinstance(v, set) and any(isinstance(e, str) for e in v):\n"
    "            v.clear()\n    return w\n")
HEX = f"bytes.fromhex('{PAYLOAD.encode().hex()}').decode()"
ATTACK_42 = {
    # the payload between two fullwidth quotes: the old rule read one triple-quoted string
    "nfkc": f't = "\uff02"\n{PAYLOAD}u = "\uff02"\n',
    "stealth": f't = "\uff02"\nrun = exec\nrun({HEX})\nu = "\uff02"\n',
    "ipyex": f'get_ipython().ex("""\n{PAYLOAD}""")\n',
    "measure": f"import numpy as np\nnp.testing.measure({HEX})\n",
    "runstring": f"import numpy as np\ng = {{}}\nnp.testing.runstring({HEX}, g)\n"
                 "prefers_other = g['prefers_other']\n",
}


@pytest.mark.parametrize("name", sorted(ATTACK_42))
def test_attack_42_is_not_plain(name):
    assert why_not_plain(["", ATTACK_42[name], ""]) != []


@pytest.mark.parametrize("cell", [
    # IPython strips "In [N]: " and "...: " from every line before it runs the cell (attack 43):
    # to Python the first is an annotation, to IPython a module attribute write
    "In [1]: import torch.nn.functional as F\nIn [2]: F.softmax = torch.exp\n",
    "In [1]: x = 1\n",
    ">>> F.softmax = torch.exp\n",
])
def test_a_cell_ipython_rewrites_before_it_runs_is_not_plain(cell):
    assert why_not_plain([cell]) == [
        "a cell IPython rewrites before it runs (a prompt, a magic or an escape) (code cell 1)"]


@pytest.mark.parametrize("cell", [
    "import matplotlib.pyplot as plt\nplt.rcParams['backend'] = 'module://this'\n",
    "import matplotlib\nmatplotlib.rcParams.update({'backend': 'agg'})\n",
])
def test_a_matplotlib_backend_chosen_by_name_is_not_plain(cell):
    """Attack 43: matplotlib imports a backend by its module's name, through a subscript store
    the rule read as plain; an installed module ran (the Zen of Python printed)."""
    assert "a matplotlib backend chosen by name (code cell 1, line 2)" in why_not_plain([cell])


@pytest.mark.parametrize("cell", [
    'plt.rcParams["back" + "end"] = "module:" + "//this"\n',
    'plt.rcParams.update(backend="modul" + "e://this")\n',
    'with plt.rc_context(dict(backend="module:/" + "/this")):\n    plt.figure()\n',
    'matplotlib.rc("", **{"back" + "end": "x"})\n',
    'k = "".join(["back", "end"])\nplt.rcParams[k] = "x"\n',
    'settings = plt.rcParams\n',
    'from matplotlib import rcParams\n',
], ids=["concat", "update", "rc_context", "rc", "join", "alias", "import"])
def test_matplotlib_settings_other_than_one_literal_name_are_not_plain(cell):
    """Attack 44: the backend's key and module name computed, or set through update, rc or
    rc_context, escaped the literal-string rule of attack 43; matplotlib then imported an
    installed module by name. Only plt.rcParams['a.name'] with a literal name stays plain."""
    header = "import matplotlib\nimport matplotlib.pyplot as plt\n"
    assert why_not_plain([header + cell]) != []
    honest = header + 'plt.rcParams["figure.figsize"] = (8, 4)\nprint(plt.rcParams["font.size"])\n'
    assert why_not_plain([honest]) == []


@pytest.mark.parametrize("line", ["%a\n", "a?\n", "x = !a\n", "!ls\n", "%a\r", "%a\x0c",
                                  "%a\u2028"])
def test_a_cell_of_magic_lines_at_the_size_limit_is_judged_in_a_moment(line):
    """Attack 44: IPython's escape transforms re-read a whole cell once per line they rewrite:
    one 63 KB cell of '%a' lines took 285 s of the grader's time. A cell that is not Python as
    written is refused before IPython reads it. Attack 45: lines as IPython splits them (on
    \r, \x0c, \u2028 as well as \n), 219 s of the grader's time for one cell of '%a\r'."""
    cell = line * (63_000 // len(line))
    why_not_plain(["import torch"])  # the grader's imports of the allowed modules, once
    start = time.process_time()
    assert why_not_plain([cell] * 4) != []
    assert time.process_time() - start < 1


def test_input_is_plain():
    """Instructor 46: one input() cell sent a correct 1.2 to the instructor. It reads nothing
    under grading (the grading process's stdin is /dev/null), so it cannot blind the watch."""
    assert why_not_plain(['name = input("Your name: ")\nprint(name)']) == []


@pytest.mark.parametrize("cell", [
    "def softmax_t(s, t):\n    return s / t)\n",  # a typo: nothing of the cell runs
    "x = torch.exp(\n",
    ">>> x = (\n",  # without its prompt still no Python
])
def test_a_cell_that_cannot_run_is_plain(cell):
    """Instructor 46: a SyntaxError in a student's own cell (it raises before any line runs)
    sent a correct 1.2 to the instructor as code the grader cannot see past."""
    assert why_not_plain(["import torch", cell]) == []


def test_only_a_few_short_cells_are_read_through_ipython():
    """The cells that are not Python are asked of IPython one by one (quadratic in their
    lines): more than 20, or longer than 50 lines, are not plain without asking."""
    typo = "x = (\n"
    assert why_not_plain([typo] * 20) == []
    assert why_not_plain([typo] * 21) == ["a magic, a shell line or a syntax error (code cell 21)"]
    assert why_not_plain([typo * 51]) == ["a magic, a shell line or a syntax error (code cell 1)"]


GRADING_SHELL = '''
import json, sys
from IPython.core.interactiveshell import InteractiveShell
from mha_grade.plain_code import _ipython_transform
from mha_grade.run_notebook import grading_shell

lines = json.loads(sys.argv[1])
default = InteractiveShell()  # automagic and the prefilter on, as in a student's kernel
rewritten = [line for line in lines if default.transform_cell(line) != _ipython_transform(line)]
InteractiveShell.clear_instance()
shell = grading_shell()
print(json.dumps([rewritten, [shell.transform_cell(line) == _ipython_transform(line)
                              for line in lines]]))
'''


def test_the_rule_reads_what_the_grading_shell_runs():
    """Attack 45: IPython's automagic made 'prun -q <any statements>' (no Python: read as a
    cell that cannot run) and 'run -mthis' (Python: run minus mthis) magics that ran code the
    rule never read; 1.2 got full marks. The grading shell has no automagic and no autocall,
    so its input transforms are exactly those the rule reads."""
    import json
    import subprocess
    import sys

    lines = ["prun -q x = 1", "reset -f", "run -mthis", "timeit x", "x = 1", "%time x = 1",
             "a = !ls", "x?", "In [1]: x = 1",
             # attack 46: the autocallables exit and quit, which autocall off leaves on
             "exit getattr(F, 'x')", "quit setattr(F, 'softmax', torch.exp)",
             "\nexit getattr(F, 'x')\n", "exit", "exit -1"]
    out = subprocess.run([sys.executable, "-c", GRADING_SHELL, json.dumps(lines)],
                         capture_output=True, text=True, check=True).stdout
    rewritten, same = json.loads(out.splitlines()[-1])
    assert {"prun -q x = 1", "reset -f", "run -mthis",  # with automagic
            "exit getattr(F, 'x')", "quit setattr(F, 'softmax', torch.exp)"} <= set(rewritten)
    assert all(same), dict(zip(lines, same, strict=True))


OUTPUT_CACHE = '''
import json
from mha_grade.run_notebook import grading_shell

shell = grading_shell()
shell.run_cell("type(int)")
shell.run_cell("T = Out.get(1, None)")
print(json.dumps([shell.user_ns["T"] is type, shell.user_ns.get("_") is type,
                  "_1" in shell.user_ns]))
'''


def test_the_grading_shell_keeps_no_output():
    """Attack 48: ``type(int)`` as a cell's last expression is plain (a read of ``type(x)``),
    and IPython kept its value, ``type`` itself, in ``Out`` for the next cell: ``T =
    Out[1]`` then made classes with any dunder. The grading shell displays and keeps nothing."""
    import json
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", OUTPUT_CACHE], capture_output=True, text=True,
                         check=True).stdout
    assert json.loads(out.splitlines()[-1]) == [False, False, False], out


def test_many_chained_aliases_are_judged_in_linear_time():
    """10,000 assignments each naming the next (attack 42's slow cells: the old fixed point
    took a pass per assignment, 302 s of the grader's time for 5,800): under a second."""
    letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
    names = [f"q_{a}{b}{c}" for a in letters for b in letters for c in letters][:10_001]
    lines = [f" {names[i]}={names[i + 1]}" for i in range(10_000)]
    cells = ["if 0:\n" + "\n".join(lines[i:i + 2_500]) for i in range(0, 10_000, 2_500)]
    why_not_plain(["import torch"])  # the grader's imports of the allowed modules, once
    start = time.process_time()  # this process's time: other processes' load does not count
    assert why_not_plain(cells) == []
    # about 0.5 s on a quiet machine, 1.03 s once in a CI run on a loaded one; the quadratic
    # fixed point took 302 s
    assert time.process_time() - start < 3


def test_a_reason_names_the_code_cell_and_line():
    assert why_not_plain(["", "x = 1", "y = 2\ngetattr(x, 'a')"]) == [
        "the builtin getattr (code cell 3, line 2)"]


def _functions(source: str) -> dict[str, str]:
    """Each top-level function and class of ``source``, by name: its own source."""
    return {node.name: ast.get_source_segment(source, node)
            for node in ast.parse(source).body
            if isinstance(node, ast.FunctionDef | ast.ClassDef)}


def _imports(source: str) -> str:
    """The import statements of ``source``."""
    return "\n".join(ast.get_source_segment(source, node) for node in ast.parse(source).body
                     if isinstance(node, ast.Import | ast.ImportFrom))


ROUTES = _functions(watch_tests.ROUTES)
# the answers of tests/test_answer_watch.py that reach past the watch, or run work it does
# not see (a thread, a process), each as the cells a student would write: the function, and
# the definitions and imports it needs
EVADES_THE_WATCH = {
    "by_getattr": [ROUTES["by_getattr"]],
    "by_private_helper": [ROUTES["by_private_helper"]],
    "by_a_copy": [ROUTES["by_a_copy"]],
    "switched_off": ["import sys", ROUTES["switched_off"]],
    "switched_off_softmax": [ROUTES["switched_off_softmax"]],
    "softmax_by_refs": [ROUTES["softmax_by_refs"]],
    "softmax_by_decomposition": [ROUTES["softmax_by_decomposition"]],
    "in_a_thread": [ROUTES["in_a_thread"]],
    "in_a_forked_process": [ROUTES["in_a_forked_process"]],
    "reference_in_a_thread": [ROUTES["reference_in_a_thread"]],
    "with_torch_dispatch_disabled": [ROUTES["with_torch_dispatch_disabled"]],
    "with_the_python_key_excluded": [ROUTES["with_the_python_key_excluded"]],
    "with_the_mode_popped": [ROUTES["with_the_mode_popped"]],
    "by_a_subclass": [ROUTES["Hidden"], ROUTES["by_a_subclass"]],
    "all_called_from_c": [ROUTES["all_called_from_c"]],
    "in_a_thread_by_an_alias": [ROUTES["in_a_thread_by_an_alias"]],
    "by_a_moved_copy": [ROUTES["_moved"], "_rotary = _moved(mha.layers.rotary)",
                        ROUTES["by_a_moved_copy"]],
    "by_a_prestarted_worker": [watch_tests.PRESTARTED[len(watch_tests.ROUTES):]],
    # with the imports they need (``code`` of ``code.InteractiveInterpreter`` is a module only
    # when the student imports it)
    **{name: [_imports(watch_tests.TAMPERING), text]
       for name, text in _functions(watch_tests.TAMPERING).items()},
    **{name: [_imports(watch_tests.PEEKING), text]
       for name, text in _functions(watch_tests.PEEKING).items()},
    **{switch.__name__: [inspect.getsource(switch)] for switch in watch_tests.SWITCHES},
}


@pytest.mark.parametrize("name", sorted(EVADES_THE_WATCH))
def test_every_answer_that_evades_the_watch_is_not_plain(name):
    assert why_not_plain(EVADES_THE_WATCH[name]) != []


# the honest notebooks of tests/test_grading_attacks.py, and its attacks that do not reach the
# watch: the sandbox stops them (an endless loop, a memory bomb), their points do not come
# from the watch
NOT_AT_THE_WATCH = {"honest_other", "honest_full", "honest_untouched", "honest_ch01_print",
                    "hangs_in_call", "memory_bomb", "partial_line_then_raise",
                    # plain code: each call's own inputs defeat it, not the rule (attack 50)
                    "replays_recorded_inputs"}


def _attack_notebooks() -> dict[str, dict]:
    paths = {"folder": ROOT / "no-such-folder", "home": ROOT / "no-home", "ssh": ROOT / "no-key",
             "other": ROOT / "no-other", "solution": ROOT / "no-solution", "port": 9}
    return {who: nb for who, (nb, _) in attack_tests.attacks(paths).items()
            if isinstance(nb, dict)}


ATTACKS = _attack_notebooks()


def _student_code(nb: dict, instructor: dict) -> list[str]:
    """The notebook's code cells, those of the instructor's notebook as "" (as grading reads)."""
    theirs = {fmt.source(c) for c in instructor["cells"] if c["cell_type"] == "code"}
    return [fmt.source(c) if fmt.source(c) not in theirs else ""
            for c in nb["cells"] if c["cell_type"] == "code"]


def _instructor(who: str) -> dict:
    return fmt.load(attack_tests.CH01 if who in attack_tests.CH01_NOTEBOOKS
                    else attack_tests.EXAMPLE)


@pytest.mark.parametrize("who", sorted(set(ATTACKS) - NOT_AT_THE_WATCH))
def test_every_attack_of_the_grading_run_is_not_plain(who):
    assert why_not_plain(_student_code(ATTACKS[who], _instructor(who))) != []


def test_the_honest_notebooks_of_the_grading_run_are_plain():
    for who in ("honest_other", "honest_full", "honest_untouched", "honest_ch01_print"):
        assert why_not_plain(_student_code(ATTACKS[who], _instructor(who))) == [], who


HEADER = "import math\nimport numpy as np\nimport torch\nimport torch.nn.functional as F\n" \
         "import mha\n"
HONEST = [(module, variant) for (module, _), variants in VARIANTS.items()
          if module in ("ch01", "ch02") for variant in variants]


@pytest.mark.parametrize("module,variant", HONEST, ids=[v.__name__ for _, v in HONEST])
def test_every_honest_answer_to_chapters_1_and_2_is_plain(module, variant):
    assert why_not_plain([HEADER, inspect.getsource(variant)]) == []


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_every_chapters_own_solutions_are_plain(notebook):
    nb = json.loads(notebook.read_text())
    for cell in nb["cells"]:
        cell["source"] = fmt.source(cell)
    solutions = [nb["cells"][i]["source"] for i in sorted(answer_cells(nb))]
    assert solutions and why_not_plain(solutions) == []


# ---------------------------------------------------------------------------------------------
# In grading: the exercises that forbid ops are left to the instructor, the others unchanged

CH01 = ROOT / "notebooks" / "01_attention_recap.ipynb"


def _graded_ch01() -> Outcome:
    """Chapter 1 graded with every check correct and full marks."""
    assignment = load_assignment(CH01)
    outcome = Outcome("alice/01_attention_recap.ipynb", assignment)
    results = {str(i): Result(e.name, assignment.max_points(e), assignment.max_points(e),
                              "correct", "correct")
               for e in assignment.exercises for i in e.checks}
    score(outcome, results, "", lambda text: text)
    return outcome


def test_code_that_is_not_plain_leaves_only_the_exercises_that_forbid_ops_to_the_instructor():
    outcome = _graded_ch01()
    before = dict(outcome.points)
    leave_to_instructor(outcome, ["the builtin getattr (code cell 9, line 2)"])
    assert "1.2" not in outcome.points and outcome.status["1.2"] == LEFT_TO_INSTRUCTOR
    assert outcome.message["1.2"] == (
        "your notebook uses the builtin getattr (code cell 9, line 2), which the grader cannot "
        "see past: your instructor grades this exercise by hand")
    assert any(flag.startswith("exercise 1.2 left to the instructor: its code is not plain "
                               "(the builtin getattr (code cell 9, line 2)); the check alone "
                               "found correct, 1/1") for flag in outcome.flags)
    assert {k: v for k, v in before.items() if k != "1.2"} == outcome.points  # the others
    rows = {r["exercise"]: r for r in outputs.grade_rows(outcome)}
    assert (rows["1.2"]["points"], rows["1.2"]["max_points"]) == ("", 1)  # not a silent 0
    assert "1.2 left to the instructor" in outputs.summary_line(outcome)
    test = next(t for t in gradescope.report([outcome], [], [])["tests"]
                if "exercise 1.2" in t["name"])
    assert "score" not in test and "your instructor grades this exercise by hand" in \
        test["output"]


def test_plain_code_changes_nothing():
    outcome = _graded_ch01()
    before = (dict(outcome.points), dict(outcome.status), list(outcome.flags))
    leave_to_instructor(outcome, [])
    assert (outcome.points, outcome.status, outcome.flags) == before
