"""The student edition of a chapter notebook: solutions out, stubs in, the rest kept.

For every exercise (see ``exercise_format``):

- a prose solution becomes an empty answer cell for the student to write in;
- a code solution loses its ``{solution-start}`` explanation and its ``{solution-end}`` marker;
  in its code cells each ``### BEGIN SOLUTION`` ... ``### END SOLUTION`` region becomes
  ``raise NotImplementedError()`` (nbgrader's stub), so the check says "not done yet" and the
  notebook still runs to the end (a region at the top level of a cell, and a code cell without
  markers, becomes a comment); their outputs are cleared;
- check cells are kept, their outputs cleared.

Everything else (prose, chapter code, figures and their outputs) is kept as it is. That is
``student_edition``, which the grader also uses. What ``make student`` hands out is made from it
by tools/student_jupyter_edition.py, with the answer cells (``answer_cell``) and labels
(``grader_label``) defined here, where the grader reads them back.
"""

from __future__ import annotations

import copy
import re

from mha_grade.exercise_format import BEGIN, END, parse, source

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
