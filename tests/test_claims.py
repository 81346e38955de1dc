"""book/claims.md and the tests agree: every checked claim has tests marked with its id
(``@pytest.mark.claim("3.3")``), its evidence names exactly those tests, every marker names a
claim, and every number a verdict (or its one-sentence reason) quotes is asserted by a test
marked with the claim's id. And the page reads at a glance: each claim's verdict is one of the
page's five and is the verdict its evidence argues, with a reason of one sentence."""

import json
import re

import pytest

from claim_markers import (
    TEST_REF,
    VERDICTS,
    asserted_constants,
    claim_rows,
    is_asserted,
    is_checked,
    marked_tests,
    quoted_numbers,
    verdict,
)
from conventions import NOTEBOOKS, ROOT

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
    named = {"::".join(m.groups()) for m in TEST_REF.finditer(ROWS[claim].tests)}
    assert named == MARKED.get(claim, set()), (
        f"claim {claim}: the row names {sorted(named)}, the markers say "
        f"{sorted(MARKED.get(claim, set()))}")


PARTS = {"", "attribution", "reproduction", "first half", "second half"}


@pytest.mark.parametrize("claim", sorted(ROWS))
def test_every_verdict_is_one_of_the_five(claim):
    for part, value in ROWS[claim].verdicts():
        assert part in PARTS and value in VERDICTS, (
            f"claim {claim}: verdict {ROWS[claim].label!r}; the page has {VERDICTS}, for a "
            f"whole claim or for each of {sorted(PARTS - {''})}")


# A verdict in a chapter's prose is bold, as in the table: "**true under a condition**" or
# "**Verdict: ambiguous.**" (a bold span starting with a verdict's first word, in lower case:
# "**True = may attend**" is the masks' convention, not a verdict).
PROSE_VERDICT = re.compile(
    r"\*\*((?:Verdict:\s+)?(?:true|false|ambiguous|not\s+checked)\b[^*]*)\*\*")


def prose_verdicts(text):
    """The verdict labels a chapter's markdown gives in bold, each as one line."""
    return [" ".join(m.group(1).split()).removeprefix("Verdict: ").rstrip(".")
            for m in PROSE_VERDICT.finditer(text)]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_a_chapters_verdicts_are_the_pages_five(path):
    """A chapter's bold verdict is one of the claims page's five, word for word (review 40: a
    chapter said "true under conditions", which the page does not have)."""
    cells = json.loads(path.read_text())["cells"]
    labels = [label for cell in cells if cell["cell_type"] == "markdown"
              for label in prose_verdicts("".join(cell["source"]))]
    odd = [label for label in labels if label not in VERDICTS]
    assert not odd, f"{path.name}: verdicts {odd} are not among the page's five {VERDICTS}"


def test_the_prose_verdict_reader_finds_labels_and_leaves_other_bold_text():
    assert prose_verdicts("is **true under a\n  condition**: the") == ["true under a condition"]
    assert prose_verdicts("**Verdict: not\nchecked**, since") == ["not checked"]
    assert prose_verdicts("**Verdict: ambiguous.** Read") == ["ambiguous"]
    assert prose_verdicts("is **true under conditions** (the") == ["true under conditions"]
    assert prose_verdicts("**True = may attend** and **Verdict** on it") == []


def verdict_at_start(text):
    """The page's verdict a text begins with, the longest that fits ("true under a condition"
    rather than "true"), or None."""
    text = text.lower()
    fits = [v for v in VERDICTS if re.match(re.escape(v) + r"(?![\w-])", text)]
    return max(fits, key=len, default=None)


def argued_verdict(evidence, part):
    """The verdict the evidence gives a part: the text after "Reproduction on the toy: ", or
    the start of the evidence for a claim with one verdict."""
    if not part:
        return verdict_at_start(evidence)
    found = re.search(re.escape(part) + r"\b[^:]{0,200}:\s*", evidence, re.IGNORECASE)
    return verdict_at_start(evidence[found.end():]) if found else None


@pytest.mark.parametrize("claim", sorted(ROWS))
def test_the_table_gives_the_verdict_the_evidence_argues(claim):
    row = ROWS[claim]
    for part, value in row.verdicts():
        assert argued_verdict(row.evidence["verdict"], part) == value, (
            f"claim {claim}: the table says {part or 'the verdict'} is {value!r}, the evidence "
            f"begins {row.evidence['verdict'][:80]!r}")


def test_the_verdict_reader_tells_the_five_apart():
    assert verdict_at_start("True under a condition: only if") == "true under a condition"
    assert verdict_at_start("true, but it does not follow") == "true"
    assert verdict_at_start("true within one row only") == "true"
    assert verdict_at_start("accurate (Voita et al.)") is None
    assert verdict_at_start("not checked: a claim about names") == "not checked"
    evidence = ("attribution: true (the paper). Reproduction on the toy decoder (87552 "
                "parameters, one model): false for the recipes tried")
    assert argued_verdict(evidence, "attribution") == "true"
    assert argued_verdict(evidence, "reproduction") == "false"
    assert argued_verdict(evidence, "second half") is None


ONE_SENTENCE_WORDS = 40


@pytest.mark.parametrize("claim", sorted(ROWS))
def test_the_reason_is_one_sentence_and_the_evidence_is_complete(claim):
    row = ROWS[claim]
    prose = re.sub(r"\$[^$]*\$|`[^`]*`|\bet al\.", "x", row.reason)  # maths, code, et al.
    assert prose.endswith(".") and not re.search(r"[.!?]\s+[A-Z]", prose[:-1]), (
        f"claim {claim}: the reason is not one sentence: {row.reason!r}")
    assert len(row.reason.split()) <= ONE_SENTENCE_WORDS, (
        f"claim {claim}: a reason of {len(row.reason.split())} words is not read at a glance")
    empty = [field for field in ("claim", "seed", "verdict", "where") if not row.evidence[field]]
    assert not empty, f"claim {claim}: its evidence has no {empty}"


def test_a_claim_without_its_evidence_is_refused(tmp_path, monkeypatch):
    import claim_markers

    page = (claim_markers.ROOT / "book" / "claims.md").read_text()
    (tmp_path / "book").mkdir()
    (tmp_path / "book" / "claims.md").write_text(page.replace("### Claim 2.2\n", "### Claim\n"))
    monkeypatch.setattr(claim_markers, "ROOT", tmp_path)
    with pytest.raises(ValueError, match="claim 2.2 has no evidence"):
        claim_markers.claim_rows()


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


# a link of the book: a role that links ({ref}, {numref}, {prf:ref}, {doc}) or a markdown link
LINK = re.compile(r"\{(?:ref|numref|prf:ref|doc)\}`([^`]*)`|\[[^\]]*\]\([^)]*\)")
# a place in the course named in plain words, which a reader cannot follow
PLAIN_PLACE = re.compile(r"\b(?:sections?|chapter|notebook|lemma|figure|fig\.)\s+\d", re.IGNORECASE)


@pytest.mark.parametrize("claim", sorted(ROWS))
def test_where_the_course_shows_it_is_a_link(claim):
    where = ROWS[claim].evidence["where"]
    assert LINK.search(where), (
        f"claim {claim}: 'Where the course shows it' links nowhere: {where!r}")
    plain = LINK.sub("", where)
    assert not PLAIN_PLACE.search(plain), (
        f"claim {claim}: 'Where the course shows it' names a place in plain text, not as a link "
        f"to its label: {plain!r}")


def section_numbers() -> dict[str, str]:
    """The label of each chapter section -> its number as the book numbers it ("4.3"): the
    chapter's number, then the count of its ``##`` headings up to the labelled one."""
    numbers = {}
    for path in NOTEBOOKS:
        chapter, counts, label = int(path.name[:2]), [0, 0], None
        for cell in json.loads(path.read_text())["cells"]:
            if cell["cell_type"] != "markdown":
                continue
            for line in "".join(cell["source"]).splitlines():
                if m := re.fullmatch(r"\(([\w-]+)\)=", line.strip()):
                    label = m.group(1)
                    continue
                if m := re.match(r"(#{2,3}) ", line):
                    depth = len(m.group(1)) - 2
                    counts[depth] += 1
                    if depth == 0:
                        counts[1] = 0
                    if label:
                        numbers[label] = ".".join(map(str, [chapter] + counts[:depth + 1]))
                if line.strip():
                    label = None
    return numbers


def test_a_link_that_gives_a_section_number_gives_the_books():
    numbers = section_numbers()
    text = (ROOT / "book" / "claims.md").read_text()
    for link_text, label in re.findall(r"\{ref\}`([^`<]*?)\s*<([\w-]+)>`", text):
        if label in numbers and (quoted := re.findall(r"\b\d+(?:\.\d+)+\b", link_text)):
            assert quoted == [numbers[label]], (
                f"book/claims.md links {label} as {link_text!r}: that is section "
                f"{numbers[label]}")


def test_a_link_to_a_section_says_which():
    """Student 44: about 45 links read just the section's title ("A shape cheat-sheet", "Summary"
    would be any chapter's): each names the section's number, which the test above keeps right."""
    numbers = section_numbers()
    text = (ROOT / "book" / "claims.md").read_text()
    bare = [label for label in re.findall(r"\{ref\}`([\w-]+)`", text) if label in numbers]
    assert not bare, f"book/claims.md links these sections by their title alone: {bare}"
    for link_text, label in re.findall(r"\{ref\}`([^`<]*?)\s*<([\w-]+)>`", text):
        if label in numbers:
            assert re.search(r"\b\d+\.\d+", link_text), (label, link_text)


def test_a_figure_is_linked_by_its_number():
    """{numref} shows "Fig. 7.2"; {ref} would make the whole caption the link's text."""
    text = (ROOT / "book" / "claims.md").read_text()
    assert not re.findall(r"\{ref\}`[^`]*\bfig-[\w-]+>?`", text)
    assert re.search(r"\{numref\}`fig-", text)
