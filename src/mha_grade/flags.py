"""Flags for code that deserves a human look: it reaches for the machine or the grading
machinery instead of solving the exercise (none of it can change a grade)."""

from __future__ import annotations

import ast
import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mha_grade.assignments import Assignment




# Code that reaches for the machine or the grading machinery instead of solving the exercise.
# None of it can change a grade (the verdicts are computed outside the sandbox); a flag tells
# the instructor that someone tried. Only cells that differ from every cell of the instructor's
# notebook are read, so the setup cell and the chapter's own code never raise a flag.
SUSPICIOUS = {
    "reads /proc or secrets": re.compile(r"/proc\b|\benviron\b|\.ssh\b|getenv"),
    "processes": re.compile(r"\bsubprocess\b|\bfork\w*|\bos\.system\b|\bpty\b|start_new_"
                            r"session|\bsetsid\b|\bexec[lv]p?e?\b|\bspawn\w*|\bpopen\b|"
                            r"\bsystem\s*\(|\bkill(pg)?\b|\bmultiprocessing\b|\bdaemon\b"),
    "shell escapes": re.compile(r"(?m)^\s*!|%%?(bash|sh|script|system|sx)\b|get_ipython\b"),
    "network": re.compile(r"\bsocket\b|\burllib\b|\brequests\.|\bhttp\.client\b"),
    "low-level": re.compile(r"\bctypes\b|\bcffi\b|\bptrace\b|\bsys\.settrace\b"),
    "patches the grading": re.compile(r"\bmha\.(exercises|checks)\b|"
                                      r"from\s+mha\s+import[^\n]*\b(exercises|checks)\b|"
                                      r"__torch_function__|\bsys\.modules\b|"
                                      r"\btorch\.\w+\s*=[^=]|\bsys\.std(out|err)\s*=[^=]"),
    "writes startup or package files": re.compile(r"\.ipython|profile_default|__file__|"
                                                  r"site-packages|\.pth\b"),
    "fake verdict": re.compile(r"Exercise \d+\.\d+ \[|✓"),
    "touches the grader's files": re.compile(r"/autograder\b|\bgrades\.csv|\bgrading_log\b|"
                                             r"\bresults\.json|\.csv\.part\b"),
    "obfuscation": re.compile(r"\bgetattr\([^)]*(\+|['\"])|\bexec\(|\beval\(|__import__|"
                              r"\bcompile\(|\bimportlib\b|\bvars\(|\bglobals\(|"
                              r"\b__dict__\b|\bimport_module\b"),
}


def flags(nb: dict, assignment: Assignment) -> list[str]:
    new = [c["source"] for c in nb["cells"]
           if c["cell_type"] == "code" and c["source"] not in assignment.cells]
    code = "\n".join(new)
    found = [name for name, pattern in SUSPICIOUS.items() if pattern.search(code)]
    used = mha_names(new)
    for exercise, references in assignment.references.items():
        called = [r for r in references if any(
            u == r or (u.split(".")[-1] == r.split(".")[-1]) for u in used - assignment.given)]
        if called:
            found.append(f"calls the reference of exercise {exercise} ({', '.join(called)})")
    return found


def mha_names(sources: list[str]) -> set[str]:
    """The dotted names of ``mha`` that some code uses: ``mha.attention(...)``, ``from mha import
    attention as a`` then ``a(...)``, ``import mha.layers as L`` then ``L.attention``. A cell that
    is not Python (IPython magics) is read line by line, as far as it parses."""
    used: set[str] = set()
    for text in sources:
        try:
            trees = [ast.parse(text)]
        except (SyntaxError, ValueError):
            trees = []
            for line in text.splitlines():
                try:
                    trees.append(ast.parse(line.strip()))
                except (SyntaxError, ValueError):
                    continue
        for tree in trees:
            aliases = {"mha": "mha"}
            for node in ast.walk(tree):
                if isinstance(node, ast.Import):
                    for name in node.names:
                        if name.name.split(".")[0] == "mha":
                            used.add(name.name)
                            if name.asname:
                                aliases[name.asname] = name.name
                elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] \
                        == "mha":
                    for name in node.names:
                        used.add(f"{node.module}.{name.name}")
                        aliases[name.asname or name.name] = f"{node.module}.{name.name}"
            for node in ast.walk(tree):
                if isinstance(node, ast.Attribute | ast.Name):
                    dotted = _dotted(node)
                    if dotted and dotted.split(".")[0] in aliases:
                        head, _, rest = dotted.partition(".")
                        used.add(".".join(filter(None, [aliases[head], rest])))
    return used


def _dotted(node: ast.AST) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return ".".join([node.id, *reversed(parts)])

