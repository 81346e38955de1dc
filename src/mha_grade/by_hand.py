"""By-hand exercises: every student's answer on one page per exercise, and points to fill in.

The student edition marks an exercise by its prompt, a markdown cell holding ``:label: ex-NN-K``
(in an HTML comment Jupyter does not show); a student answers in the cells below it: the answer
cell ("Your answer to Exercise N.K", tagged ``answer``), the experiment's code cell (``# YOUR
CODE HERE``), and any cell they add. The answer is those cells, up to the next exercise's prompt
or the next cell of the chapter's own text (found by its cell id, or, in a notebook saved
without ids, by its words), check cells left out.

Everything in a submission is hostile: the pages render its markdown and maths with
``rendering`` (raw HTML off, links and images as text, maths typeset by the MathJax copied next to
the pages), show each cell as typed too and its code and outputs as escaped text (images only as
validated PNG data), under a Content-Security-Policy that allows no request, no form and no
script but MathJax's files beside the page. The points file is a CSV with every field made safe
for a spreadsheet; reading it back, every entry is checked and every bad one named.
"""

from __future__ import annotations

import base64
import binascii
import csv
import functools
import html
import json
import os
import re
import unicodedata
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from mha_grade import rendering, rubric
from mha_grade._shared import (
    LABEL,
    cell,
    create,
    display,
    parse,
    read_regular,
    source,
    student_edition,
    uncell,
)
from mha_grade.gradebook import (
    Gradebook,
    Notebook,
    Student,
    exercise_key,
    fmt_points,
    number,
    read_csv,
)
from mha_grade.student_edition import asks_for_prose

MAX_NOTEBOOK_BYTES = 20 * 2**20  # as the grader (submissions.py)
MAX_CELLS = 2000  # as the grader: a notebook with more is not graded
MAX_TEXT = 20_000  # characters of one cell's source or outputs shown
MAX_PNG = 2 * 2**20
MAX_ANSWER = 500_000  # characters (and image bytes) of one answer shown on a page
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
# pixels of one image, and of all an answer's images: a PNG's size says nothing of its pixels
# (20000 by 20000 of one colour is 1.5 MB, and a browser decodes it into 1.6 GB)
MAX_PIXELS = 25_000_000
ANSWER_STUB = re.compile(r"^\*\*Your answer to Exercise [\d.]+\.\*\* Replace this line with your "
                         r"answer\.$")
CODE_STUBS = {"", "# YOUR CODE HERE", "# YOUR CODE HERE\nraise NotImplementedError()"}
# rubric: the items given (R1 R3, from rubric.csv); with points left blank, their sum counts
POINTS_HEADER = ["student", "name", "exercise", "max_points", "points", "comment", "rubric"]
RUBRIC_ENTRY = re.compile(r"[Rr]\d+(?:[\s,;]+[Rr]\d+)*")


# ---------------------------------------------------------------------------------------------
# Reading a submission (never run: JSON only, shape checked)

@dataclass
class Cell:
    kind: str  # "markdown", "code", "raw"
    source: str
    tags: list[str] = field(default_factory=list)
    id: str = ""
    text: list[str] = field(default_factory=list)  # text outputs
    images: list[bytes] = field(default_factory=list)  # PNG outputs, validated
    handed_out: bool = False  # as the student edition has it (a stub)

    @functools.cached_property
    def bag(self) -> tuple[int, Counter]:
        """How many words the cell has, and how often each (``words``): read once."""
        found = words(self.source)
        return len(found), Counter(found)

    @property
    def blank(self) -> bool:
        text = self.source.strip()
        return self.handed_out or text in CODE_STUBS or bool(ANSWER_STUB.match(text))


def _text(value) -> str | None:
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        value = "".join(value)
    return value if isinstance(value, str) else None


def read_cells(path: Path) -> list[Cell]:
    """The cells of a submitted notebook; ``ValueError`` when it is none."""
    try:
        nb = json.loads(read_regular(path, MAX_NOTEBOOK_BYTES).decode("utf-8"))
    except (UnicodeDecodeError, RecursionError, json.JSONDecodeError):
        raise ValueError("not a notebook (not JSON)") from None
    if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list):
        raise ValueError("not a notebook (no list of cells)")
    if len(nb["cells"]) > MAX_CELLS:
        raise ValueError(f"more than {MAX_CELLS} cells (not graded)")
    cells = []
    for raw in nb["cells"]:
        if not isinstance(raw, dict) or raw.get("cell_type") not in ("markdown", "code", "raw"):
            continue
        text = _text(raw.get("source", ""))
        if text is None:
            continue
        metadata = raw.get("metadata") if isinstance(raw.get("metadata"), dict) else {}
        tags = metadata.get("tags")
        tags = [t for t in tags if isinstance(t, str)] if isinstance(tags, list) else []
        ident = raw.get("id") if isinstance(raw.get("id"), str) else ""
        item = Cell(raw["cell_type"], text, tags, ident)
        outputs = raw.get("outputs") if isinstance(raw.get("outputs"), list) else []
        for output in outputs:
            if not isinstance(output, dict):
                continue
            if output.get("output_type") == "stream":
                found = _text(output.get("text"))
                if found:
                    item.text.append(found)
            elif output.get("output_type") == "error":
                item.text.append(f"{output.get('ename', '')}: {output.get('evalue', '')}"
                                 if isinstance(output.get("ename"), str)
                                 and isinstance(output.get("evalue"), str) else "an error")
            elif isinstance(output.get("data"), dict):
                png = output["data"].get("image/png")
                if isinstance(png, str) and len(png) <= 2 * MAX_PNG:
                    try:
                        data = base64.b64decode("".join(png.split()), validate=True)
                    except (binascii.Error, ValueError):
                        data = b""
                    if data.startswith(PNG_MAGIC) and len(data) <= MAX_PNG:
                        pixels = png_pixels(data)
                        if pixels is not None and pixels <= MAX_PIXELS:
                            item.images.append(data)
                        else:
                            item.text.append("[an image not shown: " + (
                                f"{pixels:,} pixels, above {MAX_PIXELS:,}" if pixels
                                else "no PNG header") + "; open the notebook]")
                        continue
                found = _text(output["data"].get("text/plain"))
                if found:
                    item.text.append(found)
        cells.append(item)
    return cells


def png_pixels(data: bytes) -> int | None:
    """Width times height from a PNG's header (its first chunk, IHDR); None when it has none."""
    if len(data) < 24 or data[12:16] != b"IHDR":
        return None
    return int.from_bytes(data[16:20], "big") * int.from_bytes(data[20:24], "big")


def submission_files(folder: Path) -> dict[str, Path]:
    """Every notebook under ``folder`` by the name the grader gives it (``display`` of its path
    relative to ``folder``); symbolic links, hidden entries and special files are left alone."""
    found: dict[str, Path] = {}
    stack = [folder]
    while stack:
        current = stack.pop()
        try:
            entries = list(os.scandir(current))
        except OSError:
            continue
        for entry in entries:
            if entry.name.startswith(".") or entry.is_symlink():
                continue
            if entry.is_dir(follow_symlinks=False):
                stack.append(Path(entry.path))
            elif entry.is_file(follow_symlinks=False) and entry.name.endswith(".ipynb"):
                found[display(Path(entry.path).relative_to(folder).as_posix())] = Path(entry.path)
    return found


# ---------------------------------------------------------------------------------------------
# The instructor's notebook: prompts, and which cells are the chapter's own text

SIMILAR = 0.8  # a markdown cell is the chapter's when 80% of its words are one known cell's


@dataclass
class Known:
    """Cells of the instructor's notebook, to recognise in a submission: by cell id, or, in a
    notebook saved without ids, code by its source and markdown by its words (the student
    edition rewrites the book's MyST, so equality cannot be asked of markdown).

    Markdown is compared as bags of words (Dice's coefficient of the two multisets, which is
    difflib's ``quick_ratio``): linear in the cell, where difflib's ``ratio`` is quadratic in
    it and a submission chooses its cells. Only known cells of a length that can reach
    ``SIMILAR`` are compared, so a cell much longer than any of the chapter's costs one pass."""

    ids: set[str] = field(default_factory=set)
    code: set[str] = field(default_factory=set)
    words: list[tuple[int, Counter]] = field(default_factory=list)  # (length, bag of words)

    def add(self, item: dict) -> None:
        if item.get("id"):
            self.ids.add(item["id"])
        if item["cell_type"] == "code":
            self.code.add(source(item).strip())
        else:
            found = words(source(item))
            self.words.append((len(found), Counter(found)))

    def has(self, item: Cell) -> bool:
        if item.id:
            return item.id in self.ids
        if item.kind == "code":
            return item.source.strip() in self.code
        size, mine = item.bag
        # Dice >= SIMILAR needs 2 min(a, b) >= SIMILAR (a + b)
        near = [(length, bag) for length, bag in self.words
                if size and 2 * min(size, length) >= SIMILAR * (size + length)]
        return any(2 * (mine & bag).total() >= SIMILAR * (size + length) for length, bag in near)


def without_comments(text: str) -> str:
    """``text`` without its HTML comments, in one pass (``<!--.*?-->`` as a regex rescans the
    rest of the text from every unclosed ``<!--``: quadratic); an unclosed one is kept, as
    that regex keeps it."""
    parts, start = [], 0
    while (opened := text.find("<!--", start)) != -1:
        closed = text.find("-->", opened + 4)
        if closed == -1:
            break
        parts += [text[start:opened], " "]
        start = closed + 3
    parts.append(text[start:])
    return "".join(parts)


# each alternative's repeated part stops at the character that starts another match (a link
# target at "]", a role at "{"), so no text is scanned twice: linear in a hostile cell
MYST_NOISE = re.compile(r"\]\([^\])]*\)|https?://\S+|\{[\w:-]+\}|\(\w+\)=")


def words(text: str) -> list[str]:
    """The words of a markdown cell, without comments, link targets and MyST role names
    (which the student edition rewrites)."""
    return re.findall(r"[^\W_]+", MYST_NOISE.sub(" ", without_comments(text)).casefold())


@dataclass
class Source:
    """What the report reads from an instructor's chapter notebook."""

    name: str  # "03_attention_with_weights"
    prompts: dict[str, str]  # exercise name -> its prompt (the MyST source)
    labels: dict[str, str]  # exercise name -> label
    chapter: Known  # the cells outside every exercise: the chapter's own text and code
    given: Known  # cells inside an exercise that are no prompt, solution or check (its data)
    check_ids: set[str]
    stubs: set[str]  # the student edition's stubbed code cells
    # code exercises whose prompt also asks something in words: the student edition gives
    # them an answer cell (student_edition.asks_for_prose)
    written: set[str] = field(default_factory=set)
    solutions: dict[str, str] = field(default_factory=dict)  # prose exercise -> its solution


def written_name(exercise: str) -> str:
    """The written answer of an autograded exercise, as points.csv and the gradebook name it."""
    return f"{exercise} written"


def page_file(exercise: str) -> str:
    return exercise.replace(" ", "-") + ".html"


def read_source(path: Path) -> Source:
    nb = json.loads(path.read_text(encoding="utf-8"))
    exercises = parse(nb)
    chapter, given, inside, own = Known(), Known(), set(), set()
    for exercise in exercises:
        parts = {exercise.prompt, *exercise.solution, *exercise.checks}
        own |= parts
        inside |= set(range(exercise.prompt, max(parts) + 1))
    for index, item in enumerate(nb["cells"]):
        if index not in inside:
            chapter.add(item)
        elif index not in own:
            given.add(item)
    return Source(path.stem, {e.name: source(nb["cells"][e.prompt]) for e in exercises},
                  {e.name: e.label for e in exercises}, chapter, given,
                  {nb["cells"][i].get("id") for e in exercises for i in e.checks} - {None},
                  {source(c).strip() for c in student_edition(nb)["cells"]
                   if c["cell_type"] == "code" and "solution" in c["metadata"].get("tags", [])},
                  {e.name for e in exercises
                   if e.kind == "code" and asks_for_prose(source(nb["cells"][e.prompt]))},
                  {e.name: source(nb["cells"][e.solution[0]]) for e in exercises
                   if e.kind == "prose" and e.solution})


def answer(cells: list[Cell], label: str, chapter: Source | None) -> list[Cell] | None:
    """The cells of a student's answer to the exercise labelled ``label``; ``None`` if the
    notebook has no such prompt (then the answer cell, by its id or tag, if it has one)."""
    start = next((i for i, c in enumerate(cells) if c.kind == "markdown"
                  and any(m.group(1) == label for m in LABEL.finditer(c.source))), None)
    if start is None:
        found = [c for c in cells if c.id == f"answer-{label}"]
        return found or None
    check_ids = chapter.check_ids if chapter else set()
    region = []
    for item in cells[start + 1:]:
        if item.kind == "markdown" and LABEL.search(item.source):
            break  # the next exercise
        if chapter is not None and chapter.chapter.has(item):
            break  # the chapter's text goes on
        if "check" in item.tags or item.id in check_ids or "mha.checks." in item.source:
            continue
        item.handed_out = chapter is not None and (item.source.strip() in chapter.stubs
                                                   or chapter.given.has(item))
        region.append(item)
    return region


# ---------------------------------------------------------------------------------------------
# HTML, safely

BIDI = set("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
CSP = ("default-src 'none'; img-src data:; style-src 'unsafe-inline'; form-action 'none'; "
       "base-uri 'none'")
# with MathJax beside the pages: its own files only ('self' is the page's folder's scheme;
# no student text becomes an element, so none can name a file)
CSP_MATHS = CSP + "; script-src 'self'"
# An answer's box is at most BOX_PX high, whatever it holds (a \\rule of 10^6 em, 500,000 lines
# of code): on screen it scrolls, in print it is clipped, with a note where it is cut (the note
# sits at the box's bottom edge, so it shows only when the answer reaches it). Without the bound
# one answer made a page of 16 million pixels that chromium could not print in minutes, and
# nobody's PDF of that exercise was written. Each answer is framed, and its headings are the
# size of its text: a "## Jones, Bob" in an answer does not pass for the next student's answer.
BOX_PX = 3000
STYLE = """body{font-family:sans-serif;max-width:60rem;margin:2rem auto;padding:0 1rem}
pre{white-space:pre-wrap;overflow-wrap:anywhere;background:#f6f6f6;padding:.5rem;
border-left:3px solid #ccc}
pre.code{border-color:#58a}pre.out{background:#fff;border-color:#ddd}
section{border-top:1px solid #aaa;margin-top:1.5rem}
section.student{position:relative;overflow:hidden;contain:paint}
.said{position:relative;contain:paint;overflow:auto;max-height:BOX_PXpx;overflow-wrap:anywhere}
.said mjx-container{max-width:100%;overflow-x:auto;overflow-y:hidden}
.said{border:1px solid #c9d6e6;padding:0 .5rem}
.said h1,.said h2,.said h3,.said h4,.said h5,.said h6{font-size:1em;margin:.4rem 0}
.cut{display:none}
.math-skipped,.math-error{color:#a00;font-family:monospace}.blank{color:#a00}.note{color:#555}
table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:.2rem .5rem;text-align:left;
vertical-align:top}img{max-width:100%}
.md{border-left:3px solid #ccc;padding:0 .75rem;margin:.5rem 0}.md p{margin:.4rem 0}
.math-display{display:block;text-align:center;margin:.5rem 0;overflow-x:auto}
.url{color:#555;font-family:monospace;font-size:90%}details summary{color:#555;font-size:85%}
.answer{display:grid;grid-template-columns:minmax(0,1fr) 15rem;gap:1rem}
.rubric{background:#f4f7fb;border:1px solid #c9d6e6;padding:.4rem .6rem;align-self:start;
font-size:92%}.rubric ul{list-style:none;padding:0;margin:.3rem 0}.rubric li{margin:.3rem 0}
.solution{background:#f4fbf4;border-left:3px solid #7a7;padding:.1rem .75rem}
@media print{section.student{break-before:page}details{display:none}
.said{overflow:clip}.said mjx-container{overflow:visible}
.said mjx-container>svg{max-width:100%;height:auto}
.cut{display:block;position:absolute;z-index:1;left:0;right:0;top:calc(BOX_PXpx - 2em);
height:2em;background:#fee;color:#a00;border-top:2px solid #a00;padding:.2rem .5rem}}
""".replace("BOX_PX", str(BOX_PX))
CUT = (f'<p class="cut">[answer cut at {BOX_PX} px; see the notebook (on the page, the '
       "answer's box scrolls)]</p>")


def visible(text: str) -> str:
    """Text with every invisible or direction-changing character shown as ``\\uXXXX`` (lines and
    tabs kept), so that a page shows what was typed, not what it pretends."""
    out = []
    for char in text:
        if char in "\n\t":
            out.append(char)
        elif char in BIDI or unicodedata.category(char) in ("Cc", "Cf", "Cs", "Co", "Cn", "Zl",
                                                            "Zp"):
            out.append(f"\\u{ord(char):04x}" if ord(char) <= 0xFFFF else f"\\U{ord(char):08x}")
        else:
            out.append(char)
    return "".join(out)


def esc(text: str) -> str:
    return html.escape(visible(str(text)), quote=True)


def page(title: str, body: str, maths: bool = False) -> str:
    """A page; ``maths``: MathJax (written beside it by ``rendering.write_mathjax``) typesets it."""
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
            "<meta http-equiv=\"Content-Security-Policy\" "
            f"content=\"{CSP_MATHS if maths else CSP}\">\n"
            "<meta name=\"referrer\" content=\"no-referrer\">\n"
            + (rendering.mathjax_head() if maths else "") +
            f"<title>{esc(title)}</title><style>{STYLE}</style></head>\n<body>\n"
            f"{body}\n</body></html>\n")


def markdown_html(text: str) -> str | None:
    """Markdown as the book renders it, every invisible character shown (None: no renderer):
    in what was typed and in what the renderer made of it (an entity, &#x202E;, becomes the
    character it names only there)."""
    shown = rendering.markdown_html(visible(text))
    return None if shown is None else visible(shown)


def cells_html(cells: list[Cell]) -> str:
    """An answer's cells: markdown rendered (up to ``rendering.MAX_RENDERED`` characters and
    ``rendering.MAX_TABLE_CELLS`` table cells of the answer, and shown as typed below it), code
    and outputs as text, PNG figures as images."""
    # ``size`` counts what is shown, the first cell included (one cell can carry 20 MB of
    # figures), and ``pixels`` the figures' pixels
    parts, size, rendered, table_cells, pixels = [], 0, 0, 0, 0
    for shown_cells, item in enumerate(cells):
        if size > MAX_ANSWER:
            parts.append(f'<p class="blank">[... {len(cells) - shown_cells} more cell(s): '
                         "open the notebook]</p>")
            break
        kind = "code" if item.kind == "code" else "text"
        text = item.source if len(item.source) <= MAX_TEXT else \
            item.source[:MAX_TEXT] + f"\n[... {len(item.source) - MAX_TEXT} more characters]"
        shown_html = None
        cells_bound = rendering.table_cells(text) if item.kind == "markdown" else 0
        if item.kind == "markdown" and rendered + len(text) <= rendering.MAX_RENDERED and \
                table_cells + cells_bound <= rendering.MAX_TABLE_CELLS:
            rendered += len(text)
            table_cells += cells_bound
            shown_html = markdown_html(text)
        if shown_html is None:
            parts.append(f'<pre class="{kind}">{esc(text)}</pre>')
        else:
            parts.append(f'<div class="md">{shown_html}</div><details><summary>as typed'
                         f'</summary><pre class="{kind}">{esc(text)}</pre></details>')
        shown = "".join(item.text)
        if shown:
            if len(shown) > MAX_TEXT:
                shown = shown[:MAX_TEXT] + f"\n[... {len(shown) - MAX_TEXT} more characters]"
            parts.append(f'<pre class="out">{esc(shown)}</pre>')
        size += len(text) + len(shown)
        for left, image in enumerate(item.images):
            size += len(image)
            pixels += png_pixels(image) or 0
            if size > MAX_ANSWER or pixels > MAX_PIXELS:
                parts.append(f'<p class="blank">[... {len(item.images) - left} more image(s) '
                             "of this cell: the answer's share is used up; open the "
                             "notebook]</p>")
                break
            data = base64.b64encode(image).decode("ascii")
            parts.append(f'<img alt="an image the cell printed" src="data:image/png;base64,'
                         f'{data}">')
    return "\n".join(parts)


@dataclass
class Answer:
    student: str  # the gradebook's key
    name: str
    notebook: str  # as the grader names it
    cells: list[Cell] | None  # None: the prompt is not in the notebook
    problem: str = ""
    # an autograded exercise the grader left to the instructor: its reason (which cell)
    left: str = ""


def left_why(nb: Notebook, exercise: str) -> str:
    """Why the grader left ``exercise`` of ``nb`` to the instructor, and what its check found
    on its own (in the notebook's flags: instructor 47 saw it only in the gradebook's notes)."""
    found = re.search(rf"exercise {re.escape(exercise)} left to the instructor: .*?the check "
                      r"alone found ([^,|]+, [^ |]+)", nb.flags)
    why = nb.results[exercise].message
    return f"{why} (the check alone found: {found.group(1)})" if found else why


SAVED = ("Outputs and figures are the ones saved in the student's notebook, not the ones the "
         "grader's run produced.")


def is_blank(cells: list[Cell], written: bool) -> bool:
    """No answer: every cell as handed out (for a written answer, every markdown cell: the
    code is autograded)."""
    return all(c.blank for c in cells if not written or c.kind == "markdown")


def myst_html(text: str) -> str:
    """The chapter's MyST (a prompt, a solution) rendered; as typed when no renderer."""
    shown = markdown_html(rendering.myst_markdown(text))
    return f'<pre class="text">{esc(text)}</pre>' if shown is None else shown


def rubric_html(items: list[rubric.Item]) -> str:
    if not items:
        return ('<aside class="rubric"><strong>Rubric</strong><p class="note">none in '
                "<code>rubric.csv</code></p></aside>")
    rows = "".join(f"<li>\u2610 <strong>{esc(i.name)}</strong> ({fmt_points(i.points)}) "
                   f"{esc(i.text)}</li>" for i in items)
    return (f'<aside class="rubric"><strong>Rubric</strong><ul>{rows}</ul><p class="note">'
            "In <code>points.csv</code>: the items given in <code>rubric</code> (R1 R3); with "
            "<code>points</code> blank, their sum counts.</p></aside>")


def answers_page(exercise: str, prompt: str, answers: list[Answer], nothing: list[str],
                 written: str = "", solution: str = "", items: list[rubric.Item] | None = None,
                 maths: bool = False) -> str:
    """One exercise's page; ``written``: the autograded exercise whose written answers these
    are; ``solution``: the chapter's; ``items``: the rubric, shown beside every answer;
    ``maths``: MathJax is beside the page."""
    blank = sum(1 for a in answers if a.cells is not None and is_blank(a.cells, bool(written)))
    grade = (f"<p>The code of exercise {esc(written)} is autograded; its prompt also asks for "
             "an answer in words, in the answer cell below the code. Grading it is optional: "
             f"enter points for <code>{esc(exercise)}</code> in <code>points.csv</code> (next "
             "to this page; <code>max_points</code> default 1) and it counts, as a by-hand "
             "exercise, for the whole class. The student's code is shown for context.</p>"
             if written else "")
    body = [f"<h1>Exercise {esc(written or exercise)}: every "
            f"{'written answer' if written else 'answer'}</h1>",
            f"<p>{len(answers)} notebook(s), {blank} with the answer left blank. Grade in "
            f"<code>points.csv</code> (next to this page). {SAVED}</p>", grade,
            f"<h2>The exercise</h2>{myst_html(prompt)}" if prompt else "",
            f'<h2>The chapter\'s solution</h2><div class="solution">{myst_html(solution)}</div>'
            if solution else ""]
    aside = rubric_html(items or []) if items is not None else ""
    for number_, item in enumerate(answers, start=1):
        body.append(f'<section class="student" id="a{number_}"><h2>{esc(item.name)}</h2>'
                    f'<p class="note">Exercise {esc(written or exercise)}'
                    f'{" (written)" if written else ""}; '
                    f'student <code>{esc(item.student)}</code>, notebook '
                    f'<code>{esc(item.notebook)}</code></p><div class="answer">'
                    f'<div class="said">{CUT}')
        if item.left:
            body.append(f'<p class="blank">Autograded, but left to you by the grader: '
                        f'{esc(item.left)}. Open the notebook to see that cell.</p>')
        if item.problem:
            body.append(f'<p class="blank">{esc(item.problem)}</p>')
        elif item.cells is None:
            body.append('<p class="blank">The exercise\'s prompt is not in this notebook: '
                        "nothing found to show; open the notebook.</p>")
        elif not item.cells or is_blank(item.cells, bool(written)):
            body.append('<p class="blank">No answer: the answer cells are as handed out'
                        + (" (the code, autograded, is not shown)" if written else "")
                        + ".</p>")
        else:  # what the student wrote; the stubs left as handed out are not repeated
            body.append(cells_html([c for c in item.cells if not c.blank]))
        body.append(f"</div>{aside}</div></section>")
    if nothing:
        body.append("<section><h2>No notebook of this chapter</h2><p>"
                    + ", ".join(esc(n) for n in nothing) + "</p></section>")
    return page(f"Exercise {written or exercise}: "
                f"{'written answers' if written else 'answers'}", "\n".join(body), maths)


def collect(book: Gradebook, files: dict[str, Path], sources: dict[str, Source]
            ) -> dict[str, tuple[str, list[Answer], list[str], str]]:
    """exercise -> (prompt, every student's answer, who handed in no notebook of its chapter,
    and for a written answer ("1.2 written") the autograded exercise it belongs to)."""
    pages = {}
    for chapter in book.chapters:
        cache: dict[str, list[Cell] | str] = {}  # a chapter's notebooks, read once each
        chapter_source = sources.get(chapter.number)
        written = {w: w.removesuffix(" written") for w, number_ in book.written.items()
                   if number_ == chapter.number}
        left = sorted({e for s in book.students for e in book.hand_graded(s, chapter)
                       if chapter.max_points[e] is not None}, key=exercise_key)
        names = [e for e in chapter.by_hand if e not in written] + left + list(written)
        for name in names:
            exercise = written.get(name, name)
            label = (chapter_source.labels.get(exercise) if chapter_source else None) or \
                f"ex-{chapter.number}-{exercise.split('.')[1]}"
            answers, nothing = [], []
            for student in book.students:
                nb = student.notebooks.get(chapter.number)
                if nb is None:
                    if name not in left:
                        nothing.append(student.name)
                    continue
                if name in left and name not in nb.left_to_hand:  # autograded for this one
                    continue
                if nb.name not in cache:
                    path = files.get(nb.name)
                    try:
                        cache[nb.name] = read_cells(path) if path else \
                            "the notebook was not found under SUBMISSIONS"
                    except (OSError, ValueError) as error:
                        cache[nb.name] = f"the notebook cannot be read: {error}"
                cells = cache[nb.name]
                if isinstance(cells, str):
                    answers.append(Answer(student.key, student.name, nb.name, None, cells))
                else:
                    answers.append(Answer(student.key, student.name, nb.name,
                                          answer(cells, label, chapter_source),
                                          left=left_why(nb, name) if name in left else ""))
            prompt = chapter_source.prompts.get(exercise, "") if chapter_source else ""
            pages[name] = (prompt, answers, nothing, exercise if name in written else "")
    return pages


def write_pages(folder: Path, pages: dict[str, tuple[str, list[Answer], list[str], str]],
                sources: dict[str, Source], maxima: dict[str, float]) -> list[str]:
    """Every exercise's page and the index into ``folder``, with MathJax beside them and the
    rubric of ``folder/rubric.csv`` (a first one written if there is none; ``maxima``: each
    exercise's points); returns notes for the summary."""
    notes = []
    maths = rendering.write_mathjax(folder)
    if not maths:
        notes.append("MathJax (django-static-mathjax) not installed: the by-hand pages show "
                      "maths as TeX")
    if rendering.parser() is None:
        notes.append("markdown-it-py or mdit-py-plugins not installed: the by-hand pages show "
                     "answers as typed")
    rubric_file = folder / "rubric.csv"
    if not os.path.lexists(rubric_file):
        write_first_rubric = {name: maxima.get(name, 1.0) for name in sorted(
            (n for n, p in pages.items() if not p[3]), key=exercise_key)}
        rubric.write_first(rubric_file, write_first_rubric)
    try:
        items, errors = rubric.read(rubric_file, set(pages))
    except ValueError as error:
        items, errors = {}, [str(error)]
    notes += [f"rubric not taken: {error}" for error in errors]
    solutions = {name: text for source in sources.values()
                 for name, text in source.solutions.items()}
    for exercise, (prompt, found, nothing, base) in pages.items():
        with create(folder / page_file(exercise)) as handle:
            handle.write(answers_page(exercise, prompt, found, nothing, base,
                                      "" if base else solutions.get(exercise, ""),
                                      items.get(exercise, []), maths))
    with create(folder / "index.html") as handle:
        handle.write(index_page(pages))
    return notes


def index_page(pages: dict[str, tuple[str, list[Answer], list[str], str]]) -> str:
    items = "".join(f'<li><a href="{esc(page_file(name))}">Exercise {esc(base or name)}</a>'
                    f"{' (written answers; the code is autograded)' if base else ''}: "
                    f"{len(answers)} answer(s)</li>"
                    for name, (_, answers, _, base) in sorted(pages.items(),
                                                             key=lambda p: exercise_key(p[0])))
    return page("By-hand exercises", "<h1>By-hand exercises</h1><ul>" + items + "</ul>"
                "<p>Enter points in <code>points.csv</code>, then run "
                "<code>mha-grade report SUBMISSIONS</code> again: it reads them.</p>")


# ---------------------------------------------------------------------------------------------
# Points to fill in, and reading them back

def points_rows(book: Gradebook, existing: list[dict]) -> list[dict]:
    """The rows of points.csv: one per by-hand exercise and student with a notebook of its
    chapter; what an earlier file holds (points, comments, maximum points) is kept as it is,
    rows it has that this run does not make included."""
    kept = {(uncell(r.get("student") or ""), r.get("exercise") or ""): r for r in existing}
    rows, made = [], set()
    for chapter in book.chapters:
        left = {e for s in book.students for e in book.hand_graded(s, chapter)}
        names = sorted({*chapter.by_hand, *left, *(w for w, n in book.written.items()
                                                    if n == chapter.number)}, key=exercise_key)
        for exercise in names:
            for student in book.students:
                if chapter.number not in student.notebooks or (
                        exercise in chapter.max_points and chapter.max_points[exercise]
                        is not None and exercise not in book.hand_graded(student, chapter)):
                    continue
                old = kept.get((student.key, exercise), {})
                rows.append({"student": student.key, "name": student.name,
                             "exercise": exercise,
                             "max_points": uncell(old.get("max_points") or "") if old
                             else fmt_points(book.hand_max[exercise]),
                             "points": uncell(old.get("points") or ""),
                             "comment": uncell(old.get("comment") or ""),
                             "rubric": uncell(old.get("rubric") or "")})
                made.add((student.key, exercise))
    rows += [{k: uncell(r.get(k) or "") for k in POINTS_HEADER}
             for key, r in kept.items() if key not in made]
    return rows


def write_points(path: Path, rows: list[dict]) -> None:
    with create(path) as handle:
        writer = csv.DictWriter(handle, fieldnames=POINTS_HEADER, lineterminator="\n",
                                extrasaction="ignore")
        writer.writeheader()
        writer.writerows([{k: cell(v) for k, v in row.items()} for row in rows])


def rubric_points(entry: str, items: list[rubric.Item]) -> float:
    """The sum of the rubric items an entry of points.csv names ("R1 R3"); ``ValueError``
    naming what is wrong."""
    if not RUBRIC_ENTRY.fullmatch(entry):
        raise ValueError(f"rubric {display(entry)!r} is not a list of items such as R1 R3")
    known = {item.name: item.points for item in items}
    names = [name.upper() for name in re.findall(r"[Rr]\d+", entry)]
    unknown = [n for n in names if n not in known]
    if unknown or len(set(names)) != len(names):
        raise ValueError(f"rubric {display(entry)!r}: "
                         + (f"no item {', '.join(unknown)} in rubric.csv (it has "
                            f"{', '.join(known) or 'none'})" if unknown else "an item twice"))
    return sum(known[n] for n in names)


def read_rubric(folder: Path) -> dict[str, list[rubric.Item]]:
    """The items of ``folder/rubric.csv``, for reading points.csv (none when it is missing or
    unreadable; the pages name the rows not taken)."""
    path = folder / "rubric.csv"
    try:
        return rubric.read(path, None)[0] if os.path.lexists(path) else {}
    except ValueError:
        return {}


def read_points(path: Path, book: Gradebook,
                items: dict[str, list[rubric.Item]] | None = None) -> list[str]:
    """Puts the points of a filled points.csv into ``book`` (``Student.hand``, and each
    exercise's maximum into ``book.hand_max``); returns one message per entry not taken.
    ``items``: the rubric, for entries whose points are left blank and rubric column filled."""
    rows = read_csv(path)
    if rows and not {"student", "exercise", "points"} <= set(rows[0]):
        return [f"{path.name}: the columns must include student, exercise and points "
                f"(found: {display(', '.join(k for k in rows[0] if k))})"]
    entries = PointsEntries(book, items)
    errors = [error for line, row in enumerate(rows, start=2)
              if (error := entries.take(f"{path.name} line {line}", line, row))]
    entries.put_into(book)
    return errors


class PointsEntries:
    """The entries of a points.csv taken so far (at most one per student and exercise, one
    maximum per exercise), put into the gradebook once every row is read."""

    def __init__(self, book: Gradebook, items: dict[str, list[rubric.Item]] | None):
        self.book, self.items = book, items
        # autograded exercises the grader left to the instructor keep their own points
        self.left = book.left_to_hand()
        self.by_hand = {e for c in book.chapters for e in c.by_hand} | set(book.written) \
            | set(self.left)
        self.maxima: dict[str, tuple[float, int]] = {}
        self.taken: dict[tuple[str, str], int] = {}
        self.pending: list[tuple[Student, str, float | None, str]] = []

    def take(self, where: str, line: int, row: dict) -> str:
        """Take one row, or say why not (``where``: its file and line)."""
        if row.get(None):  # DictReader's fields beyond the header
            columns = display(", ".join(k for k in row if k))
            return (f"{where}: more fields than the header has columns ({columns}): "
                    "a decimal comma (1,5) or a comma in a comment, unquoted, shifts the "
                    "columns; write 1.5, or quote the field (\"1,5\"): row not taken")
        key = uncell(row.get("student") or "")  # exactly: " alice" is not alice
        exercise = (row.get("exercise") or "").strip()
        student = self.book.student(key)
        why = self.unknown(where, key, exercise, student, line)
        if why:
            return why
        most, why = self.maximum(where, exercise, row, line)
        if why:
            return why
        points, why = self.points(where, key, exercise, row)
        if why:
            return why
        if points is not None and not 0 <= points <= most:
            # points left blank and rubric items given: the number is their sum, found nowhere
            # in points.csv, so the message says where it comes from
            given = uncell(row.get("rubric") or "").strip()
            summed = (f" (the sum of rubric {display(given)!r}: its items' points in rubric.csv)"
                      if given and not uncell(row.get("points") or "").strip() else "")
            return (f"{where}: points {fmt_points(points)}{summed} for {display(key)}, "
                    f"exercise {exercise} is not between 0 and {fmt_points(most)}")
        self.pending.append((student, exercise, points, uncell(row.get("comment") or "")))
        return ""

    def unknown(self, where: str, key: str, exercise: str, student: Student | None,
                line: int) -> str:
        """Why a row names no student and by-hand exercise to take (or one already taken:
        else it is marked taken here), or ""."""
        if student is None:
            return f"{where}: unknown student {display(key)!r}: not in the gradebook"
        if exercise not in self.by_hand:
            return (f"{where}: exercise {display(exercise)!r} is not graded by hand "
                    f"(those are: {', '.join(sorted(self.by_hand, key=exercise_key))})")
        if (key, exercise) in self.taken:
            return (f"{where}: {display(key)}, exercise {exercise} again (first on line "
                    f"{self.taken[(key, exercise)]}): this one not taken")
        self.taken[(key, exercise)] = line
        return ""

    def maximum(self, where: str, exercise: str, row: dict, line: int) -> tuple[float, str]:
        """(the row's max_points, else the exercise's; why it cannot be taken, or ""): one
        positive value per exercise, the first kept."""
        raw_max = (row.get("max_points") or "").strip()
        try:
            most = number(raw_max)
        except ValueError:
            return 0.0, f"{where}: max_points {display(raw_max)!r} is not a number"
        most = self.book.hand_max[exercise] if most is None else most
        if most <= 0:
            return most, f"{where}: max_points must be positive, not {fmt_points(most)}"
        if exercise in self.left and most != self.left[exercise]:
            worth = fmt_points(self.left[exercise])
            return most, (f"{where}: exercise {exercise} is worth {worth} points "
                          f"(autograded, left to you), not {fmt_points(most)}")
        if exercise in self.maxima and self.maxima[exercise][0] != most:
            return most, (f"{where}: exercise {exercise} has max_points {fmt_points(most)} "
                          f"here but {fmt_points(self.maxima[exercise][0])} on line "
                          f"{self.maxima[exercise][1]}: one value per exercise")
        self.maxima.setdefault(exercise, (most, line))
        return most, ""

    def points(self, where: str, key: str, exercise: str, row: dict
               ) -> tuple[float | None, str]:
        """(the row's points: typed, else the sum of its rubric items, else None; why they
        cannot be taken, or "")."""
        raw = uncell(row.get("points") or "").strip()
        try:  # a decimal comma (1,5) is read as the decimal mark it is
            points = number(raw.replace(",", ".") if re.fullmatch(r"\d+,\d+", raw) else raw)
        except ValueError:
            return None, (f"{where}: points {display(raw)!r} for {display(key)}, exercise "
                          f"{exercise} is not a number")
        given = uncell(row.get("rubric") or "").strip()
        if given:
            try:
                from_rubric = rubric_points(given, (self.items or {}).get(exercise, []))
            except ValueError as error:
                return None, f"{where}: {display(key)}, exercise {exercise}: {error}"
            points = from_rubric if points is None else points  # typed points win
        return points, ""

    def put_into(self, book: Gradebook) -> None:
        """Each exercise's maximum into ``book.hand_max``, each entry into its student's hand."""
        for exercise, (most, _) in self.maxima.items():
            book.hand_max[exercise] = most
        for student, exercise, points, comment in self.pending:
            student.hand[exercise] = (points, comment)
