"""Which tests assert which claim of book/claims.md: the ``@pytest.mark.claim("3.3")`` markers.

Read statically (with ``ast``) so that tests/test_claims.py needs no second pytest collection.
"""

from __future__ import annotations

import ast
import re

from conventions import ROOT

CLAIM_ROW = re.compile(r"^\|\s*((?:\d+|L)\.\d+)\s*\|")
TEST_REF = re.compile(r"`?(tests/[\w/]+\.py)::(\w+)`?")
UNCHECKED = {"not checked"}


def claim_rows() -> dict[str, list[str]]:
    """Claim id -> the row's cells (``#, Claim, Seed, Verdict, Where, Test``)."""
    rows = {}
    for line in (ROOT / "book" / "claims.md").read_text().splitlines():
        match = CLAIM_ROW.match(line)
        if match:
            rows[match.group(1)] = [cell.strip() for cell in line.strip().strip("|").split("|")]
    return rows


def verdict(cells: list[str]) -> str:
    return cells[3].lower()


def is_checked(cells: list[str]) -> bool:
    return not any(verdict(cells).startswith(word) for word in UNCHECKED)


def _claim_ids(decorator: ast.expr) -> list[str]:
    """The ids of a ``pytest.mark.claim("3.3", ...)`` decorator, or [] for any other."""
    if (isinstance(decorator, ast.Call) and isinstance(decorator.func, ast.Attribute)
            and decorator.func.attr == "claim"):
        return [arg.value for arg in decorator.args if isinstance(arg, ast.Constant)]
    return []


def marked_tests() -> dict[str, set[str]]:
    """Claim id -> the tests (``tests/file.py::name``) marked with it."""
    marked: dict[str, set[str]] = {}
    for path in sorted((ROOT / "tests").glob("test_*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                for decorator in node.decorator_list:
                    for claim in _claim_ids(decorator):
                        marked.setdefault(claim, set()).add(
                            f"{path.relative_to(ROOT).as_posix()}::{node.name}")
    return marked
