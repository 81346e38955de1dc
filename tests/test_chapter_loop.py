"""`make chapter CHAPTER=NN` runs pytest with `--chapter NN` (conftest.py): the selection holds
the chapter's notebook under nbval, its grading in the sandbox, its edition and book tests and its
checks' tests, and nothing of another chapter; a skip in the loop fails, saying why."""

import re
import subprocess
import sys
from types import SimpleNamespace

import pytest
import test_grading_chapters

from conventions import NOTEBOOKS, ROOT

pytest_plugins = ["pytester"]

# the files that hold a chapter's tests of each kind, and a whole-course one (test_layout.py)
FILES = ["tests/test_notebooks.py", "tests/test_editions.py", "tests/test_book_exercises.py",
         "tests/test_grading_chapters.py", "tests/test_student_edition.py",
         "tests/test_checks_ch06.py", "tests/test_checks_ch07.py", "tests/test_checks_ch03.py",
         "tests/test_checks_variants.py", "tests/test_layout.py"]


def notebook(number: int):
    return next(p for p in NOTEBOOKS if p.name.startswith(f"{number:02d}_"))


def selected(chapter: str, files: list[str], notebooks=()) -> list[str]:
    """The node ids `pytest --chapter` keeps among the files and the notebooks under nbval."""
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
         "--nbval", "--nbval-current-env", "--chapter", chapter, *files,
         *(str(p.relative_to(ROOT)) for p in notebooks)],
        cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    return [line for line in run.stdout.splitlines() if "::" in line]


@pytest.fixture(scope="module")
def chapter_6():
    return selected("06", FILES, [notebook(6), notebook(7)])


def test_chapter_6_selects_its_notebook_grading_editions_book_and_checks(chapter_6):
    name = notebook(6).name
    files = {node.split("::")[0] for node in chapter_6}
    assert f"notebooks/{name}" in files  # nbval's cells
    assert f"tests/test_grading_chapters.py::test_scores_full_marks_and_its_stubs_zero[{name}]" \
        in chapter_6
    assert f"tests/test_editions.py::test_no_myst_syntax_is_left_in_any_markdown_cell" \
           f"[jupyter-{name}]" in chapter_6
    assert f"tests/test_editions.py::test_no_myst_syntax_is_left_in_any_markdown_cell" \
           f"[student-{name}]" in chapter_6
    assert any(n.startswith("tests/test_book_exercises.py::test_every_exercise_renders")
               for n in chapter_6)
    assert f"tests/test_notebooks.py::test_title_cell_and_seed[{name}]" in chapter_6
    assert {"tests/test_checks_ch06.py", "tests/test_checks_variants.py"} <= files


def test_chapter_6_selects_nothing_of_another_chapter_nor_of_the_whole_course(chapter_6):
    others = [p.name for p in NOTEBOOKS if p != notebook(6)]
    assert not [n for n in chapter_6 if any(other in n for other in others)]
    files = {node.split("::")[0] for node in chapter_6}
    assert not files & {"tests/test_checks_ch07.py", "tests/test_checks_ch03.py",
                        "tests/test_layout.py", f"notebooks/{notebook(7).name}"}
    # the shared table of variants: chapter 6's rows only (v62_polar is a variant of 6.2)
    variants = [n for n in chapter_6 if n.startswith("tests/test_checks_variants.py")]
    assert variants and all(n.split("[")[1].startswith("v6") for n in variants)


def test_chapter_3_selects_its_checks_tests_and_not_chapter_4s():
    chapter_3 = selected("03_attention_with_weights",  # a name works as well as a number
                         ["tests/test_checks_ch03.py", "tests/test_checks_ch04.py",
                          "tests/test_grading_chapters.py"])
    checks = {n.split("::")[1] for n in chapter_3 if n.startswith("tests/test_checks_ch0")}
    assert checks and all(t.startswith("test_check_3_") for t in checks)
    assert not [n for n in chapter_3 if n.startswith("tests/test_checks_ch04.py")]
    assert "tests/test_grading_chapters.py::" \
           "test_the_instructors_chapter_3_without_any_tag_gets_full_marks" in chapter_3


def test_the_grading_run_grades_only_the_notebooks_its_selected_tests_look_at():
    module = test_grading_chapters

    def item(path=None, chapter=None):
        return SimpleNamespace(
            module=module, fixturenames=["graded"],
            **({"callspec": SimpleNamespace(params={"path": path})} if path else {}),
            iter_markers=lambda name: [SimpleNamespace(args=(chapter,))] if chapter else [])

    assert module.notebooks_to_grade([item(path=notebook(6))]) == [notebook(6)]
    assert module.notebooks_to_grade([item(chapter=3)]) == [notebook(3)]
    assert module.notebooks_to_grade([]) == []


def test_a_skip_in_the_loop_fails_with_its_reason_and_stays_a_skip_outside(pytester):
    pytester.makeconftest((ROOT / "conftest.py").read_text())
    pytester.makepyfile(test_book="""
        from pathlib import Path
        import pytest

        @pytest.mark.parametrize("path", [Path("notebooks/06_x.ipynb"),
                                          Path("notebooks/07_y.ipynb")])
        def test_page(path):
            pytest.skip("the book is not built (make book)")
    """)
    looped = pytester.runpytest("--chapter", "06")
    looped.assert_outcomes(failed=1, deselected=1)
    looped.stdout.fnmatch_lines(["*skipped in the chapter loop*the book is not built (make book)*"])
    pytester.runpytest().assert_outcomes(skipped=2)


def test_a_chapter_without_tests_or_a_bad_name_is_a_usage_error(pytester):
    pytester.makeconftest((ROOT / "conftest.py").read_text())
    pytester.makepyfile(test_one="def test_x():\n    pass\n")
    assert "no test is about chapter 6" in str(pytester.runpytest("--chapter", "06").stderr)
    assert "give a chapter's number" in str(pytester.runpytest("--chapter", "six").stderr)


# --- every test file says whether it is about one chapter (issue 38, F1)

# The files not marked with a chapter, and why: a test of the whole course, or a file whose tests
# are parametrized by notebook or by check, which the loop selects per chapter (conftest.py).
# Every other file of tests/ is about one chapter's code and says so with
# `pytestmark = pytest.mark.chapter(N)`: test_convolution.py, chapter 5's library tests, was in
# no loop.
COURSE_WIDE = {
    **dict.fromkeys([
        "test_book_exercises.py", "test_checks_bad_values.py", "test_checks_mutated_inputs.py",
        "test_checks_parts.py", "test_checks_variants.py", "test_editions.py",
        "test_exercise_tables.py", "test_notebooks.py", "test_numbering.py",
        "test_quoted_numbers.py", "test_strict_arrays.py", "test_student_edition.py",
        "test_claims.py", "test_execute.py"],
        "parametrized by notebook or by check: the loop selects each chapter's rows"),
    "test_checks_ch00.py": "the example chapter 0 (tests/fixtures), which has no loop",
    "test_book_in_browser.py": "the browser tests, not in the loop (CONTRIBUTING.md)",
    "test_chapter_loop.py": "the loop's own selection",
    **dict.fromkeys([
        "test_attention_paths.py", "test_attention_speed_paths.py", "test_bad_inputs.py",
        "test_generated_bad_inputs.py", "test_compile.py", "test_import_cost.py",
        "test_layout.py", "test_package_docs.py", "test_colab_ready.py"],
        "the package as a whole"),
    **dict.fromkeys([
        "test_pretrained.py", "test_sentence_attention.py", "test_dataflow.py",
        "test_explorer.py", "test_trained_models.py"],
        "code that several chapters use (figures, MiniLM, the shipped weights)"),
    **dict.fromkeys(["test_binder.py", "test_locks.py", "test_reachable.py"],
                    "the environment"),
    **dict.fromkeys([
        "test_copies.py", "test_gradescope.py", "test_gradescope_tamper.py", "test_grading.py",
        "test_grading_attacks.py", "test_grading_capture.py", "test_grading_cli.py",
        "test_grading_codec.py", "test_grading_conversation.py", "test_grading_env.py",
        "test_grading_host.py", "test_grading_limits.py", "test_grading_tamper.py",
        "test_late.py", "test_plain_code.py", "test_rendering.py", "test_report.py"],
        "the grader"),
}
# Files about one chapter's code that its loop would take past 2 minutes of CPU (measured
# 2026-12-07 on the loaded 2-core machine: seconds on a worker, about 4 times their CPU time):
LEFT_OUT_OF_THE_LOOP = {
    "test_position_task.py": "chapter 6: trains the previous-token task, 257 s on a worker",
    "test_cost.py": "chapter 6: measures timings, 88 s on a worker",
    "test_seq2seq.py": "chapter 7 (claim 7.5): trains translators, 76 s on a worker",
    "test_gqa_uptraining.py": "chapter 9: uptrains the decoder, 34 s on a worker (the "
                              "chapter's other library files add 11 s)",
}
CHAPTER_MARK = re.compile(r"pytest\.mark\.chapter\(\d+\)")
FILE_CHAPTER_MARK = re.compile(r"^pytestmark\s*=.*pytest\.mark\.chapter\(\d+\)", re.MULTILINE)


def test_every_test_file_is_marked_with_its_chapter_or_listed_as_course_wide():
    files = {p.name: p.read_text(encoding="utf-8")
             for p in sorted((ROOT / "tests").glob("test_*.py"))}
    unmarked = sorted(n for n, text in files.items()
                      if not CHAPTER_MARK.search(text)
                      and n not in COURSE_WIDE and n not in LEFT_OUT_OF_THE_LOOP)
    assert not unmarked, (
        f"{unmarked}: mark a file about one chapter's code `pytestmark = pytest.mark.chapter(N)` "
        f"(make chapter runs it), or list it in COURSE_WIDE (or LEFT_OUT_OF_THE_LOOP) of "
        f"tests/test_chapter_loop.py with the reason")
    listed = {**COURSE_WIDE, **LEFT_OUT_OF_THE_LOOP}
    # a course-wide file may mark one of its tests with a chapter (test_editions runs one
    # chapter's edition), but not the whole file
    stale = sorted(n for n in listed if n not in files or FILE_CHAPTER_MARK.search(files[n]))
    assert not stale, f"files listed as unmarked that are gone or marked with a chapter: {stale}"


# --- one figure for what `make test-fast` costs (issue 38, F2)

TEST_FAST_TIME = "about 10 minutes of CPU time"  # measured 2026-12-07 (CONTRIBUTING.md says how)


def test_readme_contributing_and_the_makefile_quote_one_figure_for_test_fast():
    # they said "a few minutes", "in a few minutes" and "a minute or two"; it ran far longer
    for name in ("README.md", "CONTRIBUTING.md", "Makefile"):
        text = " ".join((ROOT / name).read_text(encoding="utf-8").replace("#", " ").split())
        assert TEST_FAST_TIME in text, f"{name} should quote {TEST_FAST_TIME!r} for test-fast"
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    assert "a minute or two" not in makefile
