"""Prose quotes only numbers that its own notebook prints (or sets in code), or a listed citation.

A number in a chapter's markdown with three or more significant digits must equal, to the digits
it shows, a number in one of the notebook's code cells or outputs (``0.918`` matches a printed
``0.9183``). Anything else is a number from a paper or another source: it goes in ``CITED`` with
where it comes from, so a reader of this file can check it.
"""

import json
import re
from decimal import Decimal

import pytest

from conventions import NOTEBOOKS, cell_source

NUMBER = re.compile(r"(?<![\w.])(\d{1,3}(?:,\d{3})+|\d+)(\.\d+)?(?![\w])")

# notebook stem -> {number as the prose writes it: where it comes from}
CITED: dict[str, dict[str, str]] = {
    "01_attention_recap": {
        "768": "BERT-base's hidden size H (Devlin et al. 2019, section 3: L=12, H=768, A=12)",
    },
    "04_multi_head_attention": {
        **{n: "Vaswani et al. 2017, Table 3 rows (A): BLEU on newstest2013"
           for n in ["24.9", "25.4", "25.8"]},
    },
    "05_convolution": {
        "2020": "the year of Cordonnier et al.'s paper, in the theorem's title",
    },
    "07_head_pruning": {
        "0.917": "11/12, derived in the text (the best share a previous-symbol head can reach)",
        "2019": "the year of Michel et al.'s and Voita et al.'s papers",
    },
    "09_decoders": {
        **{n: "benchmarks/kv_cache.csv (one run of benchmarks/kv_cache.py, copied into the table)"
           for n in ["94.0", "55.3", "68.7", "22.5", "48.7", "5.37", "41.9", "10.29", "20.0",
                     "15.42", "3.05", "1.70"]},
        "2.25": "DeepSeek-V2 (arXiv:2405.04434), section 2.1: MLA's cache equals GQA's with 2.25 "
                "key/value heads (groups)",
    },
    "08_lab_pretrained_heads": {
        "144": "the number of pairs in mha.tasks.similarity_pairs (24 groups x 6), and BERT-base's "
               "12 x 12 heads (Devlin et al. 2019)",
        "1536": "all-MiniLM-L6-v2's config: intermediate_size (4 x 384)",
        "512": "all-MiniLM-L6-v2's config: max_position_embeddings",
        "128": "all-MiniLM-L6-v2's model card: trained with sequences of at most 128 word pieces",
        "256": "all-MiniLM-L6-v2's model card: inputs truncated at 256 word pieces by default",
        "2304": "6d with d = 384, derived in the solution of exercise 8.5",
        "16.8": "the fraction 0.1683 a cell prints, as a percentage",
        "17.5": "Michel et al. 2019, the efficiency table of their pruning section: up to 17.5% "
                "faster BERT inference with half of the heads pruned",
        **{n: "the parameter counts 22,565,376 and 20,792,448 a cell prints, in millions"
           for n in ["22.6", "20.8"]},
    },
}


def significant_digits(number: str) -> int:
    whole, _, fraction = number.replace(",", "").partition(".")
    if fraction:
        return len((whole + fraction).lstrip("0"))
    return len(whole.lstrip("0").rstrip("0"))


def numbers(text: str) -> set[str]:
    return {whole + (fraction or "") for whole, fraction in NUMBER.findall(text)}


def shows(printed: str, quoted: str) -> bool:
    """Does ``printed`` round to ``quoted`` at the digits ``quoted`` shows?"""
    printed, quoted = printed.replace(",", ""), quoted.replace(",", "")
    places = len(quoted.partition(".")[2])
    if len(printed.partition(".")[2]) < places:
        return False
    exponent = Decimal(1).scaleb(-places)
    return Decimal(printed).quantize(exponent) == Decimal(quoted)


def texts(nb: dict, measured: bool = True) -> tuple[str, str]:
    """The notebook's markdown, and its code and outputs (what a reader sees printed;
    ``measured=False``: not the outputs of machine-dependent cells, the machine's numbers)."""
    prose, printed = [], []
    for cell in nb["cells"]:
        if cell["cell_type"] == "markdown":
            prose.append(cell_source(cell))
        elif cell["cell_type"] == "code":
            printed.append(cell_source(cell))
            if not measured and "machine-dependent" in cell["metadata"].get("tags", []):
                continue
            for output in cell.get("outputs", []):
                for text in [output.get("text", ""),
                             output.get("data", {}).get("text/plain", "")]:
                    printed.append(text if isinstance(text, str) else "".join(text))
    return "\n".join(prose), "\n".join(printed)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_prose_quotes_only_printed_or_cited_numbers(path):
    prose, printed = texts(json.loads(path.read_text()))
    available = numbers(printed)
    cited = CITED.get(path.stem, {})
    unprinted = sorted(n for n in numbers(prose)
                       if significant_digits(n) >= 3 and n not in cited
                       and not any(shows(p, n) for p in available))
    assert not unprinted, (
        f"{path.name} quotes numbers none of its cells prints: {unprinted} (print them, or add "
        f"them to CITED with their source)")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_cited_number_is_quoted_and_not_printed(path):
    # a timing that happens to equal a cited number (128 ms beside a model card's 128 tokens:
    # maintainer 48) prints no citation
    prose, printed = texts(json.loads(path.read_text()), measured=False)
    cited = set(CITED.get(path.stem, {}))
    stale = sorted(cited - numbers(prose))
    assert not stale, f"CITED lists numbers {path.name} no longer quotes: {stale}"
    redundant = sorted(n for n in cited if any(shows(p, n) for p in numbers(printed)))
    assert not redundant, f"CITED lists numbers {path.name} prints itself: {redundant}"


def test_rounding_rule():
    assert shows("0.9183", "0.918") and shows("0.2447", "0.2447") and shows("116", "116")
    assert not shows("0.9183", "0.919") and not shows("0.92", "0.918")
    assert significant_digits("0.0900") == 3 and significant_digits("10000") == 1
    assert significant_digits("16,384") == 5


def test_a_timing_equal_to_a_cited_number_prints_no_citation():
    # maintainer 48: chapter 8's full model timed at 128 ms, the model card's 128 tokens
    nb = {"cells": [
        {"cell_type": "markdown", "metadata": {}, "source": "sequences of at most 128 tokens"},
        {"cell_type": "code", "metadata": {"tags": ["machine-dependent"]},
         "source": "time_model()", "outputs": [{"output_type": "stream", "text": "128 ms\n"}]}]}
    assert "128" in numbers(texts(nb)[1]) and "128" not in numbers(texts(nb, measured=False)[1])
