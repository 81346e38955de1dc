"""Write what `make student` hands out: the student edition of the chapter notebooks
(mha_grade.student_edition, which the grader also uses), plus an answer cell after every code
exercise whose prompt also asks something in words (a question, "explain", "predict",
"compare", ...), in the plain Jupyter markdown of the Jupyter edition (jupyter_edition.py:
numbered exercises and lemmas, references linked to the book, no MyST left). Each prompt keeps
its ``:label:`` line inside an HTML comment, which Jupyter does not show, so that the grader
finds the exercise in a submission.

    python tools/student_jupyter_edition.py [--out _build/student/notebooks] [notebook ...]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import jupyter_edition  # beside this file: the book's tool, which the grader never needs

from mha_grade import ROOT
from mha_grade.exercise_format import chapter_notebooks, load, parse, source
from mha_grade.student_edition import (
    answer_cell,
    asks_for_prose,
    grader_label,
    student_edition,
)

DEFAULT_OUT = ROOT / "_build" / "student" / "notebooks"


def student_jupyter_edition(nb: dict, book: jupyter_edition.Book, docname: str) -> dict:
    """What `make student` writes: the student edition with an answer cell for every question
    in words, in the Jupyter edition's plain markdown."""
    missing = [i for i, cell in enumerate(nb["cells"]) if not cell.get("id")]
    if missing:  # the edition finds each cell again by its id (instructor 46: a KeyError)
        raise SystemExit(f"{docname}: cell(s) {missing} have no id (nbformat 4.5 cells need one; "
                         f"cells added by a script often lack it): run `jupyter nbconvert --to "
                         f"notebook --inplace` on the notebook, which adds them, or open and save "
                         f"it in JupyterLab")
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="*", type=Path,
                        help="instructor notebooks (default: every chapter in notebooks/)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output folder")
    args = parser.parse_args(argv)
    paths = args.notebooks or chapter_notebooks(ROOT)
    book = jupyter_edition.load_book(ROOT)
    for path in paths:
        nb = load(path)
        docname = f"notebooks/{path.stem}"
        jupyter_edition.write(student_jupyter_edition(nb, book, docname), args.out / path.name)
        count = len(parse(nb))
        print(f"{path.name}: {count} exercise{'s' if count != 1 else ''}")
    print(f"student edition of {len(paths)} notebook(s) written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
