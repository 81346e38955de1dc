"""The by-hand pages' rendering of markdown and maths (mha_grade.rendering, mha_grade.rubric,
mha_grade.pdf): a student's text renders as the book would, and nothing in it can act."""

from __future__ import annotations

import html
import re
import shutil
import subprocess
import time
from html.parser import HTMLParser

import pytest
from exercise_notebooks import EXAMPLE, fmt

from mha_grade import by_hand, pdf, rendering, rubric

SECONDS = 30  # as tests/test_report.py: a few seconds here, a quadratic step takes minutes
HOSTILE = ("<script>alert(1)</script> <img src=x onerror=alert(1)> "
           "[click](javascript:alert(1)) <a href=\"javascript:alert(2)\">a</a> "
           "![pixel](https://evil.example/p.png) <https://evil.example/x> "
           "<iframe src=//evil></iframe> <style>body{}</style> $\\href{javascript:x}{y}$")
# every element the renderer makes: nothing a student types adds one
RENDERED = {"p", "span", "strong", "em", "code", "pre", "ul", "ol", "li", "blockquote", "hr",
            "br", "h1", "h2", "h3", "h4", "h5", "h6", "table", "thead", "tbody", "tr", "th",
            "td", "del", "s"}
CLASSES = {"math-inline", "math-display", "link", "url"}


class Parsed(HTMLParser):
    def __init__(self, text):
        super().__init__(convert_charrefs=True)
        self.tags, self.attributes, self.text = [], [], []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.attributes += [(tag, k, v) for k, v in attrs]

    def handle_data(self, data):
        self.text.append(data)


def test_a_students_markup_stays_text():
    """Scripts, event attributes, javascript: links, images and frames: no element but the
    renderer's, no attribute but a class, the address of a link or image shown as text."""
    found = Parsed(rendering.markdown_html(HOSTILE))
    assert set(found.tags) <= RENDERED, set(found.tags) - RENDERED
    for tag, name, value in found.attributes:
        assert name == "class" and value in CLASSES, (tag, name, value)
    text = "".join(found.text)
    assert "<script>alert(1)</script>" in text and "<img src=x onerror=alert(1)>" in text
    assert "https://evil.example/p.png" in text  # shown, not loaded


def test_maths_is_left_as_escaped_tex_for_mathjax():
    out = rendering.markdown_html("Since $a < b$,\n\n$$\n\\frac{e^{s_i}}{\\sum_j e^{s_j}}\n$$\n"
                                  "and `$x$` is code.")
    inline = re.findall(r'<span class="math-inline">(.*?)</span>', out)
    display = re.findall(r'<span class="math-display">(.*?)</span>', out, re.DOTALL)
    assert [html.unescape(t) for t in inline] == ["a < b"]
    assert [html.unescape(t).strip() for t in display] == ["\\frac{e^{s_i}}{\\sum_j e^{s_j}}"]
    assert "<code>$x$</code>" in out


def test_an_unclosed_comment_of_180_kb_renders_inert_in_seconds():
    text = "<!--" * (180_000 // 4)
    start = time.perf_counter()
    out = rendering.markdown_html(text)
    assert time.perf_counter() - start < SECONDS
    assert "<!--" not in out and out.count("&lt;!--") == 180_000 // 4
    # on a page: cut to the characters a cell shows, and still text
    page = by_hand.cells_html([by_hand.Cell("markdown", text)])
    assert "<!--" not in page and "more characters]" in page


@pytest.mark.parametrize("pattern", ["![", "[", "_a", "[a]("])
def test_an_answer_of_markdown_markdown_it_is_slow_on_renders_in_seconds(pattern):
    """markdown-it takes time quadratic in these (20,000 characters of "![": 8 s): an answer
    of as many such cells as a page shows renders only its first MAX_RENDERED characters."""
    cells = [by_hand.Cell("markdown", pattern * (by_hand.MAX_TEXT // len(pattern)))
             for _ in range(by_hand.MAX_ANSWER // by_hand.MAX_TEXT)]
    start = time.perf_counter()
    out = by_hand.cells_html(cells)
    assert time.perf_counter() - start < SECONDS
    assert out.count('<div class="md">') <= 1


def test_a_prompt_in_myst_renders_as_markdown_without_directives():
    nb = fmt.load(EXAMPLE)
    prompt = fmt.source(nb["cells"][fmt.parse(nb)[0].prompt])
    out = rendering.markdown_html(rendering.myst_markdown(prompt))
    assert out.startswith("<p><strong>Softmax ignores a shift</strong></p>")
    assert ":label:" not in out and "{exercise}" not in out and "```" not in out
    assert '<span class="math-inline">c</span>' in out


@pytest.mark.parametrize("myst, markdown", [
    ("see {ref}`the lemma <lemma-1>` and {cite:p}`vaswani2017`", "see the lemma and [vaswani2017]"),
    ("{math}`x^2` here", "$x^2$ here"),
    ("```{math}\na = b\n```", "$$\na = b\n$$"),
    ("```python\nx = {ref}`a`\n```", "```python\nx = {ref}`a`\n```"),
])
def test_myst_roles_and_blocks_become_markdown(myst, markdown):
    assert rendering.myst_markdown(myst) == markdown


def test_a_rubric_file_gives_items_in_order_and_names_bad_rows(tmp_path):
    path = tmp_path / "rubric.csv"
    path.write_text("exercise,item,points\n0.1,States the shift,1\n0.1,Cancels e^c,0.5\n"
                    "9.9,Unknown,1\n0.1,,1\n0.1,Bad points,lots\n")
    items, errors = rubric.read(path, {"0.1"})
    assert [(i.name, i.text, i.points) for i in items["0.1"]] == [
        ("R1", "States the shift", 1.0), ("R2", "Cancels e^c", 0.5)]
    assert len(errors) == 3 and "line 4" in errors[0] and "'9.9'" in errors[0]
    assert "line 5" in errors[1] and "line 6" in errors[2] and "'lots'" in errors[2]


BROWSER = pdf.chromium()


@pytest.mark.skipif(BROWSER is None, reason="needs Debian's chromium")
def test_mathjax_beside_a_page_typesets_its_maths_offline(tmp_path):
    """The page as chromium draws it (no network: a proxy that is not there): every formula
    became an SVG, none failed, and the student's \\href stayed inert."""
    assert rendering.write_mathjax(tmp_path)
    answer = by_hand.Answer("alice", "Alice", "alice.ipynb", [by_hand.Cell(
        "markdown", "So $\\frac{a}{b}$ and\n\n$$\\begin{aligned}x &= 1\\\\ y &= 2\\end{aligned}$$"
        "\n\n" + HOSTILE)])
    page = tmp_path / "0.1.html"
    page.write_text(by_hand.answers_page("0.1", "", [answer], [], maths=True))
    command = [BROWSER, "--headless", "--disable-gpu", f"--user-data-dir={tmp_path / 'p'}",
               "--proxy-server=127.0.0.1:9", "--virtual-time-budget=30000", "--dump-dom",
               page.as_uri()]
    if shutil.os.geteuid() == 0:
        command.insert(1, "--no-sandbox")
    dom = subprocess.run(command, capture_output=True, text=True, timeout=120).stdout
    assert 'data-typeset="done"' in dom
    spans = re.findall(r'<span class="math-(?:inline|display)[^"]*">(.*?)</span>', dom,
                       re.DOTALL)
    assert len(spans) == 3 and all(s.lstrip().startswith("<mjx-container") for s in spans)
    found = Parsed(dom)
    assert not [a for a in found.attributes if a[1] == "class" and "math-error" in a[2]]
    assert not [a for a in found.attributes if (a[2] or "").strip().startswith("javascript")]


def test_without_markdown_it_or_mathjax_a_page_shows_answers_as_typed_and_says_so(
        tmp_path, monkeypatch):
    """An environment without the book's packages (markdown-it-py, mdit-py-plugins,
    django-static-mathjax): the pages fall back to the text as typed, escaped, and the
    summary says why."""
    monkeypatch.setattr(rendering, "parser", lambda: None)
    monkeypatch.setattr(rendering, "mathjax_source", lambda: None)
    out = by_hand.cells_html([by_hand.Cell("markdown", HOSTILE)])
    assert out == f'<pre class="text">{by_hand.esc(HOSTILE)}</pre>'
    answer = by_hand.Answer("alice", "Alice", "alice.ipynb", [by_hand.Cell("markdown", "$x$")])
    notes = by_hand.write_pages(tmp_path, {"0.1": ("Prompt $y$", [answer], [], "")}, {},
                                {"0.1": 2.0})
    assert any("MathJax" in n for n in notes) and any("markdown-it-py" in n for n in notes)
    page = (tmp_path / "0.1.html").read_text()
    assert "<script" not in page and "script-src" not in page
    assert '<pre class="text">Prompt $y$</pre>' in page
    assert (tmp_path / "rubric.csv").read_text().splitlines()[1].endswith(",2")
