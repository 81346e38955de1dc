"""Which tests assert which claim of book/claims.md: the ``@pytest.mark.claim("3.3")`` markers.

Read statically (with ``ast``) so that tests/test_claims.py needs no second pytest collection.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from conventions import ROOT

# book/claims.md: per chapter a table of one line per claim (its number, linking to its
# evidence; the claim; the verdict; the reason in one sentence), then the evidence of each claim
# in a section of its own, fields in bold: the claim, its seed, the verdict, where, the tests.
SUMMARY_ROW = re.compile(r"^\|\s*\{ref\}`((?:\d+|L)\.\d+) <claim-([\w-]+)>`\s*\|")
EVIDENCE = re.compile(r"^\(claim-([\w-]+)\)=\n### Claim ((?:\d+|L)\.\d+)\n"
                      r"(.*?)(?=^\([\w-]+\)=$|^#|\Z)", re.MULTILINE | re.DOTALL)
FIELDS = {"claim": "Claim", "seed": "Seed", "verdict": "Verdict",
          "where": "Where the course shows it", "tests": "Tests"}
FIELD = re.compile(r"^\*\*(" + "|".join(map(re.escape, FIELDS.values())) + r"):\*\*\s*",
                   re.MULTILINE)
TEST_REF = re.compile(r"`?(tests/[\w/]+\.py)::(\w+)`?")
VERDICTS = ("true", "false", "true under a condition", "ambiguous", "not checked")
UNCHECKED = {"not checked"}


@dataclass
class Claim:
    id: str
    claim: str  # as the table quotes it
    label: str  # the table's verdict: one of VERDICTS, or "attribution: true; reproduction: ..."
    reason: str  # the table's one sentence
    evidence: dict[str, str]  # the section's fields: claim, seed, verdict, where, tests
    anchor: str  # the section's label, which the table's number links to

    @property
    def tests(self) -> str:
        return self.evidence.get("tests", "")

    def verdicts(self) -> list[tuple[str, str]]:
        """The label as (part, verdict): ``[("", "true")]``, ``[("attribution", "true"), ...]``."""
        parts = []
        for part in self.label.split(";"):
            name, _, value = part.strip().rpartition(":")
            parts.append((name.strip(), value.strip()))
        return parts


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def claim_rows() -> dict[str, Claim]:
    """Claim id -> its table row and its evidence. A claim that is in the table without its
    section (or the other way round) fails here, naming it."""
    text = (ROOT / "book" / "claims.md").read_text()
    sections = {}
    for match in EVIDENCE.finditer(text):
        anchor, claim, body = match.groups()
        pieces = FIELD.split(body)
        fields = {name: value.strip() for name, value in zip(pieces[1::2], pieces[2::2],
                                                               strict=True)}
        sections[claim] = (f"claim-{anchor}",
                           {key: fields.get(title, "") for key, title in FIELDS.items()})
    rows = {}
    for line in text.splitlines():
        match = SUMMARY_ROW.match(line)
        if match:
            claim, anchor = match.group(1), f"claim-{match.group(2)}"
            cells = _cells(line)
            if claim not in sections:
                raise ValueError(f"book/claims.md: claim {claim} has no evidence section")
            label = re.sub(r"<br\s*/?>", " ", cells[2]).replace("*", "")  # one part a line
            rows[claim] = Claim(claim, cells[1], label, cells[3], sections[claim][1], anchor)
            if sections[claim][0] != anchor:
                raise ValueError(f"book/claims.md: claim {claim} links to {anchor}, its "
                                 f"evidence is {sections[claim][0]}")
    missing = sorted(set(sections) - set(rows))
    if missing:
        raise ValueError(f"book/claims.md: evidence without a row in a table: {missing}")
    return rows


def verdict(row: Claim) -> str:
    """Everything a claim's verdict says: the one-sentence reason and the whole argument."""
    return (row.reason + " " + row.evidence["verdict"]).lower()


def is_checked(row: Claim) -> bool:
    """Whether a test must check the claim: unless every verdict it gets is "not checked"."""
    return not all(value in UNCHECKED for _, value in row.verdicts())


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
#
# What is checked: decimals (0.6490, 2.1e-06, with their sign), percentages, and the k of every
# "k of n" (38 of 72 heads, 4 of 6 seeds). What is not: other integers (parameter counts, step
# counts, sizes), integers and exponents inside formulas ($10^{-12}$, $8nd^2$), and words.
# A plain number must be asserted as an equality, in an ``assert`` statement or an ``assert_*``
# call: an operand of ``==`` (``round(x, 4) == 0.6490``),
# the number checked by ``pytest.approx``/``isclose``/``assert_close``, the centre of
# ``abs(x - 0.6490) < tol``, or a string compared with ``==``/``in``. A number the verdict states
# as a bound ("more than 0.2", "below 0.99") may be asserted by a comparison (``x > 0.2``) too.

SIGN = r"(?P<sign>(?<![\w.])[-\u2212])?"
QUOTED = re.compile(SIGN + r"(?<![\w.^{/])(?P<decimal>\d+\.\d+(?:e-?\d+)?)(?![\d.])"
                    r"|(?<![\w.])(?P<percent>\d+(?:\.\d+)?)\s*(?:%|\\%)"
                    r"|(?<![\w.^{/])(?P<count>\d+) of \d+(?![\d.])")
ROW_ID = re.compile(r"rows?\s+$")
# "3 of 16 heads (19%)": the percentage is the quoted count's arithmetic; the count is checked
PERCENT_OF_COUNT = re.compile(r"\d+ of \d+[^()]{0,20}\($")
BOUND_WORDS = re.compile(r"(?:more than|less than|fewer than|above|below|over|under|at least|"
                         r"at most|up to|within|exceeds?|[<>]|\\[lg]eq?)\s*\$?\s*$")


def quoted_numbers(text: str) -> list[tuple[str, str]]:
    """The numbers a verdict quotes, as ``(kind, text)``: kind ``decimal``, ``percent`` or
    ``count`` (the k of "k of n"), prefixed with ``bound-`` when the verdict states the number
    as a bound; a decimal keeps its sign ("-0.2625", a minus sign written as - or \u2212)."""
    found = []
    for match in QUOTED.finditer(text):
        before = text[:match.start()]
        if ROW_ID.search(before):
            continue
        bound = "bound-" if BOUND_WORDS.search(before) else ""
        if match.group("decimal"):
            sign = "-" if match.group("sign") else ""
            found.append((bound + "decimal", sign + match.group("decimal")))
        elif match.group("count"):
            found.append((bound + "count", match.group("count")))
        elif not PERCENT_OF_COUNT.search(before):
            found.append((bound + "percent", match.group("percent")))
    return found


CLOSE_CALLS = {"approx", "isclose", "allclose", "assert_close", "assert_allclose"}


def _numbers(node: ast.AST, names: dict[str, ast.AST], seen: frozenset = frozenset()):
    """The numbers a comparison operand stands for: constants (with their sign), the items of
    tuples, lists, sets and dict values, the constants of arithmetic (``base + 0.3``), and
    module-level constants used by name; not the arguments of other calls (``round(x, 4)``)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float) \
            and not isinstance(node.value, bool):
        yield float(node.value)
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        yield from (-y for y in _numbers(node.operand, names, seen))
    elif isinstance(node, ast.Tuple | ast.List | ast.Set):
        for item in node.elts:
            yield from _numbers(item, names, seen)
    elif isinstance(node, ast.Dict):
        for item in node.values:
            yield from _numbers(item, names, seen)
    elif isinstance(node, ast.Name) and node.id in names and node.id not in seen:
        yield from _numbers(names[node.id], names, seen | {node.id})
    elif isinstance(node, ast.BinOp):  # x > base + 0.3, per_token == 4.5 * d_h
        yield from _numbers(node.left, names, seen)
        yield from _numbers(node.right, names, seen)
    elif isinstance(node, ast.Call) and _call_name(node) in CLOSE_CALLS:
        for arg in node.args:
            yield from _numbers(arg, names, seen)


def _call_name(node: ast.Call) -> str:
    func = node.func
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")


def _strings(node: ast.AST, names: dict[str, ast.AST]) -> set[str]:
    if isinstance(node, ast.Name) and node.id in names:
        node = names[node.id]
    return {sub.value for sub in ast.walk(node)
            if isinstance(sub, ast.Constant) and isinstance(sub.value, str)}


def _centre(node: ast.AST, names: dict[str, ast.AST]):
    """The c of ``abs(x - c)`` or ``abs(c - x)``: a tolerance around c asserts c."""
    if (isinstance(node, ast.Call) and _call_name(node) == "abs" and node.args
            and isinstance(node.args[0], ast.BinOp) and isinstance(node.args[0].op, ast.Sub)):
        yield from _numbers(node.args[0].left, names)
        yield from _numbers(node.args[0].right, names)


def asserted_constants(test: str) -> tuple[set[float], set[float], set[str]]:
    """What a test (``tests/file.py::name``) asserts: the numbers it checks for equality, the
    numbers it uses as bounds of a comparison, and the strings it compares; module-level
    constants it uses by name count as their values. Inputs, seeds, loop bounds and tolerances
    are none of these."""
    path, name = test.split("::")
    tree = ast.parse((ROOT / path).read_text())
    names = {target.id: statement.value for statement in tree.body
             if isinstance(statement, ast.Assign) for target in statement.targets
             if isinstance(target, ast.Name)}
    equal, bounds, strings = set(), set(), set()
    for node in tree.body:
        if not (isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == name):
            continue
        # only what an assert statement or an assert_* call checks: a comparison that is
        # computed and dropped (``ok = x == 0.6490``, an ``if``) asserts nothing
        checked = [n for stmt in ast.walk(node) if isinstance(stmt, ast.Assert)
                   for n in ast.walk(stmt.test)]
        checked += [n for call in ast.walk(node) if isinstance(call, ast.Call)
                    and _call_name(call).startswith("assert") for n in ast.walk(call)]
        for sub in checked:
            if isinstance(sub, ast.Compare):
                operands = [sub.left, *sub.comparators]
                ordering = any(isinstance(op, ast.Lt | ast.LtE | ast.Gt | ast.GtE)
                               for op in sub.ops)
                if not ordering and not all(isinstance(op, ast.Eq | ast.In) for op in sub.ops):
                    continue  # != and `is` assert no value
                for operand in operands:
                    values = set(_numbers(operand, names))
                    (bounds if ordering else equal).update(values)
                    if ordering:
                        equal.update(_centre(operand, names))
                    if any(isinstance(op, ast.Eq | ast.In) for op in sub.ops):
                        strings |= _strings(operand, names)
            elif isinstance(sub, ast.Call) and _call_name(sub) in CLOSE_CALLS:
                for arg in sub.args:
                    equal.update(_numbers(arg, names))
    return equal, bounds, strings


def _matches(kind: str, text: str, y: float) -> bool:
    value = float(text)
    if kind == "decimal":
        digits = len(text.split(".")[1].split("e")[0])
        if "e" in text:
            return y != 0 and f"{y:.{digits}e}" == text
        return f"{y:.{digits}f}" == text
    if kind == "percent":
        return abs(y) == value or (0 < abs(y) <= 1 and round(100 * abs(y)) == value)
    return y == value


def is_asserted(kind: str, text: str, equal: set[float], bounds: set[float],
                strings: set[str]) -> bool:
    """A decimal is asserted by a number that rounds to it, sign included, at the digits the
    row prints (or by a compared string holding it); a percentage by p or by a fraction that
    rounds to p/100; a count by the integer itself. A bound may also be asserted by a
    comparison with that number; a plain number only by an equality."""
    plain = kind.removeprefix("bound-")
    if any(text in s for s in strings):
        return True
    allowed = equal | bounds if kind.startswith("bound-") else equal
    return any(_matches(plain, text, y) for y in allowed)
