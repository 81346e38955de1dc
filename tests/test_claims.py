"""book/claims.md and the tests agree: every checked claim has tests marked with its id
(``@pytest.mark.claim("3.3")``), the row names exactly those tests, and every marker names a row."""

import pytest

from claim_markers import TEST_REF, claim_rows, is_checked, marked_tests

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
