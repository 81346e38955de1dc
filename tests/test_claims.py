"""book/claims.md: every test a row names must exist."""

import re

from conventions import ROOT

TEST_REF = re.compile(r"`?(tests/[\w/]+\.py)::(\w+)`?")


def claim_rows():
    for line in (ROOT / "book" / "claims.md").read_text().splitlines():
        if re.match(r"^\|\s*(\d+|L)\.\d+\s*\|", line):  # chapter rows N.K, lab rows L.K
            yield line


def test_claims_page_has_rows():
    assert len(list(claim_rows())) >= 10


def test_every_named_test_exists():
    named = [m.groups() for row in claim_rows() for m in TEST_REF.finditer(row)]
    for path, name in named:
        source = (ROOT / path).read_text() if (ROOT / path).exists() else ""
        assert re.search(rf"^(async )?def {name}\(", source, re.MULTILINE), (
            f"claims.md names {path}::{name}, which does not exist"
        )


def test_every_checked_claim_names_a_test():
    for row in claim_rows():
        verdict = row.split("|")[4].strip().lower()
        if verdict not in {"not yet checked", "not checked"}:
            assert TEST_REF.search(row), f"a claim with a verdict names no test: {row[:80]}"
