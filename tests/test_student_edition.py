"""The exercise format and the student edition (`make student`), over every chapter and fixture."""

import json
import re
import subprocess
import sys

import jupyter_edition  # tools/
import pytest
import student_jupyter_edition  # tools/
from exercise_notebooks import (
    ALL,
    EXAMPLE,
    VERDICT,
    WITH_EXERCISES,
    exercises_of,
    fmt,
    student_edition,
)

from conventions import NOTEBOOKS, ROOT


def name(path):
    return path.name


@pytest.mark.parametrize("path", ALL, ids=name)
def test_follows_the_exercise_format(path):
    nb = fmt.load(path)
    exercises = fmt.parse(nb)  # raises FormatError naming the cell
    for exercise in exercises:
        assert exercise.label[3:5] == path.name[:2], (
            f"{exercise.label} is in chapter {path.name[:2]}'s notebook")
        for module, check in exercise.calls:
            assert module == f"ch{path.name[:2]}", f"{exercise.label} calls mha.checks.{module}"
            assert fmt.check_info(module, check).exercise == exercise.name


@pytest.mark.parametrize("path", WITH_EXERCISES, ids=name)
def test_a_check_cell_prints_only_its_verdict_lines(path):
    """What the solution prints is part of the folded solution: a check cell, shown unfolded
    under it, prints nothing but its check's verdict (chapter 2's check once echoed every rate
    Exercise 2.3 asks for, because the solution's function printed them)."""
    nb = fmt.load(path)
    for exercise in fmt.parse(nb):
        for index in exercise.checks:
            for output in nb["cells"][index].get("outputs", []):
                assert output["output_type"] == "stream" and output["name"] == "stdout", (
                    f"{path.name} cell {index} ({exercise.label}'s check) shows an output "
                    f"of type {output['output_type']}: only the verdict line may show")
                text = output["text"]
                for line in ("".join(text) if isinstance(text, list) else text).splitlines():
                    verdict = VERDICT.match(line)
                    assert verdict and verdict.group(1) == exercise.name, (
                        f"{path.name} cell {index} ({exercise.label}'s check) prints {line!r}, "
                        "which is not its verdict line: print results in the solution, which "
                        "the book and the editions fold")


def is_placeholder(path):
    return "This chapter is being written." in fmt.source(fmt.load(path)["cells"][1])


@pytest.mark.parametrize("path", NOTEBOOKS, ids=name)
def test_every_chapter_has_at_least_four_exercises_with_a_derivation_and_a_check(path):
    if is_placeholder(path):
        pytest.skip("placeholder chapter")
    exercises = fmt.parse(fmt.load(path))
    assert len(exercises) >= 4, f"{path.name} has {len(exercises)} exercises"
    assert any(e.kind == "prose" for e in exercises), f"{path.name} has no derivation"
    assert any(e.checks for e in exercises), f"{path.name} has no exercise with a check"


def test_the_fixture_has_a_derivation_and_checked_code():
    exercises = fmt.parse(fmt.load(EXAMPLE))
    assert [e.kind for e in exercises] == ["prose", "code", "code"]
    assert [e.name for e in exercises] == ["0.1", "0.2", "0.3"]


@pytest.mark.parametrize("path", ALL, ids=name)
def test_the_student_edition_keeps_everything_but_the_solutions(path):
    nb = fmt.load(path)
    edition = student_edition.student_edition(nb)
    exercises = fmt.parse(nb)
    solution_cells = {i for e in exercises for i in e.solution}
    checks = {i for e in exercises for i in e.checks}
    kept = [i for i in range(len(nb["cells"])) if i not in solution_cells]
    left = [c for c in edition["cells"]
            if "answer" not in fmt.tags(c) and "solution" not in fmt.tags(c)]
    assert len(left) == len(kept)
    for index, copy in zip(kept, left, strict=True):
        original = nb["cells"][index]
        assert fmt.source(copy) == fmt.source(original)
        if index in checks:
            assert copy["outputs"] == [] and copy["execution_count"] is None
        elif original["cell_type"] == "code":
            assert copy["outputs"] == original["outputs"]  # figures and prints stay
    # one answer cell per derivation, one stub per solution code cell, in the same order
    answers = [c for c in edition["cells"] if "answer" in fmt.tags(c)]
    assert len(answers) == sum(e.kind == "prose" for e in exercises)
    stubbed = [c for c in edition["cells"] if "solution" in fmt.tags(c)]
    assert len(stubbed) == sum(len(e.code) for e in exercises)
    for cell in stubbed:
        assert fmt.BEGIN not in fmt.source(cell) and cell["outputs"] == []


def solution_text(nb, exercise):
    """The lines a student must not see: solution prose, and code inside the regions."""
    lines = []
    for index in exercise.solution:
        cell = nb["cells"][index]
        text = fmt.source(cell)
        if cell["cell_type"] == "markdown":
            lines += [ln for ln in text.split("\n")
                      if not re.match(r"^(`{3,}|:{3,})|^:class:", ln.strip())]
        elif index in exercise.marked:
            all_lines = text.split("\n")
            for begin, end in fmt.solution_regions(text):
                lines += all_lines[begin + 1:end]
        else:  # a code cell without markers is solution as a whole
            lines += text.split("\n")
    return [ln.strip() for ln in lines if ln.strip()]


def output_strings(cells):
    """Every text and image payload of the outputs of ``cells``."""
    found = []
    for cell in cells:
        for out in cell.get("outputs", []):
            if "text" in out:
                found.append("".join(out["text"]) if isinstance(out["text"], list)
                             else out["text"])
            for value in out.get("data", {}).values():
                found.append(value if isinstance(value, str) else json.dumps(value))
    return [s.strip() for s in found if s.strip()]


@pytest.mark.parametrize("path,exercise", exercises_of(WITH_EXERCISES),
                         ids=lambda v: v.name if hasattr(v, "name") else str(v))
def test_nothing_of_the_solution_remains_in_the_student_edition(path, exercise):
    nb = fmt.load(path)
    edition = student_edition.student_edition(nb)
    others = [c for i, c in enumerate(nb["cells"]) if i not in exercise.solution]
    # a line that the chapter also has outside the solution (say `return out`) may stay
    elsewhere = {ln.strip() for c in others for ln in fmt.source(c).split("\n")}
    secret = [ln for ln in solution_text(nb, exercise) if ln not in elsewhere]
    assert secret or exercise.kind == "code", f"{exercise.label}: an empty solution"
    shown = {ln.strip() for c in edition["cells"] for ln in fmt.source(c).split("\n")}
    leaked = [ln for ln in secret if ln in shown]
    assert not leaked, f"{exercise.label}: the student edition still shows {leaked[:3]}"
    solution_outputs = output_strings([nb["cells"][i] for i in exercise.solution])
    other_outputs = set(output_strings(others))
    edition_outputs = output_strings(edition["cells"])
    for payload in solution_outputs:
        if payload not in other_outputs:
            assert all(payload not in out for out in edition_outputs), (
                f"{exercise.label}: an output of the solution is in the student edition")


def test_the_stub_raises_inside_a_function_and_is_a_comment_at_top_level():
    text = "def f(x):\n    ### BEGIN SOLUTION\n    return x\n    ### END SOLUTION\n" \
           "### BEGIN SOLUTION\nprint(f(1))\n### END SOLUTION\nprint('kept')"
    assert student_edition.stub_regions(text) == (
        "def f(x):\n    # YOUR CODE HERE\n    raise NotImplementedError()\n"
        "# YOUR CODE HERE\nprint('kept')")


@pytest.mark.parametrize("broken,message", [
    ("### BEGIN SOLUTION\nx = 1\n", "without ### END SOLUTION"),
    ("x = 1\n### END SOLUTION", "without ### BEGIN SOLUTION"),
    ("### BEGIN SOLUTION\n### BEGIN SOLUTION\n### END SOLUTION", "nested"),
])
def test_broken_markers_are_reported_with_the_line(broken, message):
    with pytest.raises(fmt.FormatError, match=message):
        fmt.solution_regions(broken)


def test_a_solution_left_open_or_a_check_without_code_is_a_format_error():
    nb = fmt.load(EXAMPLE)
    without_end = {"cells": [c for c in nb["cells"]
                             if not fmt.SOLUTION_END.search(fmt.source(c))]}
    with pytest.raises(fmt.FormatError, match="cell 9: the solution of ex-00-2 is not closed"):
        fmt.parse(without_end)  # the next exercise's prompt comes first
    cut = next(i for i, c in enumerate(nb["cells"]) if "solution" in fmt.tags(c))
    with pytest.raises(fmt.FormatError, match="ex-00-2 is not closed"):
        fmt.parse({"cells": nb["cells"][:cut + 1]})
    without_solution = {"cells": [c for c in nb["cells"] if "solution" not in fmt.tags(c)]}
    with pytest.raises(fmt.FormatError, match="cell"):
        fmt.parse(without_solution)


def experiment(solution_code):
    """A notebook with one experiment: code to run, no check."""
    def md(text):
        return {"cell_type": "markdown", "metadata": {}, "source": text}
    return {"cells": [
        md("```{exercise} Try it\n:label: ex-05-1\n\nPlot the weights for four heads.\n```"),
        md("```{solution-start} ex-05-1\n:class: dropdown\n```\nRun this:"),
        {"cell_type": "code", "metadata": {}, "outputs": [{"output_type": "stream",
         "name": "stdout", "text": "secret plot\n"}], "execution_count": 3,
         "source": solution_code},
        md("```{solution-end}\n```")], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}


def test_an_experiment_without_a_check_is_stubbed_whole_and_graded_by_hand():
    nb = experiment("weights = run_experiment(heads=4)\nplot(weights)")
    (exercise,) = fmt.parse(nb)
    assert exercise.kind == "code" and not exercise.checks and exercise.marked == []
    edition = student_edition.student_edition(nb)
    assert [fmt.source(c) for c in edition["cells"]][1:] == ["# YOUR CODE HERE"]
    assert edition["cells"][1]["outputs"] == [] and "solution" in fmt.tags(edition["cells"][1])
    # with a check, the student's part must be marked
    nb["cells"].append({"cell_type": "code", "metadata": {"tags": ["check"]}, "outputs": [],
                        "execution_count": None, "source": "mha.checks.ch05.try_it(plot)"})
    with pytest.raises(fmt.FormatError, match="cell 2: ex-05-1 has a check"):
        fmt.parse(nb)


def test_make_student_writes_every_chapter_under_its_own_name(tmp_path):
    run = subprocess.run([sys.executable, str(ROOT / "tools" / "student_jupyter_edition.py"),
                          "--out", str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert sorted(p.name for p in tmp_path.glob("*.ipynb")) == sorted(p.name for p in NOTEBOOKS)
    book = jupyter_edition.load_book(ROOT)
    for path in NOTEBOOKS:
        written = json.loads((tmp_path / path.name).read_text())
        # the student edition in the Jupyter edition's plain markdown (tests/test_editions.py)
        assert written == student_jupyter_edition.student_jupyter_edition(
            fmt.load(path), book, f"notebooks/{path.stem}")


def test_the_tools_are_lint_clean():
    run = subprocess.run([sys.executable, "-m", "ruff", "check", str(ROOT / "tools")],
                         capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert run.returncode == 0, run.stdout + run.stderr
