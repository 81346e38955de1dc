"""Round 5 (attack3): simple forms against the new flag patterns and the alias rewrite of
without_check_calls. Static only: flags(without_check_calls(nb)) on the example chapter's solved
notebook plus one cell (patching) or chapter 9's student edition plus one answer cell (9.5's
reference). Run from /work/wt/attack3:
  PYTHONPATH=src:tests /work/main/.venv/bin/python /work/wt/reviews-r3/attack3/bypasses.py
"""
from exercise_notebooks import EXAMPLE, fmt, student_edition
from pathlib import Path
from mha_grade.assignments import load_assignment
from mha_grade.flags import flags
from mha_grade.run import without_check_calls

def norm(nb):
    for c in nb["cells"]:
        c["source"] = "".join(c["source"]) if isinstance(c["source"], list) else c["source"]
    return nb

def run(path, edition, cases, tag):
    a = load_assignment(path)
    for what, code in cases.items():
        nb = norm(edition(fmt.load(path)))
        nb["cells"].append({"cell_type": "code", "source": code, "metadata": {"tags": tag},
                            "outputs": [], "execution_count": None})
        try:
            compile(code, "<cell>", "exec")
            ok = "py-ok"
        except SyntaxError as e:
            ok = f"SYNTAX {e}"
        print(f"{what:58s} [{ok}] -> {flags(without_check_calls(nb, a), a)}")

I = "from mha.checks import ch00\n"
PATCH = {
    "setattr(ch00, 'scaled_scores', print)": I + "setattr(ch00, 'scaled_scores', print)",
    "alias2 = ch00; alias2.x = print": I + "alias2 = ch00\nalias2.scaled_scores = print",
    "alias in another cell? (import here, assign in same cell via other name)":
        I + "c2 = [ch00][0]\nc2.scaled_scores = print",
    "ch00 .scaled_scores = print (space before dot)": I + "ch00 .scaled_scores = print",
    "ch00. scaled_scores = print (space after dot)": I + "ch00. scaled_scores = print",
    "(ch00).scaled_scores = print": I + "(ch00).scaled_scores = print",
    "ch00 \\ newline .scaled_scores = print": I + "ch00 \\\n.scaled_scores = print",
    "annotated: ch00.scaled_scores: object = print": I + "ch00.scaled_scores: object = print",
    "tuple target: ch00.scaled_scores, y = print, 1": I + "ch00.scaled_scores, y = print, 1",
    "list target: [ch00.scaled_scores] = [print]": I + "[ch00.scaled_scores] = [print]",
    "for target: for ch00.scaled_scores in [print]: pass": I + "for ch00.scaled_scores in [print]: pass",
    "ch00.__setattr__('scaled_scores', print)": I + "ch00.__setattr__('scaled_scores', print)",
    "mock.patch.object(ch00, 'scaled_scores', print).start()":
        I + "from unittest import mock\nmock.patch.object(ch00, 'scaled_scores', print).start()",
    "del ch00.scaled_scores": I + "del ch00.scaled_scores",
    "fullwidth alias use: as c / ｃ.scaled_scores = print":
        "from mha.checks import ch00 as c\nｃ.scaled_scores = print",
    "fullwidth alias bind: as ｃ / c.scaled_scores = print":
        "from mha.checks import ch00 as ｃ\nc.scaled_scores = print",
    "import mha.checks.ch00 (binds mha); mha.checks.ch00.x = print":
        "import mha.checks.ch00\nmha.checks.ch00.scaled_scores = print",
    "mha .checks.ch00.scaled_scores = print (space)": "mha .checks.ch00.scaled_scores = print",
    "mha.ｃhecks.ch00.scaled_scores = print (fullwidth)": "mha.ｃhecks.ch00.scaled_scores = print",
    "fullwidth __ｃlosure__ / ｃell_contents (busy tamper)":
        I + "[c.ｃell_contents.append(True) for c in ch00.scaled_scores.__ｃlosure__ "
            "if c.ｃell_contents == []]",
    "gc.get_referents + setattr 'cell_'+'contents' (serve swap)":
        I + "import gc\nclo = [r for r in gc.get_referents(ch00.scaled_scores) if type(r) is tuple][0]\n"
            "cap = [c for c in clo if getattr(gc.get_referents(c)[0], '__name__', '') == 'capture']",
    "gc.get_referents, no getattr-with-quote (serve swap)":
        I + "import gc\nN = '__name_' '_'\nname = lambda f: [r for r in gc.get_referents(f.__code__ if 0 else f)]\n"
            "clo = [r for r in gc.get_referents(ch00.scaled_scores) if type(r) is tuple][0]\n"
            "C = 'cell_' + 'contents'\nsetattr(clo[0], C, print)",
    "inspect.getclosurevars (busy tamper, no mha name left)":
        "from mha.checks.ch00 import scaled_scores as s\nimport inspect\n"
        "cap = inspect.getclosurevars(s).nonlocals['capture']\n"
        "inspect.getclosurevars(cap).nonlocals['busy'].append(True)",
    "exec('ch00.scaled_scores = print')": I + "exec('ch00.scaled_scores = print')",
    "object.__setattr__(ch00, 'scaled_scores', print)": I + "object.__setattr__(ch00, 'scaled_scores', print)",
    "honest: from mha.checks import ch00, then ch00.scaled_scores(f) (control)":
        I + "ch00.scaled_scores(lambda q, k: q @ k.T / k.shape[-1] ** 0.5)",
}
run(EXAMPLE, lambda nb: nb, PATCH, [])

J = Path("notebooks/09_decoders.ipynb")
REF = {
    "object.__getattribute__(mha, 'pool_kv_heads')": "mean_pool_kv = object.__getattribute__(mha, 'pool_kv_heads')",
    "type(mha).__getattribute__(mha, ...)": "mean_pool_kv = type(mha).__getattribute__(mha, 'pool_kv_heads')",
    "vars(mha)['pool_kv_heads']": "mean_pool_kv = vars(mha)['pool_kv_heads']",
    "exec": "exec('mean_pool_kv = mha.pool_kv_heads')",
    "n = 'pool_kv_heads'; getattr(mha, n)": "n = 'pool_kv_heads'\nmean_pool_kv = getattr(mha, n)",
    "getattr(mha, n) with n from another (non-answer) cell": "mean_pool_kv = getattr(mha, N)",
    "[getattr(mha, x) for x in mha.__all__ if 'pool' in x]":
        "mean_pool_kv = [getattr(mha, x) for x in mha.__all__ if x.startswith('pool')][0]",
    "pkgutil.resolve_name('mha.kv_sharing:pool_kv_heads')":
        "import pkgutil\nmean_pool_kv = pkgutil.resolve_name('mha.kv_sharing:pool_kv_heads')",
    "pydoc.locate('mha.pool_kv_heads')": "import pydoc\nmean_pool_kv = pydoc.locate('mha.pool_kv_heads')",
    "fullwidth ｇetattr(mha, 'pool_kv_heads')": "mean_pool_kv = ｇetattr(mha, 'pool_kv_heads')",
    "fullwidth mha.ｐool_kv_heads (AST normalizes)": "mean_pool_kv = mha.ｐool_kv_heads",
    "fullwidth sys.ｍodules['mha.kv_sharing']": "import sys as s\nmean_pool_kv = s.ｍodules['mha.kv_sharing'].pool_kv_heads",
    "mha.__getattr__? no; module.__dict__.get": "mean_pool_kv = mha.__dict__.get('pool_kv_heads')",
    "functools.reduce(getattr ...) with space: reduce( getattr": "import functools\nmean_pool_kv = functools.reduce(\n    getattr, ['pool_kv_heads'], mha)",
    "reduce with g = getattr": "import functools\ng = getattr\nmean_pool_kv = functools.reduce(g, ['pool_kv_heads'], mha)",
    "g = getattr; g(mha, 'pool_kv_heads')": "g = getattr\nmean_pool_kv = g(mha, 'pool_kv_heads')",
    "getattr(*(mha, 'pool_kv_heads'))": "args = (mha, 'pool_kv_heads')\nmean_pool_kv = getattr(*args)",
}
run(J, student_edition.student_edition, REF, ["solution"])
