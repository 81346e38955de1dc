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
    """(where, text) a reader sees: markdown cells, printed outputs, figure captions, pages."""
    out = []
    for path in paths:
        if path.suffix == ".md":
            out.append((path.name, path.read_text()))
            continue
        for i, cell in enumerate(json.loads(path.read_text())["cells"]):
            where = f"{path.name} cell {i}"
            if cell["cell_type"] == "markdown":
                out.append((where, cell_source(cell)))
            figure = cell.get("metadata", {}).get("mystnb", {}).get("figure", {})
            out.append((where, figure.get("caption", "")))
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
