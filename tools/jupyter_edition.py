"""Write the Jupyter edition of the chapters: the book's MyST turned into plain Jupyter markdown.

    python tools/jupyter_edition.py [--out _build/jupyter] [notebook ...]

The chapters are written in MyST for the book (Jupyter Book 1: sphinx-exercise, sphinx-proof,
sphinxcontrib-bibtex). Colab and JupyterLab show that MyST as raw text, so this edition rewrites
every markdown cell in the markdown Jupyter renders, numbered as the book numbers it:

- an exercise becomes ``**Exercise 4.1** (title)`` and its text, maths as maths; a solution is
  folded, as the book folds it: its text in an HTML ``<details>`` block whose summary reads
  "Solution to Exercise 4.1 (click to open)" (running the cell does not open it, unlike a
  collapsed markdown cell, which JupyterLab opens when it runs), its code cells with their code
  and outputs collapsed behind a first line that gives nothing away (the ``{solution-end}`` cell
  goes). That line is ``%%capture solution_N_K_output``: Run All runs the solutions (later
  cells use what they define), and JupyterLab shows a collapsed cell's outputs again when it
  runs, so what a solution prints or draws goes to that variable, whose ``.show()`` the next
  line names. After a solution's code cells comes an answer cell for the student's own code: it
  runs after the solution, so the check below it calls the student's definition, not the
  course's; it starts with the student edition's stub of every function the check calls (the
  def line, ``raise NotImplementedError()``), so that untouched it makes the check say "not
  done yet"; the checks' stored outputs are cleared (they would say "correct" before anything
  was written). The student edition, whose solutions are stubs to fill in, folds nothing and
  adds no answer cell (``fold_solutions=False``);
- a lemma or theorem ``**Lemma 2.1** (title)``, a proof ``*Proof.*``; a note or other
  admonition a quotation with its title in bold; a table or figure its numbered caption;
- ``{ref}``, ``{numref}``, ``{prf:ref}``, ``{doc}`` and links to labels become the text the book
  shows (``Exercise 3.4``, ``Fig. 4.1``, a section's title). A target in the same notebook is
  linked as an anchor in the notebook (``[Lemma 4.1](#lem-04-two-views)``, to an
  ``<a id="lem-04-two-views"></a>`` where the label was), so it works offline and in a fork;
  a target on another page links to that page of the published book. ``{cite:p}`` becomes
  ``(Vaswani et al., 2017)``, ``{cite:t}`` ``Vaswani et al. (2017)``, linked to the book's
  bibliography; ``(label)=`` lines and ``:label:`` options go;
- headings get the book's section numbers (``## 4.1. h heads, side by side``), and a figure cell
  (a code cell with a ``mystnb.figure`` caption) a numbered caption cell after it and its
  anchor in a cell of its own before it; an anchor starts the line of what it names
  (``<a id="lem-04-two-views"></a>**Lemma 4.1** (title)``), so that a link puts that at the top.

Code cells and their outputs are kept as they are (a solution's are folded, behind its
``%%capture`` line, without their stored outputs); the setup cell installs ``mha`` from the
repository and branch named in ``_config.yml`` (an instructor's fork names its own). The
published book is ``html.baseurl`` in ``_config.yml`` if set, else the GitHub Pages site of
that repository (``https://OWNER.github.io/NAME/``): a fork's edition links to the fork's book.

The numbers follow the rules the book's Sphinx extensions use, computed from the sources: the
chapter number is the position in the numbered part of ``_toc.yml``; sections, exercises, figures
and tables count in document order within a chapter, each proof type (lemma, theorem, ...) has
its own counter, and ``:nonumber:`` ones are not counted. tests/test_editions.py compares them
with the built book's HTML.

A notebook under ``--out`` that changed since this tool wrote it (a student's work: ``make
jupyter`` opens the edition where it is written) is kept, and the run says so; a digest of
what was written is kept in ``--out``/``.jupyter_edition_written.json``.

Existing tools were tried first (see the note at the end of this file).
"""

from __future__ import annotations

import argparse
import ast
import copy
import hashlib
import json
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from markdown_it import MarkdownIt
from mdit_py_plugins.amsmath import amsmath_plugin
from mdit_py_plugins.colon_fence import colon_fence_plugin
from mdit_py_plugins.dollarmath import dollarmath_plugin
from mdit_py_plugins.myst_blocks import myst_block_plugin

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = ROOT / "_build" / "jupyter"

# the parser MyST-NB reads the cells with (the block syntax that matters here)
PARSER = (MarkdownIt("commonmark").use(myst_block_plugin).use(colon_fence_plugin)
          .use(dollarmath_plugin).use(amsmath_plugin).enable("table"))

DIRECTIVE = re.compile(r"^\{([\w:-]+)\}\s*(.*)$")
ROLE = re.compile(r"\{([a-z][\w:-]*)\}`([^`]*)`")
CODE_SPAN = re.compile(r"(`+)(?:.|\n)*?(?<!`)\1(?!`)")
EXPLICIT = re.compile(r"^(.*?)\s*<([^<>]+)>$", re.DOTALL)  # "text <target>"
OPTION = re.compile(r"^:([\w-]+):\s*(.*)$")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")

ADMONITIONS = {"note", "tip", "hint", "important", "warning", "caution", "attention", "danger",
               "error", "seealso", "admonition"}
PROOF_TYPES = {"lemma", "theorem", "definition", "corollary", "proposition", "conjecture",
               "example", "remark", "axiom", "criterion", "algorithm", "observation",
               "property", "assumption", "notation"}
# what {prf:ref}, {numref} and captions call each kind of numbered thing
NUMREF_NAMES = {"figure": "Fig.", "table": "Table", "exercise": "Exercise"}
# A folded solution's code cell: JupyterLab shows a collapsed cell as its first line of
# source, raw (no markdown rendered, no comment hidden), and shows a collapsed cell's outputs
# again when the cell runs. Run All runs every solution (later cells use what it defines), so
# the cell starts with IPython's %%capture (JupyterLab, Colab and every IPython kernel run it),
# which keeps what the cell prints and draws in a variable instead of showing it; a cell magic
# must be the first line, so that line, which names only the variable, is what the collapsed
# cell previews. The second line says how to see the output (its stored outputs are dropped:
# opened, or in a static viewer, they gave the answer away).
FOLDED_CODE_FIRST_LINE = "%%capture {variable}"
FOLDED_CODE_SECOND_LINE = "# Solution to {name}, folded: run {variable}.show() to see its output."
CAPTURED = re.compile(r"\A%%capture (solution_\w+_output(?:_\d+)?)\n# Solution to .*?"
                      r"run \1\.show\(\) to see its output\.\n")
FOLDED = {"source_hidden": True, "outputs_hidden": True}
# A folded solution's text: <details> stays closed when its cell runs (JupyterLab's "run"
# un-collapses a collapsed markdown cell, so Run All used to open every written solution). The
# blank lines end the HTML block, so the markdown and maths inside are rendered as markdown.
DETAILS = "<details><summary>{summary} (click to open)</summary>\n\n{text}\n\n</details>"
# Under a solution's code: where the student writes theirs. It runs after the course's code,
# so the check calls the student's definition (the student's code written above the folded
# solution was redefined by it, and the check said "correct" for a wrong answer). For what
# the check calls, it holds the student edition's stub (the def line, then raise
# NotImplementedError()): left as it is, the check says "not done yet", not "correct" for the
# course's solution run just above.
ANSWER_LINE = ("# Your answer to {name} goes here.\n"  # two short lines: no scrolling
               "# It runs after the course's folded solution above: {user} calls yours.")
ANSWER_LINE_STUB = ("# Your answer to {name} goes here, in place of the stub's raise.\n"
                    "# It runs after the course's folded solution above: {user} calls yours.")
FIRST_CELL_NOTE = ("# Exercises: write your answer in the cell under each folded solution, the\n"
                   "# one that starts \"# Your answer to Exercise N.K goes here\".\n")
LOCAL_LINK = re.compile(r"\]\(#([^)\s]+)\)")
ANCHOR = re.compile(r'<a id="([^"]+)"></a>')


def anchor(label: str) -> str:
    """Where a label was: an empty link target Jupyter keeps (JupyterLab as data-jupyter-id)."""
    return f'<a id="{label}"></a>'


# ---------------------------------------------------------------------------------------------
# The book: its pages in order, their chapter numbers, and every label with the text it shows


@dataclass
class Target:
    docname: str  # "notebooks/04_multi_head_attention"
    kind: str  # "section", "exercise", "figure", "table", "lemma", ...
    number: str | None  # "4.1", or None when not numbered
    title: str  # a section's or figure's title, a lemma's name ("" if it has none)

    @property
    def numbered_name(self) -> str:
        """What {numref} and {prf:ref} show: "Fig. 4.1", "Lemma 4.1", "Exercise 4.1"."""
        name = NUMREF_NAMES.get(self.kind, self.kind.capitalize())
        if self.number is None:
            return f"{name} ({self.title})" if self.title else name
        return f"{name} {self.number}"


@dataclass
class Book:
    root: Path
    base_url: str  # the published book, ending in "/"
    repository: str
    branch: str
    pages: list[tuple[str, int | None]]  # (docname, chapter number or None), in toc order
    targets: dict[str, Target] = field(default_factory=dict)
    titles: dict[str, str] = field(default_factory=dict)  # docname -> first heading
    citations: dict[str, tuple[str, str]] = field(default_factory=dict)  # key -> (names, year)

    def url(self, docname: str, anchor: str = "") -> str:
        return f"{self.base_url}{docname}.html" + (f"#{anchor}" if anchor else "")


def read_config(root: Path) -> dict:
    return yaml.safe_load((root / "_config.yml").read_text(encoding="utf-8"))


def published_url(config: dict) -> str:
    """The book's address: html.baseurl if set, else the GitHub Pages site of the repository."""
    base = (config.get("html") or {}).get("baseurl")
    if not base:
        match = re.match(r"https://github\.com/([^/]+)/([^/]+?)(?:\.git)?/?$",
                         config["repository"]["url"])
        if not match:
            raise ValueError("set html.baseurl in _config.yml: the repository is not on GitHub")
        owner, name = match.groups()
        base = f"https://{owner.lower()}.github.io/{name}/"
    return base if base.endswith("/") else base + "/"


def toc_pages(root: Path) -> list[tuple[str, int | None]]:
    """Every page of _toc.yml in order, with its chapter number in a ``numbered`` part."""
    toc = yaml.safe_load((root / "_toc.yml").read_text(encoding="utf-8"))
    pages: list[tuple[str, int | None]] = [(toc["root"], None)]
    chapter = 0
    for part in toc.get("parts", []):
        for entry in part.get("chapters", []):
            if part.get("numbered"):
                chapter += 1
                pages.append((entry["file"], chapter))
            else:
                pages.append((entry["file"], None))
    return pages


def load_book(root: Path = ROOT, repository: str | None = None,
              branch: str | None = None) -> Book:
    config = read_config(root)
    book = Book(root, published_url(config), repository or config["repository"]["url"],
                branch or config["repository"].get("branch", "main"), toc_pages(root))
    book.citations = read_citations(root / config["bibtex_bibfiles"][0])
    for docname, chapter in book.pages:
        Chapter(book, docname, chapter, resolve=False).convert_cells(page_cells(root, docname))
    return book


def page_cells(root: Path, docname: str) -> list[dict]:
    """A page's cells: a notebook's, or one markdown cell holding a .md page."""
    notebook = root / f"{docname}.ipynb"
    if notebook.exists():
        return json.loads(notebook.read_text(encoding="utf-8"))["cells"]
    text = (root / f"{docname}.md").read_text(encoding="utf-8")
    return [{"cell_type": "markdown", "metadata": {}, "source": text}]


def read_citations(path: Path) -> dict[str, tuple[str, str]]:
    """key -> ("Vaswani et al.", "2017"), as sphinxcontrib-bibtex's author_year style says it."""
    from pybtex.database import parse_file

    citations = {}
    for key, entry in parse_file(str(path)).entries.items():
        people = entry.persons.get("author") or entry.persons.get("editor") or []
        last = [latex_to_text(" ".join(p.prelast_names + p.last_names)) for p in people]
        if len(last) == 1:
            names = last[0]
        elif len(last) == 2:
            names = f"{last[0]} and {last[1]}"
        elif last:
            names = f"{last[0]} et al."
        else:
            names = latex_to_text(entry.fields.get("organization", key))
        citations[key] = (names, entry.fields.get("year", "n.d."))
    return citations


def latex_to_text(text: str) -> str:
    from pybtex.backends.plaintext import Backend
    from pybtex.richtext import Text

    # render_as("text") would look the backend up among every installed package's entry
    # points on each call: most of the time of load_book
    return Text.from_latex(text).render(Backend())


# ---------------------------------------------------------------------------------------------
# One page, converted cell by cell


def source(cell: dict) -> str:
    text = cell.get("source", "")
    return text if isinstance(text, str) else "".join(text)


class Chapter:
    """Converts the cells of one page in order, counting what the book numbers."""

    def __init__(self, book: Book, docname: str, chapter: int | None, resolve: bool = True,
                 fold_solutions: bool = True, stubs: dict[str, str] | None = None):
        self.book, self.docname, self.chapter, self.resolve = book, docname, chapter, resolve
        self.fold_solutions = fold_solutions
        self.stubs = stubs or {}  # an exercise's label -> the stubs its answer cell starts with
        self.folded_code_cells = 0  # of the solution being converted
        self.sections = [0] * 6  # heading counters, h1 .. h6
        self.counters: dict[str, int] = {}
        self.current_solution = "the exercise"  # the exercise of the last solution directive
        self.current_label = "exercise"  # and its label
        self.solution_name = "the exercise"  # the exercise of the solution being converted
        self.solution_label = "exercise"
        self.folded_text_of: str | None = None  # the solution whose text was folded last
        self.answer_due: str | None = None  # a solution's code just ended: its answer cell
        self.answer_label = "exercise"

    # -- numbering

    def next_number(self, kind: str) -> str:
        self.counters[kind] = self.counters.get(kind, 0) + 1
        count = self.counters[kind]
        return f"{self.chapter}.{count}" if self.chapter is not None else str(count)

    def add_target(self, label: str, kind: str, number: str | None, title: str) -> None:
        if not self.resolve:
            self.book.targets[label] = Target(self.docname, kind, number, title)

    def heading(self, level: int, title: str, labels: list[str]) -> str:
        if self.docname not in self.book.titles:
            self.book.titles[self.docname] = title
        for label in labels:
            self.add_target(label, "section", None, title)
        if self.chapter is None:
            return title
        self.sections[level - 1] += 1
        self.sections[level:] = [0] * (6 - level)
        numbers = [self.chapter] + self.sections[1:level]
        return ".".join(str(n) for n in numbers) + ". " + title

    # -- cells

    def convert_cells(self, cells: list[dict]) -> list[dict]:
        out = []
        in_solution = False  # between {solution-start} and {solution-end}: the book folds it
        for cell in cells:
            cell = copy.deepcopy(cell)
            if self.answer_due is not None and not self.part_of_solution(cell, in_solution):
                out.append(self.answer_cell(cell))
            if cell["cell_type"] == "markdown":
                text = source(cell)
                starts = re.search(r"^\s*```+\{solution(-start)?\}", text, re.MULTILINE)
                ends = re.search(r"^\s*```+\{solution-end\}", text, re.MULTILINE)
                text = self.markdown(text).strip("\n")
                if not text.strip():
                    in_solution = in_solution and not ends
                    continue  # a cell that held only MyST markup ({solution-end})
                cell["source"] = text
                heading, _, answer = text.partition("\n")
                if starts and heading.startswith("**Solution to"):
                    self.solution_name = self.current_solution
                    self.solution_label = self.current_label
                    self.folded_code_cells = 0
                    cell["source"] = answer.strip("\n")
                    if not self.fold_solutions or not cell["source"]:
                        # the heading shown, the solution's text (if any) in a cell of its own
                        out.append({"cell_type": "markdown", "metadata": {}, "source": heading,
                                    "id": f"{cell.get('id', 'sol')}-head"})
                    if cell["source"]:
                        self.fold(cell)  # folded: its summary names the solution
                        out.append(cell)
                    in_solution = starts.group(1) is not None
                    continue
                if in_solution:
                    self.fold(cell)
                in_solution = in_solution and not ends
                out.append(cell)
            elif cell["cell_type"] == "code":
                drew = bool(cell.get("outputs"))  # before folding drops a solution's outputs
                if in_solution or "solution" in cell.get("metadata", {}).get("tags", []):
                    self.fold(cell)
                    if self.fold_solutions:
                        self.answer_due = self.solution_name
                        self.answer_label = self.solution_label
                elif self.fold_solutions and "check" in cell.get("metadata", {}).get("tags", []):
                    # a stored "correct" would grade the course's solution, before the student
                    # wrote anything; the check's line comes when the student runs it
                    cell["outputs"], cell["execution_count"] = [], None
                figure = cell.get("metadata", {}).get("mystnb", {}).get("figure")
                if figure is not None and figure.get("name") and drew:
                    # the figure's anchor in a cell of its own just above the cell that draws
                    # it: a link puts the code and then the picture at the top of the view (an
                    # anchor in the caption, under the picture, left the picture above it; one
                    # in the outputs would be lost when the student runs the cell)
                    out.append({"cell_type": "markdown", "id": f"{cell.get('id', 'fig')}-anchor",
                                "metadata": {"tags": ["anchor"]},
                                "source": anchor(figure["name"])})
                out.append(cell)
                if figure is not None:
                    number = self.next_number("figure")
                    caption = self.inline(figure.get("caption", ""))
                    if figure.get("name"):
                        self.add_target(figure["name"], "figure", number, caption)
                    if not drew:
                        continue  # a solution stubbed in the student edition draws nothing
                    out.append({"cell_type": "markdown", "id": f"{cell.get('id', 'fig')}-caption",
                                "metadata": {"tags": ["caption"]},
                                "source": f"**Fig. {number}.** {caption}".rstrip()})
                    if cell.get("metadata", {}).get("jupyter"):  # a solution's figure
                        self.fold(out[-1], "its figure's caption")
            else:
                out.append(cell)
        if self.answer_due is not None:
            out.append(self.answer_cell(None))
        return out

    @staticmethod
    def part_of_solution(cell: dict, in_solution: bool) -> bool:
        """Still inside the solution: its cells, the empty {solution-end} cell, a figure's
        caption (added after its cell, not read from the source)."""
        text = source(cell)
        return (in_solution or "solution" in cell.get("metadata", {}).get("tags", [])
                or bool(re.search(r"^\s*```+\{solution-end\}", text, re.MULTILINE))
                and not re.sub(r"```+\{solution-end\}\s*```+", "", text).strip())

    def answer_cell(self, following: dict | None) -> dict:
        """The empty code cell the student writes their answer in, under the solution's code."""
        name, self.answer_due = self.answer_due, None
        checked = following is not None and "check" in following.get("metadata", {}).get(
            "tags", [])
        stub = self.stubs.get(self.answer_label)
        text = (ANSWER_LINE_STUB if stub else ANSWER_LINE).format(
            name=name, user="the check below" if checked else "the cells below")
        return {"cell_type": "code", "execution_count": None, "outputs": [],
                "id": f"answer-{self.answer_label}",  # as the student edition names its own
                "metadata": {"tags": ["answer"]},
                "source": text + ("\n" + stub if stub else "")}

    def fold(self, cell: dict, what: str = "") -> None:
        """Fold a solution's cell as the book folds it: a markdown cell's text in a closed
        <details> block whose summary names the solution (JupyterLab and Colab render markdown
        and maths inside it, and running the cell leaves it closed), a code cell with its code
        collapsed behind a first line that gives nothing away, and no stored output
        (JupyterLab shows a collapsed cell as its first line; Colab, which reads neither mark,
        hides the code of a cell in "form" view); that line is a %%capture, so that running
        the cell (Run All does) shows none of its outputs either."""
        if not self.fold_solutions:
            return
        if cell["cell_type"] == "markdown":
            name = self.solution_name
            summary = f"Solution to {name}" + (f", {what}" if what else "")
            if not what and self.folded_text_of == name:
                summary += ", continued"  # a second text cell of the same solution
            if not what:
                self.folded_text_of = name
            cell["source"] = DETAILS.format(summary=summary, text=source(cell).strip("\n"))
        else:
            self.folded_code_cells += 1
            number = re.sub(r"\W+", "_", self.solution_name.removeprefix("Exercise ")).strip("_")
            variable = f"solution_{number}_output" + (
                f"_{self.folded_code_cells}" if self.folded_code_cells > 1 else "")
            cell["source"] = "\n".join([
                FOLDED_CODE_FIRST_LINE.format(variable=variable),
                FOLDED_CODE_SECOND_LINE.format(name=self.solution_name, variable=variable),
                source(cell)])
            metadata = cell.setdefault("metadata", {})
            metadata.setdefault("jupyter", {}).update(FOLDED)
            metadata["cellView"] = "form"  # Colab's mark: code hidden, "Show code"
            # no stored output either: opened, or shown by a static viewer (GitHub, nbconvert),
            # the book's outputs gave the answer away (student 43); run, it shows what the
            # second line says
            cell["outputs"], cell["execution_count"] = [], None

    # -- block-level markdown

    def markdown(self, text: str) -> str:
        """``text`` with every directive, target and heading rewritten, then every role."""
        lines = text.split("\n")
        replacements: list[tuple[int, int, list[str]]] = []
        pending_labels: list[str] = []
        for token in PARSER.parse(text):
            if token.map is None:
                continue
            start, end = token.map
            if token.type == "myst_target":
                pending_labels.append(token.content.strip())
                replacements.append((start, end, []))
                continue
            if token.type == "myst_line_comment":
                replacements.append((start, end, []))
                continue
            labels, pending_labels = pending_labels, []  # a target names the block after it
            here = "".join(anchor(label) for label in labels)
            if token.type == "heading_open" and token.markup.startswith("#"):
                match = HEADING.match(lines[start].strip())
                level, title = len(match.group(1)), match.group(2)
                numbered = self.heading(level, title, labels)
                prefix = lines[start][: len(lines[start]) - len(lines[start].lstrip())]
                line = f"{prefix}{'#' * level} {numbered}" + (f" {here}" if here else "")
                replacements.append((start, start + 1, [line]))
            elif token.type in ("fence", "colon_fence") and DIRECTIVE.match(token.info.strip()):
                first = lines[start]
                pad = first[: len(first) - len(first.lstrip())]
                name, argument = DIRECTIVE.match(token.info.strip()).groups()
                body = [ln[len(pad):] if ln.startswith(pad) else ln.lstrip()
                        for ln in token.content.rstrip("\n").split("\n")]
                converted = self.directive(name, argument, body, pad)
                if here and converted:  # a label given by a target line, not by :label:
                    converted = [here, "", *converted]
                replacements.append((start, end, [pad + ln if ln else ln for ln in converted]))
            elif here and token.type == "paragraph_open" and token.level == 0:
                # a target before a paragraph: the anchor starts its first line
                replacements.append((start, start + 1, [here + lines[start]]))
            elif here and token.nesting >= 0 and token.level == 0:
                # before a list, a table or maths: a line of its own
                replacements.append((start, start, [here, ""]))
        for start, end, new in sorted(replacements, reverse=True):
            lines[start:end] = new
        text = "\n".join(lines)
        return self.roles_outside_code(text) if self.resolve else text

    def directive(self, name: str, argument: str, body: list[str], pad: str) -> list[str]:
        options, rest = {}, list(body)
        while rest and (m := OPTION.match(rest[0].strip())):
            options[m.group(1)] = m.group(2)
            rest.pop(0)
        content = self.markdown("\n".join(rest).strip("\n")) if rest else ""
        title = self.inline(argument) if argument else ""
        label = options.get("label") or options.get("name")
        # the anchor starts the title's line ("<a id=...></a>**Lemma 4.1** (title)"), so that a
        # link puts the title at the top of the view; on a line of its own it would start the
        # paragraph with a space
        here = anchor(label) if label and self.resolve else ""
        kind = name.split(":")[-1]
        if name == "exercise":
            number = None if "nonumber" in options else self.next_number("exercise")
            if label:
                self.add_target(label, "exercise", number, title)
            head = f"**Exercise {number}**" if number else "**Exercise**"
            return [here + head + (f" ({title})" if title else ""), "", *content.split("\n")]
        if name in ("solution", "solution-start"):
            target = self.book.targets.get(argument.strip())
            what = f"{target.numbered_name} ({target.title})" if target and target.title else (
                target.numbered_name if target else "the exercise")
            # the exercise's name, for the summary of the folded solution and its answer cell
            self.current_solution = target.numbered_name if target else "the exercise"
            self.current_label = argument.strip()
            if name == "solution-start":
                return [f"**Solution to {what}.**"]
            # the heading line, then the text: convert_cells puts the text in a <details>
            return [f"**Solution to {what}.**", "", *content.split("\n")]
        if name == "solution-end":
            return []
        if name.startswith("prf:") and kind == "proof":
            first = content.split("\n")
            starts_with_text = first and first[0] and not re.match(r"^(\$\$|[-*+] |\d+\. |>|#)",
                                                                   first[0])
            if starts_with_text:
                return [f"*Proof.* {first[0]}", *first[1:]]
            return ["*Proof.*", "", *first]
        if name.startswith("prf:") and kind in PROOF_TYPES:
            number = None if "nonumber" in options else self.next_number(kind)
            if label:
                self.add_target(label, kind, number, title)
            head = f"**{kind.capitalize()}{' ' + number if number else ''}**"
            return [here + head + (f" ({title})" if title else ""), "", *content.split("\n")]
        if name in ADMONITIONS:
            heading = title if name == "admonition" else (
                "See also" if name == "seealso" else name.capitalize())
            quoted = [f"> **{heading}**", ">"] + [f"> {ln}" if ln else ">"
                                                  for ln in content.split("\n")]
            return quoted
        if name in ("table", "list-table"):
            number = self.next_number("table") if title else None
            if label:
                self.add_target(label, "table", number, title)
            table = content if name == "table" else self.list_table(rest, options)
            caption = [f"{here}**Table {number}.** {title}", ""] if number else (
                [here, ""] if here else [])
            return [*caption, *table.split("\n")]
        if name == "figure":
            number = self.next_number("figure")
            if label:
                self.add_target(label, "figure", number, content.split("\n")[0])
            alt = options.get("alt", "")
            return [f"{here}![{alt}]({argument.strip()})", "",  # the anchor above the picture
                    f"**Fig. {number}.** {content}".rstrip()]
        if name == "math":
            return ["$$", *rest, "$$"]
        if name in ("code-block", "code", "sourcecode"):
            return [f"```{argument.strip()}", *rest, "```"]
        if self.resolve:
            raise ValueError(f"{self.docname}: no plain-markdown form for the directive {{{name}}}")
        return body

    def list_table(self, rows: list[str], options: dict) -> str:
        table, row = [], None
        for line in rows:
            if line.startswith("* - "):
                row = [line[4:].strip()]
                table.append(row)
            elif line.strip().startswith("- ") and row is not None:
                row.append(line.strip()[2:].strip())
            elif line.strip() and row is not None:
                row[-1] += " " + line.strip()
        if not table:
            return ""
        cells = [[self.inline(c) for c in r] for r in table]
        header = int(options.get("header-rows", "0") or 0)
        head = cells[0] if header else [""] * len(cells[0])
        body = cells[1:] if header else cells
        lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
        return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in body])

    # -- inline markdown

    def inline(self, text: str) -> str:
        return self.roles_outside_code(text) if self.resolve else text

    def roles_outside_code(self, text: str) -> str:
        """Every role replaced, except inside code blocks and code spans."""
        lines, out, chunk = text.split("\n"), [], []
        in_code = set()
        for token in PARSER.parse(text):
            if token.type in ("fence", "code_block") and token.map:
                in_code.update(range(token.map[0], token.map[1]))
        for number, line in enumerate(lines):
            if number in in_code:
                out.append(self.replace_roles("\n".join(chunk))) if chunk else None
                chunk = []
                out.append(line)
            else:
                chunk.append(line)
        if chunk:
            out.append(self.replace_roles("\n".join(chunk)))
        return "\n".join(out)

    def replace_roles(self, text: str) -> str:
        pattern = re.compile(ROLE.pattern + "|" + CODE_SPAN.pattern + r"|\[([^\]]*)\]\(([^)\s]+)\)")

        def one(match: re.Match) -> str:
            if match.group(1):
                return self.role(match.group(1), match.group(2))
            if match.group(5) is not None:  # a markdown link: to a label or a page?
                return self.link(match.group(4), match.group(5), match.group(0))
            return match.group(0)  # a code span stays as it is

        return pattern.sub(one, text)

    def link(self, text: str, target: str, original: str) -> str:
        if re.match(r"^[a-z]+:|^#", target):
            return original
        label = target.lstrip("#")
        if label in self.book.targets:
            return f"[{text}]({self.target_url(label)})"
        page = self.page_of(target)
        if page:
            return f"[{text}]({self.book.url(page)})"
        return original

    def target_url(self, label: str) -> str:
        """An anchor in this notebook for a label of this page, else the book's page."""
        found = self.book.targets[label]
        return f"#{label}" if found.docname == self.docname else self.book.url(found.docname,
                                                                               label)

    def page_of(self, path: str) -> str | None:
        """The docname of a page named by a path relative to this page (``../book/claims``)."""
        base = Path(self.docname).parent
        resolved = (base / path).as_posix()
        parts: list[str] = []
        for part in resolved.split("/"):
            if part == "..":
                parts = parts[:-1]
            elif part not in (".", ""):
                parts.append(part)
        docname = re.sub(r"\.(md|ipynb)$", "", "/".join(parts))
        return docname if any(docname == d for d, _ in self.book.pages) else None

    def role(self, name: str, content: str) -> str:
        explicit = EXPLICIT.match(content)
        text, target = (explicit.group(1), explicit.group(2)) if explicit else (None, content)
        target = target.strip()
        if name in ("cite:p", "cite:t", "cite", "cite:ps", "cite:ts"):
            return self.cite(name, target)
        if name == "doc":
            docname = self.page_of(target)
            if docname is None:
                raise ValueError(f"{self.docname}: {{doc}}`{content}` names no page of the book")
            shown = text or self.book.titles.get(docname, docname)
            return f"[{shown}]({self.book.url(docname)})"
        if name in ("ref", "numref", "prf:ref"):
            found = self.book.targets.get(target)
            if found is None:
                raise ValueError(f"{self.docname}: {{{name}}}`{content}`: no such label")
            if text is not None:
                shown = text.replace("{number}", found.number or "").replace(
                    "%s", found.number or "").replace("{name}", found.title)
            elif name == "ref" and found.kind in ("section", "figure", "table"):
                shown = found.title
            else:
                shown = found.numbered_name
            return f"[{shown}]({self.target_url(target)})"
        if name == "math":
            return f"${content}$"
        raise ValueError(f"{self.docname}: no plain-markdown form for the role {{{name}}}")

    def cite(self, name: str, keys: str) -> str:
        parts = []
        for key in (k.strip() for k in keys.split(",")):
            if key not in self.book.citations:
                raise ValueError(f"{self.docname}: citation {key!r} is not in the bibliography")
            names, year = self.book.citations[key]
            parts.append((names, year))
        url = self.book.url("book/bibliography")
        if name.startswith("cite:t"):
            return ", ".join(f"[{n} ({y})]({url})" for n, y in parts)
        return "(" + "; ".join(f"[{n}, {y}]({url})" for n, y in parts) + ")"


# ---------------------------------------------------------------------------------------------
# The notebooks

SETUP_SPEC = re.compile(r'"mha\[lab\] @ git\+[^"]*"')


def setup_cell(cell: dict, book: Book) -> dict:
    """The setup cell, installing ``mha`` from the repository and branch of ``_config.yml``."""
    cell = copy.deepcopy(cell)
    text = source(cell)
    if not SETUP_SPEC.search(text):
        raise ValueError("the first cell is not the course's setup cell (tests/conventions.py)")
    cell["source"] = SETUP_SPEC.sub(f'"mha[lab] @ git+{book.repository}@{book.branch}"', text)
    return cell


def convert_notebook(nb: dict, book: Book, docname: str, fold_solutions: bool = True) -> dict:
    """The Jupyter edition of one notebook of the book (a new dict; ``nb`` is left as it is).
    ``fold_solutions=False`` leaves solution cells open (the student edition's are stubs)."""
    chapter = dict(book.pages).get(docname)
    edition = copy.deepcopy({k: v for k, v in nb.items() if k != "cells"})
    cells = list(nb["cells"])
    first = [setup_cell(cells[0], book)] if cells and SETUP_SPEC.search(source(cells[0])) else []
    stubs = answer_stubs(nb) if fold_solutions else {}
    converted = Chapter(book, docname, chapter, fold_solutions=fold_solutions,
                        stubs=stubs).convert_cells(cells[len(first):])
    if fold_solutions and first and any(c.get("id", "").startswith("answer-")
                                        for c in converted):
        # the first thing a student reads says where an answer goes (not above the solution:
        # the solution, run after it, would redefine it)
        lines = source(first[0]).split("\n")
        first[0]["source"] = "\n".join(lines[:1] + FIRST_CELL_NOTE.rstrip("\n").split("\n")
                                       + lines[1:])
    edition["cells"] = first + link_missing_anchors_to_the_book(converted, book)
    return edition


def check_arguments(text: str) -> list[str]:
    """The names a check cell hands its check: ``mha.checks.ch01.f(stable_softmax)`` ->
    ``["stable_softmax"]``."""
    return [arg.id for node in ast.walk(ast.parse(text)) if isinstance(node, ast.Call)
            and ast.unparse(node.func).startswith("mha.checks.")
            for arg in [*node.args, *(k.value for k in node.keywords)]
            if isinstance(arg, ast.Name)]


def answer_stubs(nb: dict) -> dict[str, str]:
    """For each exercise with a check, the student edition's stub of every function its check
    calls (``mha_grade.student_edition``: the def line, ``raise NotImplementedError()``), which
    its answer cell starts with: a fresh Run All then says "not done yet", not "correct" for
    the course's solution run just above. A later cell of the chapter that used such a name
    would meet the stub, not the solution: that is refused here, naming the cell."""
    from mha_grade.exercise_format import parse
    from mha_grade.student_edition import stub_regions

    cells, stubs = nb["cells"], {}
    for exercise in parse(nb):
        called = list(dict.fromkeys(name for i in exercise.checks
                                    for name in check_arguments(source(cells[i]))))
        if not called:
            continue
        defined = {}
        for i in exercise.marked:
            text = stub_regions(source(cells[i]))
            lines = text.split("\n")
            for node in ast.parse(text).body:
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    start = min([node.lineno] + [d.lineno for d in node.decorator_list])
                    defined[node.name] = "\n".join(lines[start - 1:node.end_lineno])
        missing = [name for name in called if name not in defined]
        if missing:
            raise ValueError(f"{exercise.label}: its check calls {', '.join(missing)}, which its "
                             "solution does not define with a def: no stub for its answer cell")
        own = set(exercise.solution) | set(exercise.checks)
        for j in range(min(exercise.solution), len(cells)):
            text = source(cells[j])
            used = [n for n in called if re.search(rf"(?<![\w.]){re.escape(n)}\b", text)]
            if j not in own and cells[j]["cell_type"] == "code" and used:
                raise ValueError(
                    f"cell {cells[j].get('id', j)} uses {', '.join(used)}: the answer cell of "
                    f"{exercise.label} stubs it (raise NotImplementedError()), so Run All would "
                    "stop there; use mha's version, or another name, in that cell")
        stubs[exercise.label] = "\n\n\n".join(defined[name] for name in called)
    return stubs


def link_missing_anchors_to_the_book(cells: list[dict], book: Book) -> list[dict]:
    """A link to an anchor this notebook lacks (its target was in a solution the student edition
    left out) goes to the book's page instead."""
    present = {label for cell in cells if cell["cell_type"] == "markdown"
               for label in ANCHOR.findall(source(cell))}
    for cell in cells:
        if cell["cell_type"] == "markdown":
            cell["source"] = LOCAL_LINK.sub(
                lambda m: m.group(0) if m.group(1) in present or m.group(1) not in book.targets
                else f"]({book.url(book.targets[m.group(1)].docname, m.group(1))})",
                source(cell))
    return cells


def edition_notebooks(root: Path = ROOT) -> list[Path]:
    """The notebooks of the book: the chapters and the notebook pages (the explorer)."""
    return [root / f"{d}.ipynb" for d, _ in toc_pages(root) if (root / f"{d}.ipynb").exists()]


def serialize(nb: dict) -> str:
    return json.dumps(nb, indent=1, ensure_ascii=False) + "\n"


def write(nb: dict, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(serialize(nb), encoding="utf-8")


# In the output folder: the digest of every notebook as this tool last wrote it. Students open
# and edit the edition where it was written (`make jupyter`), so a notebook whose content no
# longer matches is theirs and is never written over.
RECORD = ".jupyter_edition_written.json"


# A digest of this form covers only the cells' types and sources; one without the prefix (an
# older record) covered the whole notebook.
DIGEST_PREFIX = "cells:"


def digest(text: str, whole: bool = False) -> str | None:
    """SHA-256 of what is the student's work in a notebook: each cell's type and source, in
    order. Not its bytes, nor its metadata or outputs: JupyterLab saves (and autosaves) a notebook
    the student only opened in its own layout (sources as lists of lines, keys sorted), with its
    kernel's display name and with ``collapsed``/``jupyter`` marks on the cells, and running a
    cell changes its outputs; none of that is the student's to keep. ``whole=True``: the digest
    of the whole notebook that older records hold. None for a file that is no notebook."""
    import nbformat

    try:
        nb = nbformat.reads(text, as_version=4)
    except Exception:  # noqa: BLE001 - whatever it is, it is not what this tool wrote
        return None
    if whole:
        canonical = json.dumps(nb, sort_keys=True, ensure_ascii=False)
        return hashlib.sha256(canonical.encode("utf-8")).hexdigest()
    work = [[cell.get("cell_type"), source(cell)] for cell in nb.get("cells", [])]
    canonical = json.dumps(work, ensure_ascii=False)
    return DIGEST_PREFIX + hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def as_written(text: str, recorded: str | None) -> bool:
    """Is ``text`` still what the record says this tool wrote (in the record's own form)?"""
    if recorded is None:
        return False
    return digest(text, whole=not recorded.startswith(DIGEST_PREFIX)) == recorded


def replace_file(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` whole or not at all: a half-written notebook would read as the
    student's from then on."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.writing")
    temporary.write_text(text, encoding="utf-8")
    os.replace(temporary, path)


def write_keeping_changes(editions: dict[str, dict], out: Path) -> list[str]:
    """Write each notebook (``relative path -> notebook``) under ``out``, except one that was
    changed since this function wrote it (or that it never wrote). Returns those kept."""
    record_path = out / RECORD
    try:
        record = json.loads(record_path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        record = {}
    kept = []
    for relative, nb in editions.items():
        path, text = out / relative, serialize(nb)
        new = digest(text)
        if path.exists():
            current = path.read_text(encoding="utf-8", errors="replace")
            now = digest(current)
            if now != new and (now is None or not as_written(current, record.get(relative))):
                kept.append(relative)
                continue
        if not path.exists() or path.read_text(encoding="utf-8", errors="replace") != text:
            replace_file(path, text)
        record[relative] = new
        # after every notebook: a run stopped half way still knows what it wrote
        replace_file(record_path, json.dumps(record, indent=1, sort_keys=True) + "\n")
    return kept


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="*", type=Path,
                        help="notebooks of the book (default: every one in _toc.yml)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT,
                        help="output folder; a notebook keeps its path below it")
    args = parser.parse_args(argv)
    book = load_book(ROOT)
    paths = [p.resolve() for p in args.notebooks] or edition_notebooks(ROOT)
    editions = {}  # every notebook converted before any is written: a bad one writes nothing
    for path in paths:
        relative = path.relative_to(ROOT).with_suffix("").as_posix()
        nb = json.loads(path.read_text(encoding="utf-8"))
        editions[f"{relative}.ipynb"] = convert_notebook(nb, book, relative)
    kept = write_keeping_changes(editions, args.out)
    print(f"Jupyter edition of {len(paths) - len(kept)} notebook(s) written to {args.out}")
    for relative in kept:
        print(f"kept {args.out / relative}: it was changed since it was written (your work?), "
              f"so it is not written over. For a fresh copy, move it elsewhere (or delete it) "
              f"and run this again.")
    return 0


if __name__ == "__main__":
    sys.exit(main())

# Tried first, on chapter 4 (November 2026):
# - sphinx-tojupyter 0.6.0 (QuantEcon's Sphinx builder, `sphinx-build -b jupyter`) with the
#   book's extensions: every code cell of a MyST-NB notebook came out as a markdown cell holding
#   an ```ipython3 fence, so no code cell and no output was left; exercise headings came out as
#   "##  (Pack separate heads)Exercise 4.1", proofs as "**Proof.**" then "Proof. ..." and
#   references as links to neighbouring .ipynb files, not to the book.
# - mystmd 1.8.3 (npm): no ipynb export (its formats are pdf, tex, typst, docx, xml, md, meca,
#   cff); its md export dropped exercises and solutions ("Unsupported node type"), left
#   {cite:p} roles raw, numbered lemmas per page ("Lemma 1") and wrote maths as {math} roles.
