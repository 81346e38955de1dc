"""Re-run notebooks in place, each in a fresh kernel (``make execute``), for authors refreshing the
committed outputs, without the churn of what only the machine decides.

A cell tagged ``machine-dependent`` (a timing, a measured memory, and the tables and figures drawn
from them) keeps its committed outputs: the cell still runs, so the cells after it see this run's
values, but a change elsewhere in the chapter stays a change of what it changed. ``--refresh``
(``make execute REFRESH=1``) records them anew; refresh them together, on a quiet machine.
A cell's metadata ``outputs_recorded_from`` is a fingerprint of the code its outputs came from:
a cell whose code changed since (an author's edit) has outputs of code that is gone, so then
every machine-dependent cell of the notebook is recorded anew, together, as with --refresh (a
table and the figure drawn from its numbers stay of one run), and the run says why (maintainer
48: an edited timing cell kept its old output and the loop passed); tests/test_execute.py
holds every committed cell to its fingerprint.
Consecutive outputs of one stream are written as one output, however the kernel split them.

    python tools/execute.py notebooks/06_positional_encoding.ipynb [--refresh]
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from pathlib import Path

import nbformat
from nbclient import NotebookClient

MACHINE_DEPENDENT = "machine-dependent"
RECORDED_FROM = "outputs_recorded_from"


def fingerprint(source: str) -> str:
    """A short fingerprint of a cell's code, for RECORDED_FROM."""
    return hashlib.sha256(source.encode()).hexdigest()[:16]


def merged_streams(outputs: list) -> list:
    """``outputs`` with each run of one stream's consecutive outputs joined into one."""
    merged: list = []
    for output in outputs:
        last = merged[-1] if merged else None
        if (output.get("output_type") == "stream" and last is not None
                and last.get("output_type") == "stream" and last.get("name") == output.get("name")):
            last["text"] = last["text"] + output["text"]
        else:
            merged.append(output)
    return merged


def execute(path: Path, refresh: bool = False, timeout: int = 600) -> tuple[int, list[int]]:
    """Run ``path`` in place: (how many machine-dependent cells kept their outputs, the numbers
    of those recorded anew because their code changed since their outputs were recorded)."""
    nb = nbformat.read(path, as_version=4)
    tagged = [i for i, cell in enumerate(nb.cells)
              if cell.cell_type == "code" and MACHINE_DEPENDENT in cell.metadata.get("tags", [])]
    # a cell never fingerprinted counts as unchanged (its fingerprint is written below)
    changed = [i for i in tagged if nb.cells[i].metadata.get(
        RECORDED_FROM, fingerprint(nb.cells[i].source)) != fingerprint(nb.cells[i].source)]
    kept = {} if refresh or changed else {i: nb.cells[i].outputs for i in tagged}
    NotebookClient(nb, timeout=timeout, record_timing=False,
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "code":
            cell.outputs = merged_streams(kept.get(i, cell.outputs))
    for i in tagged:
        nb.cells[i].metadata[RECORDED_FROM] = fingerprint(nb.cells[i].source)
    nbformat.write(nb, path)
    return len(kept), [] if refresh else changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("notebooks", nargs="+", type=Path)
    parser.add_argument("--refresh", action="store_true",
                        help=f"record the outputs of the cells tagged {MACHINE_DEPENDENT} anew")
    args = parser.parse_args(argv)
    for path in args.notebooks:
        kept, changed = execute(path, args.refresh)
        print(f"{path}: executed" + (f"; {kept} {MACHINE_DEPENDENT} cell(s) kept their outputs"
                                     if kept else ""), flush=True)
        if changed:
            print(f"{path}: the code of {MACHINE_DEPENDENT} cell(s) "
                  f"{', '.join(map(str, changed))} (counting cells from 0) changed since their "
                  f"outputs were recorded: every {MACHINE_DEPENDENT} cell recorded anew, as "
                  f"REFRESH=1 does", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
