"""One name for one head: layers, heads, queries, keys and positions count from 0 everywhere
(book/notation.md), so MiniLM's previous-token head is "layer 0, head 2" in every chapter, the
explorer and the claims page, as it is ``weights[0, 2]`` in the code."""

import json
import re
from pathlib import Path

import pytest

from conventions import NOTEBOOKS, ROOT, cell_source

EXPLORER = ROOT / "book" / "attention_explorer.ipynb"
PAGES = sorted((ROOT / "book").glob("*.md"))

# a label made from an index plus one: f"head {h + 1}", f"Query {query + 1}", f"L{l + 1}"
ONE_BASED_LABEL = re.compile(
    r"(?:\b(?:layers?|heads?|query|queries|keys?|positions?|tokens?|rows?|columns?)\s*|\bL|\bH)"
    r"\{[^{}]*\+\s*1\s*(?:[:!][^{}]*)?\}", re.IGNORECASE)
# tick labels counted from 1: set_xticks(range(n), [str(j + 1) for j in range(n)])
ONE_BASED_TICKS = re.compile(r"(?:ticks|ticklabels).*str\(\s*\w+\s*\+\s*1\s*\)")
# a named head of MiniLM in prose: "layer 0, head 2", "head 2 of layer 0", "layer-0 head 2"
NAMED_HEAD = re.compile(r"\blayer[\s-](\d+),?\s+head\s+(\d+)"
                        r"|\bhead\s+(\d+)\s+(?:of|in)\s+layer\s+(\d+)", re.IGNORECASE)
MINILM = {"layers": 6, "heads": 12, "previous-token head": (0, 2)}


def code_of(path: Path) -> list[tuple[str, str]]:
    """(where, code) for every code cell of a notebook, or every module of the package."""
    if path.is_dir():
        return [(str(p.relative_to(ROOT)), p.read_text()) for p in sorted(path.rglob("*.py"))]
    cells = json.loads(path.read_text())["cells"]
    return [(f"{path.name} cell {i}", cell_source(cell)) for i, cell in enumerate(cells)
            if cell["cell_type"] == "code"]


def reader_texts(paths: list[Path]) -> list[tuple[str, str]]:
    """(where, text) a reader sees: markdown cells, printed outputs, figure captions and alt
    texts (both in the cell's metadata), pages."""
    out = []
    for path in paths:
        if path.suffix == ".md":
            out.append((path.name, path.read_text()))
            continue
        for i, cell in enumerate(json.loads(path.read_text())["cells"]):
            where = f"{path.name} cell {i}"
            if cell["cell_type"] == "markdown":
                out.append((where, cell_source(cell)))
            mystnb = cell.get("metadata", {}).get("mystnb", {})
            out.append((where, mystnb.get("figure", {}).get("caption", "")))
            out.append((where, mystnb.get("image", {}).get("alt", "")))
            for output in cell.get("outputs", []):
                text = output.get("text", "")
                out.append((where, text if isinstance(text, str) else "".join(text)))
    return out


def test_the_pattern_catches_one_based_labels_and_passes_zero_based_ones():
    assert ONE_BASED_LABEL.search('label=f"head {head + 1}: m = {slope:.3g}"')
    assert ONE_BASED_LABEL.search('f"layer {l + 1}, head {h + 1}"')
    assert ONE_BASED_LABEL.search('ax.set_title(f"Query {query + 1}")')
    assert ONE_BASED_LABEL.search('f"L{l+1}"')
    assert ONE_BASED_LABEL.search('f"head {p.argmax() + 1:2d} puts"')
    assert ONE_BASED_TICKS.search("ax.set_xticks(range(n), [str(j + 1) for j in range(n)])")
    for fine in ['f"head {h}"', 'f"layer {l}, head {h}"', 'f"random order {i + 1}"',
                 'f"{rank + 1} of 72"', "ax.set_xticks(range(n))", 'f"alpha_{i + 1}{j + 1}"']:
        assert not ONE_BASED_LABEL.search(fine) and not ONE_BASED_TICKS.search(fine), fine


@pytest.mark.parametrize("path", [*NOTEBOOKS, EXPLORER, ROOT / "src" / "mha"],
                         ids=lambda p: p.stem)
def test_no_label_or_tick_counts_from_1(path):
    found = [(where, m.group(0)) for where, code in code_of(path)
             for pattern in (ONE_BASED_LABEL, ONE_BASED_TICKS) for m in pattern.finditer(code)]
    assert not found, f"labels of a layer, head, query, key or position counted from 1: {found}"


def test_minilm_heads_have_one_name_everywhere():
    """Every head of MiniLM the chapters, the explorer and the claims page name exists under
    the 0-based name (layers 0-5, heads 0-11), and the previous-token head is layer 0, head 2
    wherever a sentence names it next to "previous"."""
    paths = [p for p in NOTEBOOKS if p.stem[:2] in {"01", "02", "03", "04", "08"}]
    named = 0
    for where, text in reader_texts([*paths, EXPLORER, ROOT / "book" / "claims.md"]):
        for sentence in re.split(r"(?<=[.;:])\s+", text):
            for m in NAMED_HEAD.finditer(sentence):
                layer, head = (int(m[1]), int(m[2])) if m[1] else (int(m[4]), int(m[3]))
                named += 1
                assert layer < MINILM["layers"] and head < MINILM["heads"], (where, m[0])
                if "previous" in sentence:
                    assert (layer, head) == MINILM["previous-token head"], (where, sentence)
    assert named >= 10  # the chapters do name heads: the test reads what it should


def test_the_notation_page_states_the_convention():
    page = (ROOT / "book" / "notation.md").read_text()
    assert "Counting starts at 0" in page and '"layer 0, head 2"' in page


# a formula that counts from 1: \sum_{i=1}^h, i = 1, \dots, h, x_1, \dots, x_n,
# head_1 \mid \cdots, p_1(i), \dots, (i-1) d_k
ONE_BASED_FORMULA = re.compile(
    r"\\(?:sum|prod)_\{\s*\w+\s*=\s*1\s*\}"
    r"|\b\w\s*=\s*1\s*,\s*\\dots\s*,\s*[A-Za-z]"
    r"|(?:\\mathbf\{\w\}|\\mathrm\{\w+\}|\b\w+)_\{?1\}?(?:\([^)]*\))?\s*,?\s*(?:\\dots|\\cdots|\\mid)"
    r"|\(\s*\w\s*-\s*1\s*\)\s*d_k")
# how a cell says that its subscripts count from 1 (book/notation.md asks it to)
SAYS_FROM_1 = re.compile(r"from 1\b|start at 1\b|numbered \$1\b")
# look-ups are ordinals (c^1, c^2, p_1(i), r = 1..L): the chapter says so once
LOOKUP_INDEX = re.compile(r"^(?:p_1\(i\)|r\s*=\s*1|\\sum_\{r=1\})")
LOOKUPS_FROM_1 = re.compile(r"[Ll]ook-ups (?:are ordinals[\s\S]{0,80}?)?count from 1")


def test_the_formula_pattern_catches_one_based_formulas():
    for bad in [r"\sum_{l=1}^{n} e^{s_{il}}", r"head $i = 1, \dots, h$", r"\sum_{i=1}^h",
                r"\mathrm{head}_1 \mid \cdots \mid \mathrm{head}_h", r"x_1, \dots, x_n",
                r"\xi_1\,\mathrm{head}_1, \dots", r"columns $(i-1)d_k+1$", r"\prod_{t=1}^{n}"]:
        assert ONE_BASED_FORMULA.search(bad), bad
    for fine in [r"\sum_{l=0}^{n-1} e^{s_{il}}", r"$i = 0, \dots, h-1$", r"x_0, \dots, x_{n-1}",
                 r"\mathrm{head}_0 \mid \cdots", r"for $i = 1, \dots, 15$", r"$x_1 = u$",
                 r"\alpha_{12} > \alpha_{22}", r"columns $i d_k, \dots, (i+1)d_k - 1$"]:
        assert not ONE_BASED_FORMULA.search(fine), fine


def test_formulas_count_from_0_unless_they_say_otherwise():
    """Every formula the reader sees (markdown, figure captions in the cell metadata, printed
    outputs, book pages) numbers heads, tokens and positions from 0; where a subscript starts at
    1 (a quoted source, chapter 5's pixels), the cell says so. The claims page is left out: its
    claims quote the sources in their own notation."""
    pages = [p for p in PAGES if p.name != "claims.md"]
    texts = reader_texts([*NOTEBOOKS, EXPLORER, *pages])
    lookups_said = {where.split(" cell ")[0] for where, text in texts
                    if LOOKUPS_FROM_1.search(text)}
    found, checked = [], 0
    for where, text in texts:
        for m in ONE_BASED_FORMULA.finditer(text):
            checked += 1
            if SAYS_FROM_1.search(text):
                continue
            if LOOKUP_INDEX.match(m[0]) and where.split(" cell ")[0] in lookups_said:
                continue
            found.append((where, m[0]))
    assert not found, f"formulas counting from 1 without saying so: {found}"
    assert checked >= 5  # the quoted and ordinal subscripts are there: the test reads them


def figure_texts(notebook: str, name: str) -> tuple[str, str]:
    """The caption and the alt text of a figure, both kept in its cell's metadata."""
    cells = json.loads((ROOT / "notebooks" / notebook).read_text())["cells"]
    figures = [c["metadata"]["mystnb"] for c in cells
               if c.get("metadata", {}).get("mystnb", {}).get("figure", {}).get("name") == name]
    assert len(figures) == 1, name
    return figures[0]["figure"]["caption"], figures[0]["image"]["alt"]


def numbers_after(word: str, text: str) -> set[int]:
    """The numbers a text gives to `word`: "keys 3 and 4", "query 0", "queries 0 and 2"."""
    found = set()
    for m in re.finditer(rf"\b{word}\s+(\d+)(?:\s*(?:,|and|to)\s*(\d+))?", text):
        found |= {int(g) for g in m.groups() if g is not None}
    return found


def test_chapter_1_captions_name_the_queries_and_keys_of_their_figures():
    """The captions and alt texts live in the cells' metadata, away from the code that draws the
    figures; they must name the same 0-based queries and keys. The hand example has 3 queries
    and keys: query 0 points at key 0, query 2 ties keys 0 and 1 (the scores q.k below, from
    chapter 1's Q and K). The masks figure shows the sequence of length 3 padded to 5: its
    padding keys are 3 and 4."""
    q = [[2, 0, 0, 0], [0, 0, 1, 1], [1, 1, 0, 0]]
    k = [[2, 0, 0, 0], [0, 2, 0, 0], [0, 0, 2, 2]]
    scores = [[sum(a * b for a, b in zip(qi, kj, strict=True)) for kj in k] for qi in q]
    one_hot = [i for i, row in enumerate(scores) if row.count(max(row)) == 1]
    tied = [i for i, row in enumerate(scores) if row.count(max(row)) == 2]
    assert (one_hot[0], tied) == (0, [2])
    text, alt = figure_texts("01_attention_recap.ipynb", "fig-01-temperature")
    assert numbers_after("queries", text) == {one_hot[0], tied[0]}
    assert numbers_after("[Qq]uery", alt) == {one_hot[0], tied[0]}, alt
    tied_keys = {j for j, s in enumerate(scores[tied[0]]) if s == max(scores[tied[0]])}
    assert f"which ties keys {min(tied_keys)} and {max(tied_keys)}" in text, text
    assert f"keys {min(tied_keys)} and {max(tied_keys)} fall together" in alt, alt
    for words in (text, alt):
        assert numbers_after("keys?", words) <= set(range(len(k))), words

    length, padded = 3, 5
    text, alt = figure_texts("01_attention_recap.ipynb", "fig-01-masks")
    assert numbers_after("keys", text) == set(range(length, padded)), text
    assert numbers_after("columns", alt) == set(range(length, padded)), alt
