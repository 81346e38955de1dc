"""The built book shows exercises with sphinx-exercise, solutions folded (run after `make book`)."""

import re

import pytest
from exercise_notebooks import exercises_of

from conventions import NOTEBOOKS, ROOT

HTML = ROOT / "_build" / "html"

pytestmark = pytest.mark.skipif(not (HTML / "index.html").exists(),
                                reason="the book is not built (make book)")


def solution_classes(html, label):
    """The classes of every rendered solution whose title links to the exercise ``label``."""
    return re.findall(r'<div class="([^"]*\bsolution\b[^"]*)"[^>]*>\s*'
                      r'<p class="admonition-title">[^<]*<a [^>]*href="#' + re.escape(label) + '"',
                      html)


def test_the_instructors_page_is_in_the_book_with_a_folded_example():
    html = (HTML / "book" / "instructors.html").read_text(encoding="utf-8")
    assert 'id="instructors-example"' in html
    assert solution_classes(html, "instructors-example") == ["solution dropdown admonition"]


@pytest.mark.parametrize("path,exercise", exercises_of(NOTEBOOKS),
                         ids=lambda v: v.name if hasattr(v, "name") else str(v))
def test_every_exercise_renders_with_its_solution_folded(path, exercise):
    html = (HTML / "notebooks" / f"{path.stem}.html").read_text(encoding="utf-8")
    assert f'id="{exercise.label}"' in html, f"{exercise.label} is not rendered as an exercise"
    classes = solution_classes(html, exercise.label)
    assert classes, f"the solution of {exercise.label} is not rendered"
    assert all("dropdown" in c.split() for c in classes), (
        f"the solution of {exercise.label} is not folded")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_the_book_shows_solution_code_without_the_grading_markers(path):
    # the notebook keeps the markers (student edition, grader); its page shows plain code
    assert "### BEGIN SOLUTION" in path.read_text(encoding="utf-8")
    html = (HTML / "notebooks" / f"{path.stem}.html").read_text(encoding="utf-8")
    assert "BEGIN SOLUTION" not in html and "END SOLUTION" not in html
