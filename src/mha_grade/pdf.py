"""A by-hand page printed to PDF by headless Chromium (Debian's ``chromium``), for Gradescope's
manual grading: each student's answer starts a page (the pages' print style), headed with the
exercise, the student's name and key.

Chromium runs with a throw-away profile, no proxy it could reach, and a time limit; it loads
only the page and the MathJax files beside it (the page's Content-Security-Policy). Run as root,
Chromium refuses to start inside its sandbox, so then it runs with ``--no-sandbox`` (the page
has no script but MathJax's and no student markup).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

NAMES = ("chromium", "chromium-browser", "google-chrome")
SECONDS = 120  # one page of a class: 5-15 s here
VIRTUAL_MS = 30_000  # time the page's scripts (MathJax) get before printing


def chromium() -> str | None:
    """The browser's command, or None when none is installed."""
    return next((found for name in NAMES if (found := shutil.which(name))), None)


def print_pdf(page: Path, pdf: Path, browser: str, seconds: float = SECONDS) -> str | None:
    """Prints ``page`` to ``pdf``; None when done, else why not."""
    # beside ``pdf``, so that the rename stays on one file system
    with tempfile.TemporaryDirectory(prefix=".mha-grade-pdf-", dir=pdf.parent) as work:
        # printed into a fresh folder, then renamed over ``pdf``: never through a link there
        printed = Path(work) / "printed.pdf"
        command = [browser, "--headless", "--disable-gpu", "--no-first-run",
                   f"--user-data-dir={Path(work) / 'profile'}", "--proxy-server=127.0.0.1:9",
                   "--disable-extensions", "--no-pdf-header-footer",
                   f"--virtual-time-budget={VIRTUAL_MS}",
                   f"--print-to-pdf={printed}", page.resolve().as_uri()]
        if os.geteuid() == 0:
            command.insert(1, "--no-sandbox")
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                   start_new_session=True, text=True, errors="replace")
        try:
            _, err = process.communicate(timeout=seconds)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.communicate()
            return f"chromium did not finish in {seconds:g} s"
        if process.returncode != 0 or not printed.is_file() or \
                printed.read_bytes()[:5] != b"%PDF-":
            last = [line for line in err.splitlines() if line.strip()][-1:] or ["no message"]
            return f"chromium failed (exit {process.returncode}): {last[0][:200]}"
        printed.chmod(0o600)  # students' answers: as private as the report's other files
        os.replace(printed, pdf)
    return None
