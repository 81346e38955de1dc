"""Report how long each notebook took under nbval (the sum of its cells' run times)."""

from collections import defaultdict
from pathlib import Path

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
