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


GRADING_RUNS = {"test_grading_chapters.py", "test_grading_attacks.py", "test_grading.py",
                "test_gradescope.py", "test_gradescope_tamper.py", "test_grading_env.py"}


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items):
    """Hand the longest work out first (the notebooks, then the grading runs), so that
    neither xdist worker is left with a long file at the end while the other idles. The Makefile
    runs `--dist loadscope --no-loadscope-reorder`: a file (a notebook: one kernel for its cells;
    a module: its fixtures built once) or a test class stays on one worker, in this order."""

    def first(item):
        path = item.nodeid.split("::")[0]
        # after the notebooks, the grading runs: a chapter each, or a minute-long module fixture
        return 0 if path.endswith(".ipynb") else 1 if Path(path).name in GRADING_RUNS else 2

    items.sort(key=first)  # stable: within a file the order stays
