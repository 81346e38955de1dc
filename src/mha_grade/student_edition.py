"""Write the student edition of the chapter notebooks: solutions out, stubs in, the rest kept.

    python tools/student_edition.py [--out _build/student/notebooks] [notebook ...]

For every exercise (see ``exercise_format``):

- a prose solution becomes an empty answer cell for the student to write in;
- a code solution loses its ``{solution-start}`` explanation and its ``{solution-end}`` marker;
  in its code cells each ``### BEGIN SOLUTION`` ... ``### END SOLUTION`` region becomes
  ``raise NotImplementedError()`` (nbgrader's stub), so the check says "not done yet" and the
  notebook still runs to the end (a region at the top level of a cell, and a code cell without
  markers, becomes a comment); their outputs are cleared;
- check cells are kept, their outputs cleared.

Everything else (prose, chapter code, figures and their outputs) is kept as it is. That is
``student_edition``. What ``make student`` writes is ``student_jupyter_edition``: the same,
plus an answer cell after every code exercise whose prompt also asks something in words (a
question, "explain", "predict", "compare", ...), in the plain Jupyter markdown of the Jupyter
edition (tools/jupyter_edition.py: numbered exercises and lemmas, references linked to the
book, no MyST left). Each prompt keeps its ``:label:`` line inside an HTML comment, which
Jupyter does not show, so that the grader (mha_grade) finds the exercise in a submission.
"""

from __future__ import annotations

import argparse
import copy
import json
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported where used: the grader (and Gradescope's image) needs none of it
    import jupyter_edition
from mha_grade import ROOT
from mha_grade.exercise_format import BEGIN, END, chapter_notebooks, load, parse, source


def _tools() -> None:
    """tools/ on the path: the Jupyter edition (tools/jupyter_edition.py) is the book's, not the
    grader's, and only ``make student`` uses it."""
    if str(ROOT / "tools") not in sys.path:
        sys.path.insert(0, str(ROOT / "tools"))


DEFAULT_OUT = ROOT / "_build" / "student" / "notebooks"

CODE_STUB = ["# YOUR CODE HERE", "raise NotImplementedError()"]
# A region at the top level of a cell cannot raise without stopping "Run all": it gets a comment.
TOP_LEVEL_STUB = ["# YOUR CODE HERE"]


def answer_cell(label: str, name: str) -> dict:
    return {
        "cell_type": "markdown",
        "id": f"answer-{label}",
        "metadata": {"tags": ["answer"]},
        "source": f"**Your answer to Exercise {name}.** Replace this line with your answer.",
    }


def stub_regions(text: str) -> str:
    """Replace every solution region of a cell's source by the stub, at the region's indent."""
    out, inside = [], False
    for line in text.split("\n"):
        if line.strip() == BEGIN:
            inside = True
            indent = line[: len(line) - len(line.lstrip())]
            out.extend(indent + stub for stub in (CODE_STUB if indent else TOP_LEVEL_STUB))
        elif line.strip() == END:
            inside = False
        elif not inside:
            out.append(line)
    return "\n".join(out)


def clear_outputs(cell: dict) -> dict:
    cell = copy.deepcopy(cell)
    cell["outputs"], cell["execution_count"] = [], None
    return cell


def student_edition(nb: dict) -> dict:
    """The student edition of one notebook (a new dict; ``nb`` is left as it is)."""
    exercises = parse(nb)
    by_cell = {i: ex for ex in exercises for i in ex.solution}
    checks = {i for ex in exercises for i in ex.checks}
    cells = []
    for index, cell in enumerate(nb["cells"]):
        exercise = by_cell.get(index)
        if exercise is not None:
            if exercise.kind == "prose":
                cells.append(answer_cell(exercise.label, exercise.name))
            elif index in exercise.code:
                stubbed = clear_outputs(cell)
                stubbed["source"] = (stub_regions(source(cell)) if index in exercise.marked
                                     else "\n".join(TOP_LEVEL_STUB))  # all of it is solution
                # the grader finds the student's answer by this tag
                stubbed.setdefault("metadata", {})["tags"] = sorted(
                    set(stubbed["metadata"].get("tags", [])) | {"solution"})
                cells.append(stubbed)
            # the markdown of a code solution (its explanation, solution-start/end) is dropped
        elif index in checks:
            cells.append(clear_outputs(cell))
        else:
            cells.append(copy.deepcopy(cell))
    edition = copy.deepcopy({k: v for k, v in nb.items() if k != "cells"})
    edition["cells"] = cells
    return edition


# A prompt asks for words too when, outside its code and maths, it asks a question or says one
# of these verbs.
PROSE_QUESTION = re.compile(r"\?|\b(explain|predict|compare|report|describe|discuss|derive)\b",
                            re.IGNORECASE)


def asks_for_prose(prompt: str) -> bool:
    """Whether an exercise's prompt asks a question to answer in words (besides any code)."""
    text = "\n".join(ln for ln in prompt.split("\n") if not re.match(r"^(`{3,}|:{3,}|:\w+:)", ln))
    text = re.sub(r"`[^`]*`|\$\$.*?\$\$|\$[^$]*\$", " ", text, flags=re.DOTALL)
    return bool(PROSE_QUESTION.search(text))


def grader_label(label: str) -> str:
    """The exercise's label for the grader, in an HTML comment Jupyter does not show."""
    return f"<!-- the grader finds the exercise by this line\n:label: {label}\n-->"


def student_jupyter_edition(nb: dict, book: jupyter_edition.Book, docname: str) -> dict:
    """What `make student` writes: the student edition with an answer cell for every question
    in words, in the Jupyter edition's plain markdown."""
    _tools()
    import jupyter_edition

    exercises = parse(nb)
    edition = student_edition(nb)
    position = {cell.get("id"): i for i, cell in enumerate(edition["cells"])}
    inserts = []
    for exercise in exercises:
        prompt = nb["cells"][exercise.prompt]
        edition["cells"][position[prompt["id"]]]["source"] = (
            source(prompt).rstrip("\n") + "\n\n" + grader_label(exercise.label))
        if exercise.kind == "code" and asks_for_prose(source(prompt)):
            last = (exercise.checks or exercise.code)[-1]
            inserts.append((position[nb["cells"][last]["id"]] + 1,
                            answer_cell(exercise.label, exercise.name)))
    for index, cell in sorted(inserts, key=lambda pair: pair[0], reverse=True):
        edition["cells"].insert(index, cell)
    return jupyter_edition.convert_notebook(edition, book, docname, fold_solutions=False)


def write(nb: dict, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="*", type=Path,
                        help="instructor notebooks (default: every chapter in notebooks/)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output folder")
    args = parser.parse_args(argv)
    _tools()
    import jupyter_edition

    paths = args.notebooks or chapter_notebooks(ROOT)
    book = jupyter_edition.load_book(ROOT)
    for path in paths:
        nb = load(path)
        docname = f"notebooks/{path.stem}"
        write(student_jupyter_edition(nb, book, docname), args.out / path.name)
        count = len(parse(nb))
        print(f"{path.name}: {count} exercise{'s' if count != 1 else ''}")
    print(f"student edition of {len(paths)} notebook(s) written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
