"""Report how long each notebook took under nbval (the sum of its cells' run times), and
schedule the test files over pytest-xdist's workers."""

from collections import defaultdict
from pathlib import Path

import pytest

_notebook_seconds: dict[str, float] = defaultdict(float)


def pytest_runtest_logreport(report):
    path = report.nodeid.split("::")[0]
    if path.endswith(".ipynb"):
        _notebook_seconds[Path(path).name] += report.duration


def pytest_terminal_summary(terminalreporter):
    if not _notebook_seconds:
        return
    terminalreporter.section("notebook execution times (nbval)")
    for name, seconds in sorted(_notebook_seconds.items()):
        terminalreporter.write_line(f"{name:45s} {seconds:6.1f} s")
    total = sum(_notebook_seconds.values())
    terminalreporter.write_line(f"{'total':45s} {total:6.1f} s")


# After the notebooks, the modules that take longest (over 10 s on a busy machine), longest
# first: the grading runs (a chapter each, or a minute-long module fixture), then the others
SLOW_MODULES = ["test_grading_env.py", "test_grading_tamper.py", "test_grading_attacks.py",
                "test_gradescope_tamper.py", "test_grading.py", "test_grading_chapters.py",
                "test_grading_capture.py", "test_gradescope.py", "test_checks_variants.py",
                "test_report.py", "test_grading_limits.py", "test_grading_cli.py",
                "test_editions.py", "test_gqa_uptraining.py", "test_book_in_browser.py",
                "test_cost.py", "test_position_task.py", "test_lab_claims.py",
                "test_strict_arrays.py", "test_seq2seq.py", "test_trained_models.py",
                "test_sentence_attention.py", "test_colab_ready.py", "test_compile.py",
                "test_multi_head.py", "test_student_edition.py", "test_single_head.py"]


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items):
    """Hand the longest work out first (the notebooks, then SLOW_MODULES in order), so that
    neither xdist worker is left with a long file at the end while the other idles. The Makefile
    runs `--dist loadscope --no-loadscope-reorder`: a file (a notebook: one kernel for its
    cells; a module: its fixtures built once) or a test class stays on one worker, in this
    order."""

    def first(item):
        path = item.nodeid.split("::")[0]
        name = Path(path).name
        if path.endswith(".ipynb"):
            return 0
        return 1 + SLOW_MODULES.index(name) if name in SLOW_MODULES else 1 + len(SLOW_MODULES)

    items.sort(key=first)  # stable: within a file the order stays
