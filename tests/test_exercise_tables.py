"""Every exercise check has its rows in the tables that test all checks the same way.

The checks are found by walking ``mha.checks``, not from a hand-kept list. Each table is found by
the name it is assigned at the top level of a file under tests/, so a renamed file takes its table
along. A missing row fails the check's own test (parametrized by the check, so the chapter loop
``make chapter CHAPTER=NN`` runs it), naming the check, the table, its file and the section of
CONTRIBUTING.md that says what the row holds; a row for a check that no longer exists fails too.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
import sys
import textwrap
from pathlib import Path

import pytest

import mha.checks

TESTS = Path(__file__).parent
SECTION = "CONTRIBUTING.md, 'Adding an exercise'"


def package_checks() -> list:
    """Every check defined in a module of ``mha.checks`` (made with ``exercise_check``)."""
    found = []
    for info in pkgutil.iter_modules(mha.checks.__path__):
        module = importlib.import_module(f"mha.checks.{info.name}")
        found += [v for v in vars(module).values() if callable(v) and hasattr(v, "checker")
                  and v.__module__ == module.__name__]  # not one imported from another module
    return sorted(found, key=lambda c: (c.__module__, c.exercise, c.__name__))


def table_file(name: str) -> Path:
    """The one file under tests/ that assigns ``name`` at its top level."""
    assignment = re.compile(rf"^{name}\s*(:[^=]*)?=", re.MULTILINE)
    files = [p for p in sorted(TESTS.glob("*.py")) if assignment.search(p.read_text())]
    if len(files) != 1:
        raise LookupError(f"{name} should be assigned in exactly one file of tests/, "
                          f"found {[p.name for p in files]}")
    return files[0]


def table_module(name: str):
    """The test module that holds the table ``name`` (its other tables beside it)."""
    return importlib.import_module(table_file(name).stem)


def place(name: str) -> str:
    return f"{name} of tests/{table_file(name).name}"


def key(check) -> tuple[str, str]:
    """How the tables name a check: ("ch06", "rope_complex"), its module and its name."""
    return check.__module__.rsplit(".", 1)[-1], check.__name__


def named(check) -> str:
    return f"Exercise {check.exercise} ({check.__module__}.{check.__name__})"


def parts_of(check) -> list:
    return list(getattr(check.checker, "parts", None) or ())


CHECKS = package_checks()
# each table by a name only its file assigns (ATTACKS and CASES are not unique)
TABLES = ("VARIANTS", "WRONG_FOR_PART", "HONEST_FOR_INTS", "BAD_VALUES")
WITH_PARTS = [c for c in CHECKS if parts_of(c)]
CHAPTER_3 = [c for c in CHECKS if key(c)[0] == "ch03"]


def ids(check) -> str:
    return f"{check.exercise}-{check.__name__}"


def test_the_walk_finds_the_courses_checks():
    exercises = {c.exercise for c in CHECKS}
    assert len(CHECKS) >= 25 and {"0.2", "3.1", "6.2", "9.5"} <= exercises
    assert len(WITH_PARTS) >= 10 and CHAPTER_3


# --- a row for every check

@pytest.mark.parametrize("check", CHECKS, ids=ids)
def test_a_check_has_two_or_more_variants(check):
    variants = table_module("VARIANTS").VARIANTS.get(key(check), [])
    assert len(variants) >= 2, (
        f"{named(check)} has {len(variants)} correct answers written differently in "
        f"{place('VARIANTS')}, row {key(check)}; it needs two or more ({SECTION})")


@pytest.mark.parametrize("check", WITH_PARTS, ids=ids)
def test_each_part_of_a_check_has_a_wrong_answer(check):
    table = table_module("WRONG_FOR_PART").WRONG_FOR_PART
    missing = [p.name for p in parts_of(check) if (*key(check), p.name) not in table]
    assert not missing, (
        f"{named(check)}: the parts {missing} have no wrong answer that fails them in "
        f"{place('WRONG_FOR_PART')}, rows {key(check)} + (part,) ({SECTION})")


@pytest.mark.parametrize("check", CHECKS, ids=ids)
def test_a_check_has_an_attack_or_an_honest_answer_for_integers(check):
    attacks = table_module("HONEST_FOR_INTS")
    attacked = {c for c, _ in attacks.CASES}
    assert check in attacked or check in attacks.HONEST_FOR_INTS, (
        f"{named(check)} has no row in the attack table of "
        f"tests/{table_file('HONEST_FOR_INTS').name}: "
        f"an answer in ATTACKS that mutates its inputs and its row in CASES, or, if the answer "
        f"receives only numbers, an honest answer in HONEST_FOR_INTS ({SECTION})")


@pytest.mark.parametrize("check", CHECKS, ids=ids)
def test_a_check_meets_the_bad_values(check):
    graded = table_module("BAD_VALUES").CHECKS
    assert check in graded, (
        f"{named(check)} is not among the checks that {place('BAD_VALUES')} is given "
        f"(CHECKS there must be found by walking mha.checks, and a check must be worth points) "
        f"({SECTION})")


def instructors_parts_table() -> dict[str, tuple[list[float], list[float]]]:
    """book/instructors.md's table of hidden parts: exercise -> (the visible parts' points,
    the hidden parts' points), each part's points the number in parentheses that ends it."""
    text = (TESTS.parent / "book" / "instructors.md").read_text()
    section = text.split("### Hidden cases and partial credit", 1)[1].split("\n### ", 1)[0]
    rows = {}
    for exercise, visible, hidden in re.findall(
            r"^\| (\d+\.\d+) \| (.*?) \| (.*?) \|$", section, re.MULTILINE):
        def points(cell: str) -> list[float]:
            return [] if cell == "none" else [float(p) for p in re.findall(
                r"\(([\d.]+)\)(?:;|$)", cell)]
        rows[exercise] = (points(visible), points(hidden))
    return rows


INSTRUCTORS_TABLE = "book/instructors.md, 'Hidden cases and partial credit'"


@pytest.mark.parametrize("check", WITH_PARTS, ids=ids)
def test_the_instructors_page_lists_a_checks_parts_and_their_points(check):
    """Maintainer 47: a hidden part added to 5.2 passed every test while the instructors'
    table still said 5.2 had none."""
    row = instructors_parts_table().get(check.exercise)
    parts = parts_of(check)
    wanted = ([p.points for p in parts if not p.hidden], [p.points for p in parts if p.hidden])
    assert row == wanted, (
        f"{named(check)} has parts worth {wanted[0]} shown and {wanted[1]} hidden; the "
        f"table in {INSTRUCTORS_TABLE} says {row} (a row '| {check.exercise} | <visible parts, "
        f"each with its points in parentheses> | <hidden parts, or none> |')")


def test_the_instructors_page_lists_no_check_without_parts():
    stale = set(instructors_parts_table()) - {c.exercise for c in WITH_PARTS}
    assert not stale, f"{INSTRUCTORS_TABLE} has rows for checks without parts: {sorted(stale)}"


@pytest.mark.parametrize("check", CHAPTER_3, ids=ids)
def test_a_chapter_3_check_is_worth_1_point(check):
    # test_the_instructors_chapter_3_without_any_tag_gets_full_marks grades the notebook on this
    assert check.max_points == 1, (
        f"{named(check)} is worth {check.max_points} points, its hidden parts included; every "
        f"check of chapter 3 is worth exactly 1 ({SECTION})")


# --- no row for a check that is gone

def stale_rows() -> dict[str, list]:
    """Per table, the rows that name no check of ``mha.checks``."""
    checks = set(CHECKS)
    keys = {key(c) for c in checks}
    parts = {(*key(c), p.name) for c in checks for p in parts_of(c)}
    attacks = table_module("HONEST_FOR_INTS")
    return {
        place("VARIANTS"): sorted(set(table_module("VARIANTS").VARIANTS) - keys),
        place("WRONG_FOR_PART"): sorted(set(table_module("WRONG_FOR_PART").WRONG_FOR_PART)
                                        - parts),
        f"CASES of tests/{table_file('HONEST_FOR_INTS').name}": sorted(
            key(c) for c, _ in attacks.CASES if c not in checks),
        place("HONEST_FOR_INTS"): sorted(key(c) for c in attacks.HONEST_FOR_INTS
                                                       if c not in checks),
    }


def test_no_row_names_a_check_that_no_longer_exists():
    stale = {table: rows for table, rows in stale_rows().items() if rows}
    assert not stale, f"rows for no check of mha.checks (remove them; {SECTION}): {stale}"


# --- the tests above fail, and say why, when a row is missing

FAKE = textwrap.dedent('''
    from mha.exercises import exercise_check

    @exercise_check("99.1", points=1, reference_names=("mha.checks.ch99",))
    def new_check(answer):
        pass

    @new_check.part("a hidden case", points=0.5, hidden=True)
    def _hidden(answer):
        pass
''')


@pytest.fixture
def new_check(tmp_path, monkeypatch):
    """A check in a new module ``mha.checks.ch99``, found by the walk, in no table."""
    for table in TABLES:  # imported before it exists, as they are when a row is missing
        table_module(table)
    (tmp_path / "ch99.py").write_text(FAKE)
    monkeypatch.setattr(mha.checks, "__path__", [*mha.checks.__path__, str(tmp_path)])
    try:
        yield next(c for c in package_checks() if c.exercise == "99.1")
    finally:
        sys.modules.pop("mha.checks.ch99", None)


@pytest.mark.parametrize("test,table", [
    (test_a_check_has_two_or_more_variants, "VARIANTS"),
    (test_each_part_of_a_check_has_a_wrong_answer, "WRONG_FOR_PART"),
    (test_a_check_has_an_attack_or_an_honest_answer_for_integers, "HONEST_FOR_INTS"),
    (test_a_check_meets_the_bad_values, "BAD_VALUES"),
])
def test_a_new_check_without_its_row_fails_naming_the_check_the_file_and_the_section(
        new_check, test, table):
    with pytest.raises(AssertionError) as failure:
        test(new_check)
    message = str(failure.value)
    assert "Exercise 99.1 (mha.checks.ch99.new_check)" in message
    assert f"tests/{table_file(table).name}" in message and SECTION in message


def test_a_check_whose_hidden_part_adds_points_fails_the_chapter_3_rule(new_check):
    with pytest.raises(AssertionError, match=r"99\.1.* is worth 1\.5 points") as failure:
        test_a_chapter_3_check_is_worth_1_point(new_check)
    assert SECTION in str(failure.value)


def test_a_removed_check_leaves_rows_that_fail_naming_them(monkeypatch):
    import mha.checks.ch06 as ch06

    for table in TABLES:  # imported while it exists, as they are when a row is left behind
        table_module(table)
    monkeypatch.delattr(ch06, "merge_partials")  # the walk no longer finds 6.3
    monkeypatch.setattr(sys.modules[__name__], "CHECKS", package_checks())
    with pytest.raises(AssertionError) as failure:
        test_no_row_names_a_check_that_no_longer_exists()
    message = str(failure.value)
    for table in ("VARIANTS", "WRONG_FOR_PART", "HONEST_FOR_INTS"):
        assert f"tests/{table_file(table).name}" in message
    assert "('ch06', 'merge_partials')" in message  # VARIANTS and CASES
    assert "('ch06', 'merge_partials', " in message and SECTION in message  # its parts
