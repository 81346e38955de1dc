"""Conventions of the chapter notebooks (see CONTRIBUTING.md)."""

import json
import re

import pytest

from conventions import NOTEBOOKS, ROOT, book_config, cell_source, setup_cell_source


def load(path):
    return json.loads(path.read_text())


def test_there_are_chapter_notebooks_and_all_are_in_the_toc():
    assert NOTEBOOKS, "no chapter notebooks found"
    toc = (ROOT / "_toc.yml").read_text()
    for path in NOTEBOOKS:
        assert f"notebooks/{path.stem}" in toc, f"{path.name} is not in _toc.yml"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_first_cell_is_the_identical_colab_setup_cell(path):
    first = load(path)["cells"][0]
    assert first["cell_type"] == "code"
    assert cell_source(first) == setup_cell_source()


def test_setup_cell_installs_from_the_repository_in_config():
    url = book_config()["repository"]["url"]
    assert url.startswith("https://github.com/")
    assert f"git+{url}@main" in setup_cell_source()


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_executed_once_top_to_bottom_without_errors(path):
    code = [c for c in load(path)["cells"] if c["cell_type"] == "code"]
    counts = [c["execution_count"] for c in code]
    assert counts == list(range(1, len(code) + 1)), "run the notebook with `make execute`"
    for i, cell in enumerate(code):
        for out in cell["outputs"]:
            assert out["output_type"] != "error", f"code cell {i} has an error output"
            assert out.get("name") != "stderr", f"code cell {i} writes to stderr"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_title_cell_and_seed(path):
    cells = load(path)["cells"]
    assert cells[1]["cell_type"] == "markdown" and cell_source(cells[1]).startswith("# ")
    code = "\n".join(cell_source(c) for c in cells if c["cell_type"] == "code")
    assert "torch.manual_seed(" in code


# a list marker at the start of a line is read as a list before inline maths is: an inline
# formula broken there is typeset as a bullet and text (instructor 48: "+ hd_v$" in 4.3)
LIST_MARKER = re.compile(r"\s*([-+*]|\d+[.)])\s")
INLINE_DOLLAR = re.compile(r"(?<![\\$])\$(?!\$)")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_no_inline_formula_is_broken_at_a_line_that_reads_as_a_list(path):
    broken = []
    for number, cell in enumerate(json.loads(path.read_text())["cells"]):
        if cell["cell_type"] != "markdown":
            continue
        opened = 0
        for line in "".join(cell["source"]).split("\n"):
            if opened % 2 and LIST_MARKER.match(line):
                broken.append(f"cell {number}: {line[:60]!r}")
            opened += len(INLINE_DOLLAR.findall(line))
    assert not broken, f"an inline formula continues on a line read as a list item: {broken}"
