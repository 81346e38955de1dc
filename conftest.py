"""Report how long each notebook took under nbval (the sum of its cells' run times) and which
files took longest, schedule the test files over pytest-xdist's workers, and select one
chapter's tests (``--chapter 06``, what ``make chapter`` runs)."""

import re
import resource
from collections import defaultdict
from pathlib import Path

import pytest

_notebook_seconds: dict[str, float] = defaultdict(float)
_file_seconds: dict[str, float] = defaultdict(float)  # setup, call and teardown of its tests
_file_cpu: dict[str, float] = defaultdict(float)  # the CPU time they used, subprocesses too
_phase_start = [0.0]  # in the worker: CPU seconds when the test's current phase began


def _cpu_seconds() -> float:
    """CPU time of this process and of its children that have ended (a grader, a kernel)."""
    own, children = (resource.getrusage(resource.RUSAGE_SELF),
                     resource.getrusage(resource.RUSAGE_CHILDREN))
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def pytest_runtest_logstart(nodeid, location):
    _phase_start[0] = _cpu_seconds()


def pytest_runtest_logreport(report):
    path = report.nodeid.split("::")[0]
    _file_seconds[path] += report.duration
    _file_cpu[path] += getattr(report, "cpu_seconds", 0.0)
    if path.endswith(".ipynb"):
        _notebook_seconds[Path(path).name] += report.duration


def pytest_terminal_summary(terminalreporter):
    if len(_file_seconds) > 1:  # what SLOW_FIRST below orders by
        # CPU seconds: the worker's and its ended child processes' (a grader's, a kernel's);
        # a sandbox's notebooks run in processes no child waits for, so a grading test's
        # work is mostly not in them: there, worker seconds far above CPU seconds is no sign
        # of waiting. Elsewhere it is (sleeps, time limits, a browser)
        terminalreporter.section("the files that took longest (worker seconds, CPU seconds "
                                 "without sandboxes)")
        total, cpu = sum(_file_seconds.values()), sum(_file_cpu.values())
        for path, seconds in sorted(_file_seconds.items(), key=lambda x: -x[1])[:15]:
            terminalreporter.write_line(f"{path:45s} {seconds:6.1f} s {_file_cpu[path]:6.1f} s")
        terminalreporter.write_line(f"{'all files':45s} {total:6.1f} s {cpu:6.1f} s")
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


def pytest_addoption(parser):
    parser.addoption(
        "--chapter", metavar="NN",
        help="only the tests of one chapter (06, 6 or 06_positional_encoding): its notebook under "
             "nbval, and every test parametrized with its notebook, one of its exercises or "
             "checks, or marked chapter(N); a skip among them fails (make chapter)")


def pytest_configure(config):
    config.addinivalue_line("markers", "chapter(n): the test is about chapter n (make chapter)")


# A value that names a chapter: a notebook (notebooks/06_x.ipynb, tests/fixtures/00_x.ipynb is
# chapter 0), a check (its `exercise`, "6.2"), or a checks module's name ("ch06").
NOTEBOOK_NAME = re.compile(r"(\d\d)_\w+\.ipynb")
CHECKS_MODULE = re.compile(r"ch(\d\d)")


def chapter_of_value(value) -> int | None:
    if isinstance(value, Path) and (m := NOTEBOOK_NAME.fullmatch(value.name)):
        return int(m.group(1))
    exercise = getattr(value, "exercise", None)
    if isinstance(exercise, str) and re.fullmatch(r"\d+\.\d+", exercise):
        return int(exercise.split(".")[0])
    if isinstance(value, str) and (m := CHECKS_MODULE.fullmatch(value)):
        return int(m.group(1))
    return None


def chapters_of(item) -> set[int]:
    """The chapters a collected test is about (none for a test of the whole course)."""
    chapters = {int(m.args[0]) for m in item.iter_markers("chapter")}
    path = Path(item.nodeid.split("::")[0])
    if path.suffix == ".ipynb" and (m := NOTEBOOK_NAME.fullmatch(path.name)):
        chapters.add(int(m.group(1)))  # a notebook under nbval: its cells
    params = getattr(getattr(item, "callspec", None), "params", {})
    chapters.update(c for v in params.values() if (c := chapter_of_value(v)) is not None)
    return chapters


def chapter_number(option: str) -> int:
    m = re.fullmatch(r"(\d{1,2})(_\w+)?", option)
    if not m:
        raise pytest.UsageError(f"--chapter {option!r}: give a chapter's number (06, 6) or its "
                                "notebook's name (06_positional_encoding)")
    return int(m.group(1))


def select_chapter(config, items) -> None:
    """Keep only the tests about the chapter ``--chapter`` names; tell pytest the rest are
    deselected (pytest counts them in its summary)."""
    chapter = chapter_number(config.getoption("--chapter"))
    keep = [item for item in items if chapter in chapters_of(item)]
    if not keep:
        raise pytest.UsageError(f"--chapter {chapter:02d}: no test is about chapter {chapter}")
    config.hook.pytest_deselected(items=[item for item in items if item not in keep])
    items[:] = keep


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """In the chapter loop a skip fails, with its reason: a test the loop selects is one the
    chapter needs (a book test that finds no book means the loop did not build it)."""
    outcome = yield
    report = outcome.get_result()
    now = _cpu_seconds()  # the phase's CPU time, carried to the controller with the report
    report.cpu_seconds, _phase_start[0] = now - _phase_start[0], now
    if (item.config.getoption("--chapter") and report.skipped
            and not hasattr(report, "wasxfail")):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr
        report.outcome = "failed"
        report.longrepr = f"skipped in the chapter loop, which runs all it selects: {reason}"


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """With ``--chapter``, only that chapter's tests (select_chapter). Then hand the longest
    work out first (SLOW_FIRST in order, then every other file in the order collected), so
    that neither xdist worker is left with a long file at the end while the other idles. The
    Makefile runs `--dist loadscope --no-loadscope-reorder`: a file (a
    notebook: one kernel for its cells; a module: its fixtures built once) stays on one worker,
    and files are handed out in this order."""
    if config.getoption("--chapter"):
        select_chapter(config, items)
    rank = {path: i for i, path in enumerate(SLOW_FIRST)}
    # stable: within a file the order stays
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(SLOW_FIRST)))
