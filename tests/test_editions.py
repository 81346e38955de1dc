"""The Jupyter edition (`make book`) and the student edition (`make student`): no MyST left.

Colab and JupyterLab show MyST as raw text, so both editions turn it into plain Jupyter markdown
(tools/jupyter_edition.py). Checked here: no directive, role, target or option is left in any
markdown cell, nor in what nbconvert's HTML exporter (the markdown Jupyter renders) makes of
them; every exercise keeps its numbered heading; code and outputs are the source's; the setup
cell installs from the repository named in _config.yml; solutions are folded as the book folds
them, and stay folded when run; each solution's code is followed by a cell for the student's
answer, which the check calls; references to the same notebook are anchors in it, and the rest
link to the published book named in _config.yml; the student edition has an answer cell for
every question asked in words and still grades; and, when the book is built, every number and
link agrees with the book's own HTML.
"""

import ast
import json
import re
from html import unescape

import jupyter_edition  # tools/
import pytest
import student_jupyter_edition  # tools/
from exercise_notebooks import fmt, student_edition

from conventions import NOTEBOOKS, ROOT, setup_cell_source

BOOK = jupyter_edition.load_book(ROOT)
SOURCES = jupyter_edition.edition_notebooks(ROOT)  # the chapters and the explorer page
HTML = ROOT / "_build" / "html"


def docname(path):
    return path.relative_to(ROOT).with_suffix("").as_posix()


def jupyter(path):
    return jupyter_edition.convert_notebook(fmt.load(path), BOOK, docname(path))


def student(path):
    return student_jupyter_edition.student_jupyter_edition(fmt.load(path), BOOK,
                                                           docname(path))


EDITIONS = [("jupyter", p) for p in SOURCES] + [("student", p) for p in NOTEBOOKS]
MAKE = {"jupyter": jupyter, "student": student}


def edition_id(value):
    return value.name if hasattr(value, "name") else str(value)


def markdown(nb):
    return [fmt.source(c) for c in nb["cells"] if c["cell_type"] == "markdown"]


def without_comments(text):
    return re.sub(r"<!--.*?-->", "", text, flags=re.DOTALL)


MYST = {
    "directive fence": re.compile(r"^\s*(`{3,}|:{3,})\s*\{[\w:-]+\}", re.MULTILINE),
    "role": re.compile(r"\{[a-z][\w:-]*\}`"),
    "target line": re.compile(r"^\s*\([\w:.-]+\)=\s*$", re.MULTILINE),
    "directive option": re.compile(r"^\s*:(label|class|nonumber|name|numbered|alt|width|"
                                   r"align|header-rows|widths):", re.MULTILINE),
}


@pytest.mark.parametrize("kind,path", EDITIONS, ids=edition_id)
def test_no_myst_syntax_is_left_in_any_markdown_cell(kind, path):
    nb = MAKE[kind](path)
    for index, text in enumerate(markdown(nb)):
        visible = without_comments(text)  # the student edition's grader labels are comments
        for what, pattern in MYST.items():
            found = pattern.search(visible)
            assert found is None, f"{kind} {path.name}, markdown cell {index}: a {what}, " \
                                  f"{found.group(0)!r}"


def test_a_cell_without_an_id_is_named_with_the_fix():
    """Instructor 46: cells added by a script without ids made `make student` stop with a bare
    KeyError: 'id'."""
    path = NOTEBOOKS[0]
    nb = fmt.load(path)
    del nb["cells"][3]["id"]
    with pytest.raises(SystemExit, match=r"cell\(s\) \[3\] have no id .*nbconvert --to notebook"):
        student_jupyter_edition.student_jupyter_edition(nb, BOOK, docname(path))


def test_the_myst_patterns_find_what_the_sources_hold():
    """The patterns above are not vacuous: the sources are full of what they look for."""
    text = "\n".join(t for p in SOURCES for t in markdown(fmt.load(p)))
    for what, pattern in MYST.items():
        assert pattern.search(text), what


RAW = re.compile(r"\{(exercise|solution|solution-start|solution-end|prf:\w+|note|table|figure|"
                 r"list-table|admonition|cite:\w|ref|numref|doc|eq)\}|:label:|\)=\s*<")


@pytest.mark.parametrize("kind,path", EDITIONS, ids=edition_id)
def test_nbconvert_html_shows_no_raw_directive_text(kind, path):
    from nbconvert import HTMLExporter
    from nbformat import reads

    nb = MAKE[kind](path)
    # only the markdown cells are read: leaving the code cells out (their highlighting and
    # sanitising took nine tenths of the time) renders every markdown cell the same
    html, _ = HTMLExporter(template_name="classic", exclude_code_cell=True).from_notebook_node(
        reads(json.dumps(nb), as_version=4))
    cells = re.findall(r'<div class="text_cell_render[^"]*"[^>]*>(.*?)</div>\s*</div>', html,
                       re.DOTALL)
    assert len(cells) >= len([t for t in markdown(nb) if t.strip()]) // 2  # found the cells
    for cell in cells:
        shown = unescape(re.sub(r"<[^>]+>", "", without_comments(cell)))
        assert not RAW.search(shown), shown[:300]


@pytest.mark.parametrize("kind,path", EDITIONS, ids=edition_id)
def test_every_exercise_of_the_source_has_its_numbered_heading_in_order(kind, path):
    exercises = fmt.parse(fmt.load(path))
    text = "\n".join(markdown(MAKE[kind](path)))
    found = re.findall(r"^(?:<a id=\"[^\"]+\"></a>)?\*\*Exercise (\d+\.\d+)\*\*", text,
                       re.MULTILINE)  # the anchor, if any, starts the line
    assert found == [e.name for e in exercises]


@pytest.mark.parametrize("path", SOURCES, ids=edition_id)
def test_the_jupyter_edition_keeps_every_code_cell_and_output(path):
    source, edition = fmt.load(path), jupyter(path)
    code = [c for c in source["cells"] if c["cell_type"] == "code"]
    kept = [c for c in edition["cells"] if c["cell_type"] == "code" and not is_answer(c)]
    assert len(kept) == len(code)
    for original, copy in zip(code, kept, strict=True):
        # cleared: a check's (see below), and a folded solution's, whose stored output gave
        # the answer away to a reader who opened it or a static viewer (student 43)
        if "check" in original["metadata"].get("tags", []) or folded(copy):
            assert copy["outputs"] == [] and copy["execution_count"] is None
        else:
            assert copy["outputs"] == original["outputs"]
        folding = {"jupyter", "cellView", "tags"}  # what folds a solution (checked below)
        assert {k: v for k, v in copy["metadata"].items() if k not in folding} == \
            {k: v for k, v in original["metadata"].items() if k not in folding}
        tags = original["metadata"].get("tags", [])
        assert copy["metadata"].get("tags", []) == tags
        if fmt.source(original) != setup_cell_source():  # (its note: below)
            # a folded solution's code starts with the %%capture line its folded view shows,
            # and a line saying how to see its output (below)
            assert jupyter_edition.CAPTURED.sub("", fmt.source(copy)) == fmt.source(original)
    assert edition["metadata"] == source["metadata"]


def test_the_setup_cell_installs_from_the_repository_of_config_yml():
    for path in NOTEBOOKS:
        assert fmt.source(student(path)["cells"][0]) == setup_cell_source()
        # the Jupyter edition's also says where an answer goes (when there is an answer cell)
        first = fmt.source(jupyter(path)["cells"][0])
        assert first.replace(jupyter_edition.FIRST_CELL_NOTE, "") == setup_cell_source()
    fork = jupyter_edition.load_book(ROOT, repository="https://github.com/a-teacher/mha-fork",
                                     branch="spring")
    nb = jupyter_edition.convert_notebook(fmt.load(NOTEBOOKS[0]), fork, docname(NOTEBOOKS[0]))
    assert '"mha[lab] @ git+https://github.com/a-teacher/mha-fork@spring"' in \
        fmt.source(nb["cells"][0])


def test_references_and_citations_read_as_the_book_says_them():
    """Chapter 4's text, as a student reads it: numbers, titles and links to the book."""
    text = "\n".join(markdown(jupyter(ROOT / "notebooks" / "04_multi_head_attention.ipynb")))
    assert "[Lemma 4.1](#lem-04-two-views)" in text  # in this notebook: an anchor in it
    assert "[Fig. 4.1](#fig-04-flow)" in text
    assert "[Twelve real heads](#sec-04-real-heads)" in text
    assert '<a id="lem-04-two-views"></a>**Lemma 4.1** (The two views' in text
    assert '## 4.10. Twelve real heads <a id="sec-04-real-heads"></a>' in text
    assert f"[Exercise 3.4]({BOOK.base_url}notebooks/03_attention_with_weights.html#ex-03-4)" \
        in text
    assert f"([Vaswani et al., 2017]({BOOK.base_url}book/bibliography.html))" in text
    assert ('<a id="lem-04-h-heads"></a>**Lemma 4.2** (h heads serve at most h look-ups)'
            in text)
    assert "*Proof.* " in text
    assert BOOK.base_url == "https://mha-course.github.io/multi-head-attention/"


def test_the_published_book_is_the_one_config_yml_names():
    """Links to other pages go to html.baseurl, else to the repository's GitHub Pages site: a
    fork's edition links to the fork's book."""
    fork = {"repository": {"url": "https://github.com/A-Teacher/mha-fork.git"}}
    assert jupyter_edition.published_url(fork) == "https://a-teacher.github.io/mha-fork/"
    own = {**fork, "html": {"baseurl": "https://teach.example.edu/mha"}}
    assert jupyter_edition.published_url(own) == "https://teach.example.edu/mha/"
    with pytest.raises(ValueError, match="html.baseurl"):
        jupyter_edition.published_url({"repository": {"url": "https://gitlab.com/a/b"}})


LOCAL_LINK = re.compile(r"\]\(#([^)\s]+)\)")
ANCHOR = re.compile(r'<a id="([^"]+)"></a>')


@pytest.mark.parametrize("kind,path", EDITIONS, ids=edition_id)
def test_references_to_the_same_notebook_are_anchors_in_it(kind, path):
    """Offline, or in a fork not yet published, a link within the notebook still works: it
    names an anchor the notebook has, and no link goes to this notebook's page of the book."""
    text = "\n".join(markdown(MAKE[kind](path)))
    anchors = ANCHOR.findall(text)
    assert len(anchors) == len(set(anchors)), "an anchor is defined twice"
    links = LOCAL_LINK.findall(text)
    assert set(links) <= set(anchors), sorted(set(links) - set(anchors))
    assert not re.search(re.escape(BOOK.url(docname(path))) + r"[#)]", text)


@pytest.mark.parametrize("kind,path", EDITIONS, ids=edition_id)
def test_an_anchor_sits_at_the_top_of_what_it_names(kind, path):
    """JupyterLab scrolls a link's anchor to the top of the view: it must come before what it
    names. A lemma's, exercise's or table's anchor starts its title line (after the title, the
    link put the statement's first lines above the view), a heading's sits in the heading, and
    a figure's is alone in a cell right above the code cell that draws the picture (in the
    caption, under the picture, the link left the picture above the view)."""
    cells = MAKE[kind](path)["cells"]
    figures = 0
    for index, cell in enumerate(cells):
        if cell["cell_type"] != "markdown":
            continue
        for line in fmt.source(cell).split("\n"):
            for match in ANCHOR.finditer(line):
                before = line[:match.start()]
                assert not before.strip() or (re.match(r"#+ ", line) and not line[match.end():]
                                              .strip()), (
                    f"{path.name}: the anchor {match.group(1)} comes after {before!r}: a link "
                    "puts that above the view")
        label = cell.get("metadata", {}).get("tags", []) == ["anchor"] and ANCHOR.fullmatch(
            fmt.source(cell).strip())
        if label:
            drawn = cells[index + 1].get("metadata", {}).get("mystnb", {}).get("figure", {})
            assert drawn.get("name") == label.group(1), (
                f"{path.name}: the anchor {label.group(1)} is not above the cell that draws it")
            figures += 1
    # a figure drawn by the notebook, or by a folded solution (its stored picture dropped)
    drawn = [c for c in cells if c["cell_type"] == "code"
             and (c.get("outputs") or c.get("metadata", {}).get("jupyter", {}).get("source_hidden"))
             and c.get("metadata", {}).get("mystnb", {}).get("figure", {}).get("name")]
    assert figures == len(drawn), f"{path.name}: {len(drawn)} named figures, {figures} anchors"


def test_every_chapter_links_within_itself():
    """Not vacuous: the chapters refer to their own lemmas, figures and sections."""
    for path in NOTEBOOKS:
        assert LOCAL_LINK.search("\n".join(markdown(jupyter(path)))), path.name


# -- solutions folded, as the book folds them


def folded(cell):
    return cell.get("metadata", {}).get("jupyter", {})


def is_answer(cell):
    return "answer" in cell.get("metadata", {}).get("tags", [])


SUMMARY = re.compile(r"\A<details><summary>Solution to Exercise (\d+\.\d+)(, [\w' ]+)? "
                     r"\(click to open\)</summary>\n\n(.+)\n\n</details>\Z", re.DOTALL)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=edition_id)
def test_the_jupyter_edition_folds_every_solution_and_nothing_else(path):
    """Every cell of a solution is folded: code with its outputs collapsed behind a first line
    that gives nothing away (a collapsed cell in JupyterLab shows its first line), text in a
    closed <details> block whose summary names the exercise; no other cell is folded."""
    source, edition = fmt.load(path), jupyter(path)
    solution_ids = {source["cells"][i]["id"] for e in fmt.parse(source) for i in e.solution}
    by_id = {c.get("id"): c for c in edition["cells"]}
    for cell_id in solution_ids & set(by_id):
        cell = by_id[cell_id]
        if cell["cell_type"] == "code":
            assert folded(cell) == {"source_hidden": True, "outputs_hidden": True}, cell_id
            assert cell["metadata"]["cellView"] == "form", cell_id  # Colab's folding
            assert jupyter_edition.CAPTURED.match(fmt.source(cell)), cell_id
        else:
            # not collapsed: JupyterLab opens a collapsed markdown cell when it runs (Run All
            # showed every written solution); a <details> block stays closed
            assert not folded(cell), cell_id
            assert SUMMARY.match(fmt.source(cell)), fmt.source(cell)[:200]
    captions_of_solutions = {f"{i}-caption" for i in solution_ids}
    others = [c.get("id") for c in edition["cells"] if folded(c)
              and c.get("id") not in solution_ids]
    assert not others, f"folded outside a solution: {others}"
    details = [c.get("id") for c in edition["cells"] if "<details>" in fmt.source(c)]
    assert set(details) <= solution_ids | captions_of_solutions, "a <details> outside a solution"
    # every exercise's solution is named, once, in order (a summary, or a heading for a
    # solution that is only code)
    named = []
    for text in markdown(edition):
        found = SUMMARY.match(text)
        if found and not found.group(2):
            named.append(found.group(1))
        named += re.findall(r"^\*\*Solution to Exercise (\d+\.\d+)", text, re.MULTILINE)
    assert named == [e.name for e in fmt.parse(source)]


def test_a_folded_solution_previews_a_plain_line_for_the_reader():
    """JupyterLab shows a collapsed cell as the raw first line of its source. Chapter 2's prose
    solution began with maths (shown as raw LaTeX), then with an HTML comment (shown as
    markup), and the second code cell of Exercise 2.3 with "### BEGIN SOLUTION". Every folded
    code cell now previews its %%capture line, which names only the variable its output goes
    to (a cell magic must come first); the next line says it is the folded solution and how
    to see its output (the text of a solution is in a closed <details> block, which shows only
    its summary)."""
    path = ROOT / "notebooks" / "02_diagonal_problem.ipynb"
    cells = [c for c in jupyter(path)["cells"] if folded(c)]
    assert {c["cell_type"] for c in cells} == {"code"}
    previews = [fmt.source(c).split("\n")[0] for c in cells]
    assert previews == ["%%capture solution_2_2_output", "%%capture solution_2_3_output",
                        "%%capture solution_2_3_output_2", "%%capture solution_2_4_output"]
    for cell in cells:
        first, second = fmt.source(cell).split("\n")[:2]
        variable = first.removeprefix("%%capture ")
        assert second == (f"# Solution to Exercise {variable.split('_')[1]}."
                          f"{variable.split('_')[2]}, folded: run {variable}.show() to see "
                          "its output.")
        assert len(first) <= 79 and len(second) <= 90  # one line in a narrow window
    # the issue's code cell: its source started with the grading marker
    third = [c for c in cells if fmt.source(c).split("\n")[2] == "### BEGIN SOLUTION"]
    assert third, "Exercise 2.3's second cell starts with its marker no more: find another"
    # book/how_to_use.md says what the folded cell shows
    how_to = " ".join((ROOT / "book" / "how_to_use.md").read_text(encoding="utf-8").split())
    assert "%%capture solution_N_K_output" in how_to and ".show()" in how_to


def test_every_folded_solution_cell_hides_its_output_when_it_runs():
    """Run All runs the folded solutions (later cells use what they define), and JupyterLab
    shows a collapsed cell's outputs again when it runs: Exercise 9.1's "8 key/value heads: 10
    GiB / 64 key/value heads: 80 GiB", 1.6's plot and 2.3's failure rates showed. Each folded
    solution code cell, in every chapter, is now run by IPython as a %%capture cell magic into
    a variable of its own (what the cell prints and draws goes there, not to the screen), and
    the line under it names that variable's .show()."""
    from IPython.core.inputtransformer2 import TransformerManager

    transform = TransformerManager().transform_cell
    variables = []
    for path in NOTEBOOKS:
        source, edition = fmt.load(path), jupyter(path)
        solution_ids = {source["cells"][i]["id"] for e in fmt.parse(source) for i in e.code}
        cells = [c for c in edition["cells"] if c.get("id") in solution_ids]
        assert len(cells) == len(solution_ids)
        for cell in cells:
            text = fmt.source(cell)
            first, second, body = text.split("\n", 2)
            variable = first.removeprefix("%%capture ")
            assert variable.isidentifier(), first
            # what IPython runs: the capture magic with the variable, around the whole cell
            assert transform(text) == (f"get_ipython().run_cell_magic('capture', {variable!r}, "
                                       f"{(second + chr(10) + body + chr(10))!r})\n"), text[:200]
            assert f"{variable}.show()" in second
            assert cell["outputs"] == []  # it prints nothing, and stores nothing to open
            variables.append(variable)
    assert len(set(variables)) == len(variables), "two cells capture into the same variable"


def test_a_folded_solution_text_renders_its_markdown_and_maths_inside_details():
    """The blank lines inside <details> end the HTML block, so the solution's markdown is parsed
    as markdown (CommonMark, as JupyterLab's renderer and nbconvert do) and its maths is left
    for MathJax, not swallowed as raw HTML."""
    from markdown_it import MarkdownIt

    path = ROOT / "notebooks" / "01_attention_recap.ipynb"
    texts = [t for t in markdown(jupyter(path)) if t.startswith("<details>")]
    assert texts
    for text in texts:
        html = MarkdownIt("commonmark").render(text)
        assert html.startswith("<details><summary>Solution to Exercise 1.")
        assert "<p>" in html and html.rstrip().endswith("</details>")
    exercise_2 = next(t for t in texts if "Exercise 1.2 (click" in t)
    html = MarkdownIt("commonmark").render(exercise_2)
    assert "<p>Subtract each row" in html and "$e^0 = 1$" in html


# -- where a student of the Jupyter edition writes an answer


@pytest.mark.parametrize("path", NOTEBOOKS, ids=edition_id)
def test_each_solution_s_code_is_followed_by_an_answer_cell_before_its_check(path):
    """Run All ran each folded solution after the student's answer written under the prompt,
    so the check called the course's solution and said "correct" for a wrong answer. Now an
    answer cell follows the solution's last cell (a figure's caption included), before the
    check; the checks' stored outputs are gone (they said "correct" before anything was
    written); the edition's first cell says where answers go."""
    source, edition = fmt.load(path), jupyter(path)
    ids = [c.get("id") for c in edition["cells"]]
    with_code = [e for e in fmt.parse(source) if e.code]
    for exercise in with_code:
        answer = ids.index(f"answer-{exercise.label}")
        cell = edition["cells"][answer]
        assert cell["cell_type"] == "code" and cell["outputs"] == []
        text = fmt.source(cell)
        assert text.startswith(f"# Your answer to Exercise {exercise.name} goes here")
        # two comment lines (then the stubs of what the check calls: below), each short enough
        # to read without scrolling (one line of ~135 characters before)
        comments = text.splitlines()[:2]
        assert all(line.startswith("# ") and len(line) <= 90 for line in comments)
        assert "runs after the course's folded solution" in comments[1]
        assert all(not line.startswith("# ") for line in text.splitlines()[2:3])
        solution = [ids.index(source["cells"][i]["id"]) for i in exercise.solution
                    if source["cells"][i]["id"] in ids]
        checks = [ids.index(source["cells"][i]["id"]) for i in exercise.checks]
        assert max(solution) < answer < min(checks, default=len(ids))
        assert all(c.get("id", "").endswith("-caption") for c in edition["cells"][
            max(solution) + 1:answer]), "only the solution's figure caption between them"
        assert ("the check below" in text) == bool(checks)
        for i in checks:
            assert edition["cells"][i]["outputs"] == [], edition["cells"][i]["id"]
    answers = [i for i in ids if i.startswith("answer-")]
    assert len(answers) == len(with_code)
    assert (jupyter_edition.FIRST_CELL_NOTE in fmt.source(edition["cells"][0])) == bool(answers)
    # the original had stored check outputs: this is what clearing them is about
    stored = json.loads(path.read_text(encoding="utf-8"))["cells"]
    assert any(stored[i].get("outputs") for e in with_code for i in e.checks)


def check_calls(text):
    """The names a check cell hands to its check: ``_ = mha.checks.ch01.f(stable_softmax)``."""
    return re.findall(r"\bmha\.checks\.\w+\.\w+\(([A-Za-z_]\w*)\)", text)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=edition_id)
def test_an_untouched_answer_cell_stubs_what_its_check_calls(path):
    """A fresh Run All of chapter 1 said "✓ correct" to all four checks with no work done: the
    answer cell, left empty (or defining a misspelt name), kept the folded solution's function,
    which the check called. Now the answer cell defines every name its check calls as the
    student edition's stub (the def line, then raise NotImplementedError(), which the check
    reports as "not done yet"); no later cell of the chapter uses those names (it would meet
    the stub, not the solution)."""
    source, edition = fmt.load(path), jupyter(path)
    stubbed = "\n".join(
        fmt.source(c) for c in student(path)["cells"] if "solution" in c["metadata"].get(
            "tags", []))
    ids = [c.get("id") for c in edition["cells"]]
    cells = source["cells"]
    for exercise in [e for e in fmt.parse(source) if e.checks]:
        called = {n for i in exercise.checks for n in check_calls(fmt.source(cells[i]))}
        assert called, f"Exercise {exercise.name}: no name found in its check cells"
        answer = fmt.source(edition["cells"][ids.index(f"answer-{exercise.label}")])
        defs = {node.name: node for node in ast.parse(answer).body
                if isinstance(node, ast.FunctionDef)}
        assert set(defs) == called, (exercise.name, answer)
        lines = answer.split("\n")
        for name, node in defs.items():
            assert len(node.body) == 1 and ast.unparse(node.body[0]) == \
                "raise NotImplementedError()", (exercise.name, answer)
            # as the student edition stubs it (its comment line included)
            stub = "\n".join(lines[node.lineno - 1:node.end_lineno])
            assert "    # YOUR CODE HERE\n" in stub and stub in stubbed, stub
            later = [c.get("id") for i, c in enumerate(cells)
                     if i > max(exercise.checks) and c["cell_type"] == "code"
                     and re.search(rf"(?<![\w.]){name}\b", fmt.source(c))]
            assert not later, f"{name} is stubbed, but cells {later} use it"


def test_run_all_checks_the_answer_written_in_the_answer_cell(capsys):
    """The student's scenario (Exercise 1.2, a softmax without the max subtracted), run top to
    bottom as Run All runs it: the check now sees the student's answer and says it is wrong;
    with the answer cell left as it is, its stub makes the check say "not done yet" (it said
    "correct" to the course's solution); a right answer in place of the stub's raise is
    correct. (The folded solution runs here without its %%capture line, in this process.)"""
    path = ROOT / "notebooks" / "01_attention_recap.ipynb"
    source, edition = fmt.load(path), jupyter(path)
    exercise = next(e for e in fmt.parse(source) if e.name == "1.2")
    ids = [c.get("id") for c in edition["cells"]]
    answer = ids.index(f"answer-{exercise.label}")
    check = ids.index(source["cells"][exercise.checks[0]]["id"])
    wrong = ("def stable_softmax(scores, temperature):\n"
             "    e = torch.exp(scores)\n"
             "    return e / e.sum(dim=-1, keepdim=True)\n")
    imports = next(fmt.source(c) for c in edition["cells"] if "import mha" in fmt.source(c))

    def run_all(answer_text):
        namespace = {}
        exec(imports, namespace)  # noqa: S102 - the chapter's own code
        first = ids.index(source["cells"][exercise.solution[0]]["id"])
        for i in range(first, check + 1):
            cell = edition["cells"][i]
            if cell["cell_type"] == "code":
                text = answer_text if i == answer else fmt.source(cell)
                exec(jupyter_edition.CAPTURED.sub("", text), namespace)  # noqa: S102
        return capsys.readouterr().out, namespace

    said, namespace = run_all(fmt.source(edition["cells"][answer]) + "\n" + wrong)
    assert "✗ Exercise 1.2" in said, said
    # an independent reference: torch's own softmax of scores / T, against the function run
    import torch

    scores = torch.tensor([[1.0, 2.0, 3.0]])
    assert not torch.allclose(namespace["stable_softmax"](scores, 0.5),
                              torch.softmax(scores / 0.5, dim=-1))
    said, namespace = run_all(fmt.source(edition["cells"][answer]))
    assert "✗ Exercise 1.2" in said and "not done yet" in said, said
    with pytest.raises(NotImplementedError):
        namespace["stable_softmax"](scores, 0.5)
    right = ("e = torch.exp((s := scores / temperature) - s.amax(-1, keepdim=True))\n"
             "    return e / e.sum(-1, keepdim=True)")
    said, namespace = run_all(fmt.source(edition["cells"][answer]).replace(
        "raise NotImplementedError()", right))
    assert "✓ Exercise 1.2" in said, said
    torch.testing.assert_close(namespace["stable_softmax"](scores, 0.5),
                               torch.softmax(scores / 0.5, dim=-1))


@pytest.mark.chapter(2)
def test_run_all_of_a_fresh_edition_shows_no_solution_output_and_passes_no_check():
    """Student 42's Run All of a fresh Jupyter edition, in a Jupyter kernel (chapter 2, the
    cheapest chapter to run: about 8 s of CPU): it showed Exercise 2.3's failure rates (the
    folded solution's output) and said "✓ correct" to every check with nothing written. Now
    no cell raises, no folded solution shows an output, every check says "not done yet", and
    the output a solution printed is in its %%capture variable, for .show()."""
    import nbformat
    from nbclient import NotebookClient

    path = ROOT / "notebooks" / "02_diagonal_problem.ipynb"
    source, edition = fmt.load(path), jupyter(path)
    exercises = fmt.parse(source)
    solution_ids = {source["cells"][i]["id"] for e in exercises for i in e.code}
    check_ids = {source["cells"][i]["id"] for e in exercises for i in e.checks}
    printed = next(source["cells"][i] for e in exercises for i in e.code
                   if source["cells"][i]["outputs"])  # Exercise 2.3's failure rates
    shown = next(c for c in edition["cells"] if c.get("id") == printed["id"])
    variable = fmt.source(shown).split("\n")[0].removeprefix("%%capture ")
    nb = nbformat.from_dict(json.loads(json.dumps(edition)))  # a copy
    for cell in nb.cells:
        cell.source = fmt.source(cell)
    # what a student who opens that solution and runs its .show() gets to see
    nb.cells.append(nbformat.v4.new_code_cell(f"print({variable}.stdout, end='')"))
    NotebookClient(nb, timeout=300, kernel_name="python3", allow_errors=True,
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    errors = [(c.get("id"), o["ename"]) for c in nb.cells if c.cell_type == "code"
              for o in c.outputs if o["output_type"] == "error"]
    assert not errors
    assert {c.get("id"): c.outputs for c in nb.cells if c.get("id") in solution_ids} == {
        i: [] for i in solution_ids}, "a folded solution showed its output"
    said = {c.get("id"): "".join(o.get("text", "") for o in c.outputs) for c in nb.cells
            if c.get("id") in check_ids}
    assert len(said) == len(check_ids) >= 3
    assert all("not done yet" in text and "✓" not in text for text in said.values()), said
    stored = "".join("".join(o["text"]) for o in printed["outputs"]
                     if o["output_type"] == "stream")
    assert "".join(o.get("text", "") for o in nb.cells[-1].outputs) == stored


@pytest.mark.parametrize("path", NOTEBOOKS, ids=edition_id)
def test_the_student_edition_folds_nothing(path):
    """Its solutions are stubs a student fills in."""
    assert not [c.get("id") for c in student(path)["cells"]
                if folded(c) or "cellView" in c.get("metadata", {})
                or "<details>" in fmt.source(c) or fmt.source(c).startswith("# Your answer to")]


# -- the student edition


def test_every_question_in_words_gets_an_answer_cell():
    named_in_the_issue = {"4.5", "9.2", "9.3"}
    answered = set()
    for path in NOTEBOOKS:
        nb = fmt.load(path)
        edition = student(path)
        ids = [c.get("id") for c in edition["cells"]]
        for exercise in fmt.parse(nb):
            prompt = fmt.source(nb["cells"][exercise.prompt]).split("\n", 2)[2]  # the text
            asks = exercise.kind == "prose" or "?" in re.sub(r"`[^`\n]*`|\$[^$]*\$", "", prompt)
            has = f"answer-{exercise.label}" in ids
            assert has or not asks, f"{exercise.name} asks a question but has no answer cell"
            if has:
                answered.add(exercise.name)
                answer = ids.index(f"answer-{exercise.label}")
                after = exercise.checks or exercise.code or [exercise.prompt]
                # the answer comes after the exercise's own cells, before the next exercise
                assert all(ids.index(nb["cells"][i]["id"]) < answer for i in after
                           if nb["cells"][i]["id"] in ids)
    assert named_in_the_issue <= answered


def test_the_student_edition_grades_like_the_myst_one():
    """The grader finds each exercise by its label: the same plan as for the MyST edition."""
    from mha_grade.assignments import load_assignment
    from mha_grade.run import plan
    from mha_grade.submissions import labels, read_notebook

    for path in NOTEBOOKS:
        assignment = load_assignment(path)
        plain = read_notebook(json.dumps(student(path)).encode())
        myst = read_notebook(json.dumps(student_edition.student_edition(
            fmt.load(path))).encode())
        assert labels(plain) == labels(myst) != set()
        assert plan(plain, assignment, with_stubs=True) == \
            plan(myst, assignment, with_stubs=True)


def test_make_jupyter_opens_the_edition_without_jupyterlab_myst():
    """jupyterlab-myst 2.7.0 (in the course's environment) leaves the maths inside a folded
    solution's <details> as raw TeX; JupyterLab's own renderer typesets it (checked in headless
    chromium). `make jupyter` adds a config directory that disables it to the config path."""
    import subprocess

    dry = subprocess.run(["make", "-n", "jupyter"], cwd=ROOT, capture_output=True, text=True,
                         check=True).stdout
    assert 'JUPYTER_CONFIG_PATH="' + str(ROOT / "tools" / "jupyter_edition_lab") in dry
    assert re.search(r"JUPYTER_CONFIG_PATH=.*\\\n\s*\S*jupyter lab _build/jupyter/notebooks/", dry)
    config = ROOT / "tools" / "jupyter_edition_lab" / "labconfig" / "page_config.json"
    assert json.loads(config.read_text(encoding="utf-8")) == {
        "disabledExtensions": {"jupyterlab-myst": True}}


# -- writing it where students work (`make jupyter` opens _build/jupyter/notebooks/)


def test_writing_the_edition_again_keeps_a_notebook_the_student_changed(tmp_path, capsys):
    """`make jupyter` run again wrote every notebook over the student's edited copy. Now a
    notebook changed since it was written (or never written by the tool) is kept and named,
    with how to get a fresh copy; an unchanged one is written anew (a newer edition)."""
    first, second = NOTEBOOKS[0], NOTEBOOKS[1]
    run = [str(first), str(second), "--out", str(tmp_path)]
    written = {p: tmp_path / "notebooks" / p.name for p in (first, second)}
    edition = {p: jupyter_edition.serialize(jupyter(p)) for p in (first, second)}
    assert jupyter_edition.main(run) == 0
    assert all(written[p].read_text(encoding="utf-8") == edition[p] for p in written)

    # the student works in the first; the second is an older edition nobody touched
    nb = json.loads(edition[first])
    nb["cells"][1]["source"] += "\n\nMy notes."
    mine = json.dumps(nb, indent=1)
    written[first].write_text(mine, encoding="utf-8")
    older = json.loads(edition[second])
    older["cells"][1]["source"] += " (an older edition)"
    jupyter_edition.write_keeping_changes({f"notebooks/{second.name}": older}, tmp_path)
    capsys.readouterr()
    assert jupyter_edition.main(run) == 0
    said = capsys.readouterr().out
    assert written[first].read_text(encoding="utf-8") == mine
    assert written[second].read_text(encoding="utf-8") == edition[second]
    assert f"kept {written[first]}" in said and "fresh copy" in said and "delete it" in said
    assert second.name not in said.replace("notebook(s)", "")

    # and again: still kept (the record is not updated to the student's bytes)
    assert jupyter_edition.main(run) == 0
    assert written[first].read_text(encoding="utf-8") == mine
    # saved by JupyterLab without a change (its own layout: sources as lists of lines): not the
    # student's work, so written anew
    import nbformat

    relaid = nbformat.writes(nbformat.reads(edition[second], as_version=4))
    assert relaid != edition[second]
    written[second].write_text(relaid, encoding="utf-8")
    capsys.readouterr()
    assert jupyter_edition.main(run) == 0
    assert written[second].read_text(encoding="utf-8") == edition[second]
    assert f"kept {written[second]}" not in capsys.readouterr().out
    # deleted, it comes back fresh
    written[first].unlink()
    assert jupyter_edition.main(run) == 0
    assert written[first].read_text(encoding="utf-8") == edition[first]

    # a notebook the tool never wrote (an older _build without the record) is kept too
    (tmp_path / jupyter_edition.RECORD).unlink()
    written[second].write_text(mine, encoding="utf-8")
    capsys.readouterr()
    assert jupyter_edition.main(run) == 0
    assert written[second].read_text(encoding="utf-8") == mine
    assert f"kept {written[second]}" in capsys.readouterr().out
    assert written[first].read_text(encoding="utf-8") == edition[first]  # same bytes: fine
    assert not list(tmp_path.rglob("*.writing"))


def test_a_notebook_jupyterlab_only_opened_and_saved_is_not_kept(tmp_path, capsys):
    """JupyterLab's save and autosave of a chapter the student only opened rewrite the kernel's
    display name and add ``collapsed``/``jupyter`` marks to cells; running cells changes their
    outputs. None of that is the student's work, so the next run writes a fresh edition; a
    changed source, or a cell turned into another type, is the student's and is kept."""
    import nbformat

    path = NOTEBOOKS[2]
    run = [str(path), "--out", str(tmp_path)]
    written = tmp_path / "notebooks" / path.name
    assert jupyter_edition.main(run) == 0
    fresh = written.read_text(encoding="utf-8")

    def as_jupyterlab_saves_it(change=None):
        nb = nbformat.reads(fresh, as_version=4)
        nb.metadata.kernelspec.display_name = "Python 3 (ipykernel)"  # what lab_save.py saw
        for cell in nb.cells:
            if cell.cell_type == "code" and cell.metadata.get("jupyter", {}).get("source_hidden"):
                cell.metadata["collapsed"] = True  # JupyterLab's mark of outputs_hidden
            elif cell.cell_type == "markdown":
                cell.metadata["jupyter"] = {"source_hidden": False}
        code = next(c for c in nb.cells if c.cell_type == "code" and c.outputs)
        code.outputs, code.execution_count = [], 7  # run, then saved
        if change:
            change(nb)
        text = nbformat.writes(nb)
        assert text != fresh
        written.write_text(text, encoding="utf-8")
        capsys.readouterr()
        assert jupyter_edition.main(run) == 0
        return capsys.readouterr().out

    said = as_jupyterlab_saves_it()
    assert "kept" not in said and written.read_text(encoding="utf-8") == fresh

    def write_something(nb):
        nb.cells[-1].source += "\n\nMy notes."

    def turn_a_cell_into_markdown(nb):
        cell = next(c for c in nb.cells if c.cell_type == "code" and c.source.strip())
        nb.cells[nb.cells.index(cell)] = nbformat.v4.new_markdown_cell(cell.source)

    for change in (write_something, turn_a_cell_into_markdown):
        said = as_jupyterlab_saves_it(change)
        assert f"kept {written}" in said, change.__name__
        assert written.read_text(encoding="utf-8") != fresh
        written.unlink()
        assert jupyter_edition.main(run) == 0  # a fresh copy, for the next case

    # a record from before (a digest of the whole notebook) still recognises its own file
    record = tmp_path / jupyter_edition.RECORD
    relative = f"notebooks/{path.name}"
    older = json.loads(fresh)
    older["cells"][1]["source"] += " (an older edition)"
    written.write_text(jupyter_edition.serialize(older), encoding="utf-8")
    record.write_text(json.dumps({relative: jupyter_edition.digest(
        jupyter_edition.serialize(older), whole=True)}), encoding="utf-8")
    capsys.readouterr()
    assert jupyter_edition.main(run) == 0
    assert "kept" not in capsys.readouterr().out
    assert written.read_text(encoding="utf-8") == fresh
    assert json.loads(record.read_text(encoding="utf-8"))[relative].startswith("cells:")


def test_a_notebook_that_cannot_be_converted_writes_nothing(tmp_path, monkeypatch):
    """Every notebook is converted before any is written: no half-written edition."""
    convert = jupyter_edition.convert_notebook

    def failing(nb, book, docname, **kwargs):
        if docname.endswith(NOTEBOOKS[1].stem):
            raise ValueError(f"{docname}: no plain-markdown form for the role {{unknown}}")
        return convert(nb, book, docname, **kwargs)

    monkeypatch.setattr(jupyter_edition, "convert_notebook", failing)
    with pytest.raises(ValueError, match="unknown"):
        jupyter_edition.main([str(NOTEBOOKS[0]), str(NOTEBOOKS[1]), "--out", str(tmp_path)])
    assert not list(tmp_path.iterdir())


def test_the_publish_script_puts_the_edition_on_its_branch_with_the_environment(tmp_path):
    """What .github/workflows/pages.yml runs: the branch Colab and Binder open."""
    import subprocess

    edition = tmp_path / "edition"
    first = NOTEBOOKS[0]
    jupyter_edition.write(jupyter(first), edition / "notebooks" / first.name)
    remote = tmp_path / "remote.git"
    subprocess.run(["git", "init", "-q", "--bare", str(remote)], check=True)
    subprocess.run(["bash", str(ROOT / "tools" / "publish_edition.sh"), str(edition),
                    str(remote), "jupyter"], cwd=ROOT, check=True, capture_output=True)

    def show(path):
        return subprocess.run(["git", "--git-dir", str(remote), "show", f"jupyter:{path}"],
                              check=True, capture_output=True, text=True).stdout

    published = json.loads(show(f"notebooks/{first.name}"))
    assert published == jupyter(first)
    files = subprocess.run(["git", "--git-dir", str(remote), "ls-tree", "-r", "--name-only",
                            "jupyter"], check=True, capture_output=True, text=True).stdout
    for needed in ["binder/requirements.txt", "pyproject.toml", "src/mha/__init__.py",
                   *(f"notebooks/{p.name}" for p in NOTEBOOKS)]:
        assert needed in files.split("\n"), needed


@pytest.mark.parametrize("path", NOTEBOOKS, ids=edition_id)
def test_the_launch_buttons_open_the_jupyter_edition(path):
    html = built(path)
    repo = BOOK.repository.removeprefix("https://github.com/")
    branch = jupyter_edition.read_config(ROOT)["sphinx"]["config"]["jupyter_edition_branch"]
    notebook = f"{docname(path)}.ipynb"
    links = set(re.findall(r'href="(https://(?:colab|mybinder)[^"]*)"', html))
    assert links == {
        f"https://colab.research.google.com/github/{repo}/blob/{branch}/{notebook}",
        f"https://mybinder.org/v2/gh/{repo}/{branch}?urlpath=lab/tree/{notebook}"}


# -- against the built book (make test builds it first)


def built(path):
    page = HTML / f"{docname(path)}.html"
    if not page.exists():
        pytest.skip("the book is not built (make book)")
    return page.read_text(encoding="utf-8")


def plain(html):
    return " ".join(unescape(re.sub(r"<[^>]+>", "", html)).split())


NUMBERED = re.compile(r"^(?:<a id=\"[^\"]+\"></a>)?"  # the anchor, if any, starts the line
                      r"\*\*(Exercise|Lemma|Theorem|Fig\.|Table) (\d+(?:\.\d+)*)\.?\*\*",
                      re.MULTILINE)


@pytest.mark.parametrize("path", SOURCES, ids=edition_id)
def test_the_download_button_serves_the_jupyter_edition(path):
    """The ".ipynb" download served the MyST source (_sources/, a copy of notebooks/): every
    solution open, its markup raw. book/_ext/jupyter_download.py writes the edition there."""
    html = built(path)
    button = re.search(r'<a href="([^"]+\.ipynb)"[^>]*\bbtn-download-source-button\b[^>]*>',
                       html, re.DOTALL)
    assert button, "no download button"
    served = (HTML / docname(path)).parent / button.group(1)
    assert served.resolve().is_relative_to(HTML / "_sources"), button.group(1)
    nb = json.loads(served.read_text(encoding="utf-8"))
    fresh = nb == jupyter(path)  # not asserted directly: pytest would print both notebooks
    assert fresh, (f"the download button of {docname(path)} serves another Jupyter edition "
                   f"than {path.name} makes now: the built book is older than the notebook: "
                   f"run make book (make chapter does)")
    # what the issue saw, directly: no MyST left, the solutions folded
    assert nb != fmt.load(path)
    for text in markdown(nb):
        assert not any(pattern.search(text) for pattern in MYST.values()), text[:200]
    if path in NOTEBOOKS and fmt.parse(fmt.load(path)):  # a chapter with exercises
        assert any(folded(c) for c in nb["cells"])
    assert "Jupyter edition" in re.search(r'btn-download-source-button[^>]*title="([^"]*)"',
                                          html, re.DOTALL).group(1)
    assert "download button" in (ROOT / "book" / "how_to_use.md").read_text(encoding="utf-8")


@pytest.mark.parametrize("path", SOURCES, ids=edition_id)
def test_numbers_are_the_ones_the_built_book_shows(path):
    html = built(path)
    shown = [plain(m) for m in re.findall(r'<span class="caption-number">(.*?)</span>', html)]
    shown = [s for s in shown if re.search(r"\d", s)]  # ":nonumber:" lemmas have none
    text = "\n".join(markdown(jupyter(path)))
    ours = [f"{kind} {number}" for kind, number in NUMBERED.findall(text)]
    assert ours == shown
    headings = [plain(m).split(" ")[0] for m in re.findall(
        r'<h[1-6]><span class="section-number">(.*?)</span>', html)]
    our_headings = re.findall(r"^#+ (\d+(?:\.\d+)*\.) ", text, re.MULTILINE)
    assert our_headings == headings


@pytest.mark.parametrize("path", SOURCES, ids=edition_id)
def test_every_link_to_the_book_names_an_anchor_the_book_has_and_the_words_it_shows(path):
    here = built(path)
    text = "\n".join(markdown(jupyter(path)))
    here_page = f"{docname(path)}.html"
    links = re.findall(r"\[([^\]]+)\]\((" + re.escape(BOOK.base_url) + r"[^)]*|#[^)\s]+)\)", text)
    assert links
    for shown, url in links:
        # an anchor in the notebook stands for the same anchor of this page of the book
        url = BOOK.base_url + here_page + url if url.startswith("#") else url
        page, _, anchor = url[len(BOOK.base_url):].partition("#")
        target = HTML / page
        assert target.exists(), url
        html = target.read_text(encoding="utf-8")
        if anchor:
            assert f'id="{anchor}"' in html, url
            # the book's own link to that anchor, where this page has one, shows the same words
            # (sphinx-proof's links have no class; an explicit text is the author's)
            for theirs in re.findall(r'href="[^"]*#' + re.escape(anchor) + r'"[^>]*>(.*?)</a>',
                                     here, re.DOTALL):
                numbered = re.compile(r"(Exercise|Fig\.|Table|Lemma|Theorem) [\d.]*\d")
                ours, words = numbered.match(shown), numbered.match(plain(theirs))
                if ours and words:
                    assert words.group(0) == ours.group(0), (url, words.group(0), shown)


@pytest.mark.parametrize("path", SOURCES, ids=edition_id)
def test_citations_name_the_authors_and_years_the_book_shows(path):
    html = built(path)
    book_says = set()
    for cite in re.findall(r'<span class="bibtex-citation"[^>]*>(.*?)</span>', html, re.DOTALL):
        book_says.update(re.sub(r"[\[\]]", "", plain(a)) for a in
                         re.findall(r"<a [^>]*>(.*?)</a>", cite, re.DOTALL))
        textual = re.match(r"(.*?)\s*\[", plain(cite))
        if textual and textual.group(1):
            book_says.add(textual.group(1))
    text = "\n".join(markdown(jupyter(path)))
    cited = re.findall(r"\[([^\]]+)\]\(" + re.escape(BOOK.url("book/bibliography")) + r"\)",
                       text)
    for shown in [c for c in cited if re.search(r"\d{4}\)?$", c)]:  # not {doc} links
        name = re.sub(r" \((\d{4})\)$", "", shown)  # "Vaswani et al. (2017)": the name alone
        assert shown in book_says or name in book_says, (shown, sorted(book_says)[:8])
