"""book/claims.md and the tests agree: every checked claim has tests marked with its id
(``@pytest.mark.claim("3.3")``), the row names exactly those tests, every marker names a row, and
every number a verdict quotes is asserted by a test marked with the row's id."""

import pytest

from claim_markers import (
    TEST_REF,
    asserted_constants,
    claim_rows,
    is_asserted,
    is_checked,
    marked_tests,
    quoted_numbers,
    verdict,
)

ROWS = claim_rows()
MARKED = marked_tests()


def test_claims_page_has_rows():
    assert len(ROWS) >= 10


@pytest.mark.parametrize("claim", sorted(ROWS))
def test_a_checked_claim_has_a_test_marked_with_its_id(claim):
    if is_checked(ROWS[claim]):
        assert MARKED.get(claim), (
            f"claim {claim} has a verdict but no test is marked @pytest.mark.claim({claim!r})")


@pytest.mark.parametrize("claim", sorted(ROWS))
def test_the_row_names_exactly_the_tests_marked_with_its_id(claim):
    named = {"::".join(m.groups()) for m in TEST_REF.finditer(ROWS[claim][-1])}
    assert named == MARKED.get(claim, set()), (
        f"claim {claim}: the row names {sorted(named)}, the markers say "
        f"{sorted(MARKED.get(claim, set()))}")


def test_every_marker_names_a_claim_row():
    unknown = sorted(set(MARKED) - set(ROWS))
    assert not unknown, f"tests are marked with claims that have no row: {unknown}"


# Numbers a verdict may quote without a test asserting them, each with the reason: the papers'
# own numbers (checked against the paper, not computable here), a sampling error's size, and
# results a chapter prints from an experiment too slow for a test (nbval compares the output).
# Percentages are keyed without their sign.
NOT_A_MEASUREMENT = {
    ("2.2", "0.01"): "the size of the sampling error, sqrt(p (1 - p) / 2000), not a result",
    ("4.7", "0.9"): "Vaswani et al.'s Table 3 (BLEU), checked against the paper",
    ("4.8", "0.9"): "Vaswani et al.'s Table 3 (BLEU), checked against the paper",
    ("5.1", "0.001"): "an input of the test (the content scale a), not a result",
    ("4.7", "25.4"): "Vaswani et al.'s Table 3 (BLEU), checked against the paper",
    ("4.7", "25.8"): "Vaswani et al.'s Table 3 (BLEU), checked against the paper",
    ("5.3", "0.3028"): "notebook 5 prints it on the digits (nbval compares it exactly); the "
                       "marked tests assert the bound the verdict rests on, > 0.1",
    ("5.3", "0.6862"): "notebook 5 prints it on the digits (nbval compares it exactly); the "
                       "marked tests assert the bound the verdict rests on, >= 0.5",
    ("7.3", "89"): "fine-tuning with gates: notebook 7 prints it (nbval compares it) and its "
                   "check cell asserts > 0.85, as the row says",
    ("7.1", "90"): "Voita et al.'s threshold for a positional head, part of the test's definition",
    ("7.2", "6"): "fine-tuning with gates: notebook 7's check cell prints it (6/16) and nbval "
                  "compares the output, as the row says",
    ("7.5", "20"): "Michel et al.'s translation model, checked against the paper",
    ("7.5", "40"): "Michel et al.'s BERT, checked against the paper",
    ("L.2", "36"): "the number of heads removed (half of 72), an input; the test asserts what "
                   "follows from it (the drop 0.0235 and an interval containing 0)",
    ("9.7", "5"): "Ainslie et al.'s uptraining budget, which the recipe copies (steps // 20)",
}


@pytest.mark.parametrize("claim", sorted(ROWS))
def test_every_number_a_verdict_quotes_is_asserted_by_a_test_marked_with_its_id(claim):
    """A verdict that quotes 0.6490 needs a test marked with its id that checks 0.6490 as an
    equality (``round(x, 4) == 0.6490``, approx, a compared string), not only a bound
    (``x > 0.3``); a number the verdict itself states as a bound may be a comparison's bound."""
    equal, bounds, strings = set(), set(), set()
    for test in MARKED.get(claim, ()):
        test_equal, test_bounds, test_strings = asserted_constants(test)
        equal |= test_equal
        bounds |= test_bounds
        strings |= test_strings
    missing = [text for kind, text in quoted_numbers(verdict(ROWS[claim]))
               if (claim, text.lstrip("-")) not in NOT_A_MEASUREMENT
               and not is_asserted(kind, text, equal, bounds, strings)]
    assert not missing, (f"claim {claim}: its verdict quotes {missing}, which no test marked "
                         f"@pytest.mark.claim({claim!r}) asserts")


def test_the_number_rule_finds_decimals_percentages_counts_and_bounds_but_not_row_ids():
    found = quoted_numbers("0.6490 of draws, 3 of 16 heads (19%), 17% go, see row 6.10, "
                           r"$\alpha = 0.2447$, 2.1e-06, 10^{-12}, $-0.2625$, 0.255-0.484, "
                           "38 of 72 heads, more than 0.2 of accuracy, 8nd^2")
    assert found == [("decimal", "0.6490"), ("count", "3"), ("percent", "17"),
                     ("decimal", "0.2447"), ("decimal", "2.1e-06"), ("decimal", "-0.2625"),
                     ("decimal", "0.255"), ("decimal", "0.484"), ("count", "38"),
                     ("bound-decimal", "0.2")]
    assert is_asserted("decimal", "0.6490", {0.649}, set(), set())
    assert not is_asserted("decimal", "0.6490", {0.3}, set(), set())
    assert not is_asserted("decimal", "0.6490", set(), {0.649}, set())  # x > 0.6490 is a bound
    assert is_asserted("bound-decimal", "0.2", set(), {0.2}, set())
    assert not is_asserted("decimal", "-0.2625", {0.2625}, set(), set())  # the sign counts
    assert is_asserted("decimal", "-0.2625", {-0.2625}, set(), set())
    assert is_asserted("percent", "50", {0.502}, set(), set())
    assert is_asserted("decimal", "2.1e-06", set(), set(), {"2.1e-06"})
    assert is_asserted("count", "38", {38.0}, set(), set())


def test_only_equalities_assert_a_plain_number(tmp_path, monkeypatch):
    """The checker reads what a test compares: a loop tuple, a seed, a tolerance or a bound is
    no equality; round(x, 4) == c, approx(c), abs(x - c) < tol and a signed constant are."""
    import claim_markers
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_fake.py").write_text(
        "EXPECTED = (0.5135, 12)\n"
        "def test_fake():\n"
        "    for n in (6, 12, 18):\n"
        "        torch.manual_seed(7)\n"
        "    assert x > 0.6490 and y == pytest.approx(0.2820, abs=0.001)\n"
        "    assert round(z, 4) == -0.2625 and abs(w - 0.0235) < 1e-4\n"
        "    assert (a, b) == EXPECTED and s == '0.255-0.484'\n")
    monkeypatch.setattr(claim_markers, "ROOT", tmp_path)
    equal, bounds, strings = asserted_constants("tests/test_fake.py::test_fake")
    assert equal == {0.2820, -0.2625, 0.0235, 0.5135, 12.0}
    assert bounds == {0.6490, 1e-4}
    assert strings == {"0.255-0.484"}


def test_exemptions_are_still_quoted():
    for claim, text in NOT_A_MEASUREMENT:
        assert text in [t for _, t in quoted_numbers(verdict(ROWS[claim]))], (claim, text)
