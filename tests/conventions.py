"""Conventions every chapter notebook follows; the tests and the authors' tools share them."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))

SETUP_CELL = '''\
# Setup: in Colab, install the course package `mha`; anywhere else this cell does nothing.
import sys

if "google.colab" in sys.modules:
    import subprocess

    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet",
         "mha[lab] @ git+{url}@{branch}"],
        check=True,
    )'''


def book_config() -> dict:
    return yaml.safe_load((ROOT / "_config.yml").read_text())


def setup_cell_source() -> str:
    """The first cell of every notebook, with the repository named in _config.yml."""
    repo = book_config()["repository"]
    return SETUP_CELL.format(url=repo["url"], branch=repo["branch"])


def cell_source(cell: dict) -> str:
    source = cell["source"]
    return source if isinstance(source, str) else "".join(source)


EXERCISE_LABEL = re.compile(r"^:label:\s*(ex-\d\d-\d+)\s*$", re.MULTILINE)
