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


# ----- the numbers a verdict quotes, and the numbers a test asserts -----

# a decimal (0.6490, 2.1e-06) or a percentage (17%); a number right after "row" is a claim's id
QUOTED = re.compile(r"(?<![\w.^{/])(?P<decimal>\d+\.\d+(?:e-?\d+)?)(?![\d.])"
                    r"|(?<![\w.])(?P<percent>\d+(?:\.\d+)?)\s*(?:%|\\%)")
ROW_ID = re.compile(r"rows?\s+$")
# "3 of 16 heads (19%)": the percentage is the quoted count's arithmetic; the count is checked
COUNT_BEFORE = re.compile(r"(\d+) of \d+[^()]{0,20}\($")


def quoted_numbers(text: str) -> list[tuple[str, str]]:
    """The numbers a verdict quotes, as ``(kind, text)`` with kind ``decimal``, ``percent`` or
    ``count`` (the k of "k of n (p%)", which stands for the percentage)."""
    found = []
    for match in QUOTED.finditer(text):
        before = text[:match.start()]
        if ROW_ID.search(before):
            continue
        if match.group("decimal"):
            found.append(("decimal", match.group("decimal")))
            continue
        count = COUNT_BEFORE.search(before)
        found.append(("count", count.group(1)) if count else ("percent", match.group("percent")))
    return found


def _constants(node: ast.AST) -> tuple[set[float], set[str]]:
    numbers, strings = set(), set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Constant) and not isinstance(sub.value, bool):
            if isinstance(sub.value, int | float):
                numbers.add(float(sub.value))
            elif isinstance(sub.value, str):
                strings.add(sub.value)
    return numbers, strings


def asserted_constants(test: str) -> tuple[set[float], set[str]]:
    """The number and string constants of a test (``tests/file.py::name``): its body and
    decorators without the docstring, and the module-level constants it uses by name."""
    path, name = test.split("::")
    tree = ast.parse((ROOT / path).read_text())
    module_values = {target.id: statement.value for statement in tree.body
                     if isinstance(statement, ast.Assign) for target in statement.targets
                     if isinstance(target, ast.Name)}
    numbers, strings = set(), set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == name:
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                body = body[1:]  # the docstring says, it does not assert
            parts = [*body, *node.decorator_list]
            used = {sub.id for part in parts for sub in ast.walk(part) if isinstance(sub, ast.Name)}
            parts += [module_values[n] for n in used if n in module_values]
            for part in parts:
                part_numbers, part_strings = _constants(part)
                numbers |= part_numbers
                strings |= part_strings
    return numbers, strings


def is_asserted(kind: str, text: str, numbers: set[float], strings: set[str]) -> bool:
    """A decimal is asserted by a constant that rounds to it at the digits the row prints (or
    by a string holding it); a percentage by p or by a fraction that rounds to p/100; a count
    by the integer itself."""
    if any(text in s for s in strings):
        return True
    value = float(text)
    if kind == "decimal":
        digits = len(text.split(".")[1].split("e")[0])
        if "e" in text:
            return any(abs(y) > 0 and f"{abs(y):.{digits}e}" == text for y in numbers)
        return any(f"{abs(y):.{digits}f}" == text for y in numbers)
    if kind == "percent":
        return any(y == value or (0 < abs(y) <= 1 and round(100 * abs(y)) == value)
                   for y in numbers)
    return value in numbers
