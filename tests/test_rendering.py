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


def test_entities_for_invisible_characters_are_shown_as_codes():
    """&#x202E; (right to left), &#8203; (zero width) and &#x2066; as entities: markdown-it
    decodes them after ``visible`` ran on the text, so it runs on the rendered text too."""
    out = by_hand.cells_html([by_hand.Cell("markdown", "&#x202E;olleh &#8203;a&#x2066;b")])
    assert not {"\u202e", "\u200b", "\u2066"} & set(out)
    assert "\\u202e" in out and "\\u200b" in out and "\\u2066" in out


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


def test_an_answer_of_a_huge_table_renders_as_typed_in_seconds_and_a_table_as_a_table():
    """10,000 characters make a table of 1,000 columns by 3,000 rows (markdown-it pads every
    row: 57 s, a page of 30 MB): beyond MAX_TABLE_CELLS the answer is shown as typed; a table
    of 10 columns by 50 rows, in a quote, still renders."""
    huge = ("|" + "a|" * 1000 + "\n|" + "-|" * 1000 + "\n" + "|\n" * 3000)[:10_000]
    assert rendering.table_cells(huge) > rendering.MAX_TABLE_CELLS
    start = time.perf_counter()
    out = by_hand.cells_html([by_hand.Cell("markdown", huge)])
    assert time.perf_counter() - start < 5
    assert out == f'<pre class="text">{by_hand.esc(huge)}</pre>'
    table = "> |" + "h|" * 10 + "\n> |" + ":-:|" * 10 + "\n" + ("> |" + "x|" * 10 + "\n") * 50
    out = by_hand.cells_html([by_hand.Cell("markdown", table)])
    assert out.count("<td") == 500 and out.count("<th ") == 10
    assert rendering.table_cells(table) >= 510


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


def chromium_page(folder, answers, *flags, seconds=120):
    """What chromium makes of the by-hand page of ``answers`` (markdown, one per student),
    offline, with MathJax beside it: its stdout with ``flags`` (``--dump-dom``: the DOM)."""
    assert rendering.write_mathjax(folder)
    students = [by_hand.Answer(f"s{i}", f"Student {i}", "s.ipynb", [by_hand.Cell("markdown", a)])
                for i, a in enumerate(answers)]
    page = folder / "0.1.html"
    page.write_text(by_hand.answers_page("0.1", "", students, [], maths=True))
    command = [BROWSER, "--headless", "--disable-gpu", f"--user-data-dir={folder / 'p'}",
               "--proxy-server=127.0.0.1:9", "--virtual-time-budget=30000", *flags,
               page.as_uri()]
    if shutil.os.geteuid() == 0:
        command.insert(1, "--no-sandbox")
    return subprocess.run(command, capture_output=True, text=True, timeout=seconds).stdout


def typeset(dom):
    """Per student section, per formula: (its class, the MathML nodes and glyphs it drew)."""
    out = []
    for section in dom.split('<section class="student"')[1:]:
        said = section.split("<details>")[0]
        formulas = [f.split('"', 1) for f in re.split(r'<span class="math-(?:inline|display)',
                                                      said)[1:]]
        out.append([(kind, re.findall(r'data-(?:mml-node|c)="([^"]*)"', drawn))
                    for kind, drawn in formulas])
    return out


@pytest.mark.skipif(BROWSER is None, reason="needs Debian's chromium")
def test_mathjax_beside_a_page_typesets_its_maths_offline(tmp_path):
    """The page as chromium draws it (no network: a proxy that is not there): every formula
    became an SVG, none failed, and the student's \\href stayed inert."""
    dom = chromium_page(tmp_path, [
        "So $\\frac{a}{b}$ and\n\n$$\\begin{aligned}x &= 1\\\\ y &= 2\\end{aligned}$$\n\n"
        + HOSTILE], "--dump-dom")
    assert 'data-typeset="done"' in dom
    spans = re.findall(r'<span class="math-(?:inline|display)[^"]*">(.*?)</span>', dom,
                       re.DOTALL)
    assert len(spans) == 3 and all(s.lstrip().startswith("<mjx-container") for s in spans)
    found = Parsed(dom)
    assert not [a for a in found.attributes if a[1] == "class" and "math-error" in a[2]]
    assert not [a for a in found.attributes if (a[2] or "").strip().startswith("javascript")]


REDEFINES = ("$\\renewcommand{\\cdot}{\\text{XX}}$ $\\newcommand{\\exp}{\\text{A}}$ "
             "$\\def\\sqrt#1{\\text{NO}}$ $\\let\\oldfrac\\frac"
             "\\renewcommand{\\frac}[2]{\\oldfrac{#2}{#1}}$ $\\newcommand{\\R}{\\mathbb{R}}\\R$ "
             "$x\\label{eq}\\tag{9}$ $\\DeclareMathOperator{\\tr}{XX}$")


@pytest.mark.skipif(BROWSER is None, reason="needs Debian's chromium")
def test_a_students_macros_and_labels_do_not_reach_the_next_students_maths(tmp_path):
    """Student 0 redefines \\cdot, \\exp, \\sqrt, \\frac and labels an equation: student 1's
    maths draws as it does on a page of its own (and student 0's own macros still work)."""
    victim = "$\\exp(x)\\cdot\\frac{e^c}{1}\\sqrt{2}\\tr$ $y\\label{eq}\\tag{1}$ $\\R$"
    (tmp_path / "both").mkdir(), (tmp_path / "alone").mkdir()
    both = typeset(chromium_page(tmp_path / "both", [REDEFINES, victim], "--dump-dom"))
    alone = typeset(chromium_page(tmp_path / "alone", [victim], "--dump-dom"))
    assert both[1] == alone[0] and len(alone[0]) == 3
    assert "211D" in both[0][4][1]  # student 0's \R is the blackboard R, in its own answer


# 1,600 fractions per formula (MAX_NODES; before: chromium still typesetting after 150 s), and
# 1,000 expansions to nothing per formula (MAX_MACROS), each used 1,700 times (under 10,000
# characters: the answer's markdown is rendered)
HEAVY = {"nodes": "\\newcommand{\\q}{\\frac{a}{b}\\frac{a}{b}\\frac{a}{b}\\frac{a}{b}}"
                  "\\newcommand{\\h}{" + "\\q" * 400 + "}",
         "macros": "\\newcommand{\\z}{}\\newcommand{\\y}{" + "\\z" * 10 + "}"
                   "\\newcommand{\\x}{" + "\\y" * 10 + "}\\newcommand{\\h}{" + "\\x" * 9 + "}"}


@pytest.mark.skipif(BROWSER is None, reason="needs Debian's chromium")
@pytest.mark.parametrize("budget", sorted(HEAVY))
def test_heavy_maths_in_one_answer_costs_bounded_time_and_not_the_next_answer(tmp_path, budget):
    """A macro that makes much maths, used 1,700 times: the answer's maths stops at its
    budget (the rest shown as typed), in seconds, and the next student's maths is typeset as
    it is on a page of its own."""
    heavy = f"${HEAVY[budget]}$ " + " ".join(["$\\h$"] * 1700)
    victim = "$\\frac{e^c}{e^c}$"
    (tmp_path / "both").mkdir(), (tmp_path / "alone").mkdir()
    start = time.perf_counter()
    dom = chromium_page(tmp_path / "both", [heavy, victim], "--dump-dom", seconds=60)
    assert time.perf_counter() - start < SECONDS and 'data-typeset="done"' in dom
    first, second = typeset(dom)
    assert sum(kind == " math-skipped" for kind, _ in first) > 1600
    assert second == typeset(chromium_page(tmp_path / "alone", [victim], "--dump-dom"))[0]


@pytest.mark.skipif(BROWSER is None, reason="needs Debian's chromium")
def test_many_formulas_in_one_answer_cost_bounded_time_and_not_the_next_answer(tmp_path):
    """1,900 formulas of one CJK character each, a different one each time (chromium measures
    each glyph MathJax's fonts lack: 26 ms a formula, 66 s for an attack's answer, and the
    class's PDF failed): past ``MAX_FORMULAS`` the answer's maths is shown as typed, the page
    is typeset in seconds, and the next student's maths as on a page of its own."""
    many = " ".join(f"${chr(0x4E00 + i)}$" for i in range(1900))
    victim = "$\\frac{e^c}{e^c}$"
    (tmp_path / "both").mkdir(), (tmp_path / "alone").mkdir()
    start = time.perf_counter()
    dom = chromium_page(tmp_path / "both", [many, victim], "--dump-dom", seconds=60)
    assert time.perf_counter() - start < SECONDS and 'data-typeset="done"' in dom
    first, second = typeset(dom)
    kinds = [kind for kind, _ in first]
    assert kinds.count(" math-skipped") == 1900 - rendering.MAX_FORMULAS
    assert second == typeset(chromium_page(tmp_path / "alone", [victim], "--dump-dom"))[0]


def pdf_pages(path):
    return len(re.findall(rb"/Type\s*/Page[^s]", path.read_bytes()))


@pytest.mark.skipif(BROWSER is None, reason="needs Debian's chromium")
def test_no_answer_makes_the_page_too_long_to_print(tmp_path):
    """A rule of 10^6 em, a raise of 10^5 em, 25 code cells of 20,000 lines (the attack's
    inputs; before: 16 million px, chromium not done in 130 s, nobody's PDF written): each
    answer's box is cut at ``BOX_PX`` with a note, and the page prints in seconds."""
    assert rendering.write_mathjax(tmp_path)
    markdown = ["tall: $\\rule{1em}{1000000em}$", "$\\raise{100000em}{x}$ $\\lower{100000em}{x}$",
                "An honest answer $e^c$."]
    students = [by_hand.Answer(f"s{i}", f"Student {i}", "s.ipynb",
                               [by_hand.Cell("markdown", a)]) for i, a in enumerate(markdown)]
    students.append(by_hand.Answer("n", "Newlines", "n.ipynb",
                                   [by_hand.Cell("code", "\n" * 20_000)] * 25))
    page = tmp_path / "0.1.html"
    page.write_text(by_hand.answers_page("0.1", "", students, [], maths=True))
    assert page.read_text().count(by_hand.CUT) == len(students)
    start = time.perf_counter()
    assert pdf.print_pdf(page, tmp_path / "0.1.pdf", BROWSER, seconds=60) is None
    assert time.perf_counter() - start < SECONDS
    # a box of 3000 px is 3 or 4 printed pages: 4 answers fit in 20
    assert pdf_pages(tmp_path / "0.1.pdf") < 20


@pytest.mark.skipif(BROWSER is None, reason="needs Debian's chromium")
def test_an_answers_maths_makes_no_link_class_id_or_style(tmp_path):
    """\\mmlToken's attributes (before: real links to https:, file: and relative addresses,
    and a printed PDF carried them): the maths is drawn, with no address, class, id or style
    of the student's."""
    tokens = ["href=\"https://evil.example/t\"", "href=\"file:///etc/passwd\"",
              "href=\"../../x\"", "href=\"java\tscript:alert(1)\"",
              "style=\"position:fixed;top:0\"", "class=\"student\"", "id=\"a1\""]
    answer = " ".join(f"$\\mmlToken{{mi}}[{t}]{{X{i}}}$" for i, t in enumerate(tokens))
    dom = chromium_page(tmp_path, [answer + " $\\href{https://evil.example}{H}$"],
                        "--dump-dom")
    said = dom.split('<div class="said">')[1].split("<details>")[0]
    assert said.count("<mjx-container") == len(tokens) + 1
    found = Parsed(said)
    assert [a for a in found.attributes if "href" in a[1]
            and not (a[2] or "").lower().startswith("#mjx-")] == []
    assert not [a for a in found.attributes if a[1] == "id" and not a[2].lower().startswith("mjx-")]
    assert not [a for a in found.attributes if a[1] == "style" and "fixed" in a[2]]
    assert not [a for a in found.attributes if a[1] == "class" and "student" in a[2]]


@pytest.mark.skipif(BROWSER is None, reason="needs Debian's chromium")
def test_long_words_lines_and_formulas_wrap_or_scroll_and_are_not_cut(tmp_path):
    """A word of 1,200 letters and a code line of 1,200, in an answer: each wraps over lines
    of the answer's box (before: one line each, the rest clipped, with no scrollbar)."""
    import numpy as np
    from PIL import Image

    out = tmp_path / "shot.png"
    chromium_page(tmp_path, ["m" * 1200 + "\n\n```\n" + "y" * 1200 + "\n```"],
                  f"--screenshot={out}", "--window-size=1000,2000", "--hide-scrollbars")
    dark = (np.asarray(Image.open(out).convert("L")) < 100).any(axis=1)
    lines = int((dark[1:] & ~dark[:-1]).sum())  # bands of text, top to bottom
    assert lines >= 30, lines  # before: 9 (the headings, the notes, a line of each)


@pytest.mark.skipif(BROWSER is None, reason="needs Debian's chromium")
def test_a_heading_in_an_answer_does_not_pass_for_the_next_students(tmp_path):
    """An answer ending in "## Student 1" and a line like the page's own (the attack's fake
    block): its heading is drawn well below the size of the page's heading of a student, the
    same words (before: the same size)."""
    import numpy as np
    from PIL import Image

    out = tmp_path / "shot.png"
    chromium_page(tmp_path, ["It ends here.\n\n---\n\n## Student 1\n\nExercise 0.1"],
                  f"--screenshot={out}", "--window-size=1000,1000", "--hide-scrollbars")
    dark = (np.asarray(Image.open(out).convert("L"))[:, :700] < 100).any(axis=1)
    starts = np.flatnonzero(dark[1:] & ~dark[:-1]) + 1
    ends = np.flatnonzero(~dark[1:] & dark[:-1]) + 1
    bands = [int(e - s) for s, e in zip(starts, ends, strict=True)]  # lines' heights, in order
    # the title, 2 lines of notes, "Student 0", its note, a rule, "It ends here.", "Student 1"
    real, fake = bands[3], bands[7]
    assert fake < 0.8 * real, bands  # before: 18 and 18 px; now 12 (the text's) and 18


@pytest.mark.skipif(BROWSER is None, reason="needs Debian's chromium")
def test_maths_draws_nothing_outside_its_answers_box(tmp_path):
    """Student 1 raises a red rule of 60em by 5em 20em above its line (onto student 0's
    heading) beside a red square of 1em in place: only the square is drawn."""
    import numpy as np
    from PIL import Image

    out = tmp_path / "shot.png"
    chromium_page(tmp_path, ["An honest answer $e^c$.",
                             "ok $\\smash{\\rlap{\\raise{20em}{\\color{red}{\\rule{60em}{5em}}}}}"
                             "\\color{red}{\\rule{1em}{1em}}$"],
                  f"--screenshot={out}", "--window-size=1000,1400", "--hide-scrollbars")
    r, g, b = np.asarray(Image.open(out).convert("RGB")).astype(int).transpose(2, 0, 1)
    red = int(((r > 200) & (g < 80) & (b < 80)).sum())
    assert 100 < red < 1000, red  # the square (16 by 16 px), not the rule (60em: 960 px wide)


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
