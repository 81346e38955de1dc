"""Report how long each notebook took under nbval (the sum of its cells' run times) and which
files took longest, and schedule the test files over pytest-xdist's workers."""

from collections import defaultdict
from pathlib import Path

import pytest

_notebook_seconds: dict[str, float] = defaultdict(float)
_file_seconds: dict[str, float] = defaultdict(float)  # setup, call and teardown of its tests


def pytest_runtest_logreport(report):
    path = report.nodeid.split("::")[0]
    _file_seconds[path] += report.duration
    if path.endswith(".ipynb"):
        _notebook_seconds[Path(path).name] += report.duration


def pytest_terminal_summary(terminalreporter):
    if len(_file_seconds) > 1:  # what SLOW_FIRST below orders by
        terminalreporter.section("the files that took longest (worker seconds)")
        total = sum(_file_seconds.values())
        for path, seconds in sorted(_file_seconds.items(), key=lambda x: -x[1])[:15]:
            terminalreporter.write_line(f"{path:45s} {seconds:6.1f} s")
        terminalreporter.write_line(f"{'all files':45s} {total:6.1f} s")
    if not _notebook_seconds:
        return
    terminalreporter.section("notebook execution times (nbval)")
    for name, seconds in sorted(_notebook_seconds.items()):
        terminalreporter.write_line(f"{name:45s} {seconds:6.1f} s")
    total = sum(_notebook_seconds.values())
    terminalreporter.write_line(f"{'total':45s} {total:6.1f} s")


# The files that take longest, longest first: worker seconds of each file in a `make test` on a
# quiet 2-core machine (issue 28, 2026-11-28; the chapters' grading run is one scope since).
SLOW_FIRST = [
    "tests/test_grading_chapters.py",  # every chapter graded, two at a time: ~150 s
    "tests/test_book_in_browser.py", "tests/test_grading_capture.py",
    "tests/test_grading_tamper.py", "tests/test_gradescope_tamper.py", "tests/test_grading.py",
    "tests/test_grading_attacks.py", "tests/test_gradescope.py",
    "notebooks/07_head_pruning.ipynb", "tests/test_grading_env.py",
    "notebooks/09_decoders.ipynb", "tests/test_grading_limits.py", "tests/test_cost.py",
    "notebooks/05_convolution.ipynb", "tests/test_gqa_uptraining.py",
    "notebooks/08_lab_pretrained_heads.ipynb", "notebooks/06_positional_encoding.ipynb",
    "tests/test_report.py", "tests/test_editions.py",
    "notebooks/04_multi_head_attention.ipynb", "tests/test_position_task.py",
    "tests/test_checks_variants.py", "notebooks/03_attention_with_weights.ipynb",
    "tests/test_compile.py", "tests/test_lab_claims.py", "tests/test_multi_head.py",
    "notebooks/01_attention_recap.ipynb", "tests/test_strict_arrays.py",
    "tests/test_checks_bad_values.py", "tests/test_trained_models.py", "tests/test_seq2seq.py",
    "notebooks/02_diagonal_problem.ipynb",  # ~6 s; what follows is shorter
]


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items):
    """Hand the longest work out first (SLOW_FIRST in order, then every other file in the order
    collected), so that neither xdist worker is left with a long file at the end while the
    other idles. The Makefile runs `--dist loadscope --no-loadscope-reorder`: a file (a
    notebook: one kernel for its cells; a module: its fixtures built once) stays on one worker,
    and files are handed out in this order."""
    rank = {path: i for i, path in enumerate(SLOW_FIRST)}
    # stable: within a file the order stays
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(SLOW_FIRST)))
