"""Re-run notebooks in place, each in a fresh kernel (``make execute``), for authors refreshing the
committed outputs, without the churn of what only the machine decides.

A cell tagged ``machine-dependent`` (a timing, a measured memory, and the tables and figures drawn
from them) keeps its committed outputs: the cell still runs, so the cells after it see this run's
values, but a change elsewhere in the chapter stays a change of what it changed. ``--refresh``
(``make execute REFRESH=1``) records them anew; refresh them together, on a quiet machine.
Consecutive outputs of one stream are written as one output, however the kernel split them.

    python tools/execute.py notebooks/06_positional_encoding.ipynb [--refresh]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import nbformat
from nbclient import NotebookClient

MACHINE_DEPENDENT = "machine-dependent"


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


def execute(path: Path, refresh: bool = False, timeout: int = 600) -> int:
    """Run ``path`` in place; how many machine-dependent cells kept their outputs."""
    nb = nbformat.read(path, as_version=4)
    kept = {i: cell.outputs for i, cell in enumerate(nb.cells)
            if cell.cell_type == "code" and MACHINE_DEPENDENT in cell.metadata.get("tags", [])}
    NotebookClient(nb, timeout=timeout, record_timing=False,
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "code":
            cell.outputs = merged_streams(kept[i] if i in kept and not refresh else cell.outputs)
    nbformat.write(nb, path)
    return 0 if refresh else len(kept)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("notebooks", nargs="+", type=Path)
    parser.add_argument("--refresh", action="store_true",
                        help=f"record the outputs of the cells tagged {MACHINE_DEPENDENT} anew")
    args = parser.parse_args(argv)
    for path in args.notebooks:
        kept = execute(path, args.refresh)
        print(f"{path}: executed" + (f"; {kept} {MACHINE_DEPENDENT} cell(s) kept their outputs"
                                     if kept else ""), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
