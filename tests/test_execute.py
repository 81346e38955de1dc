"""``make execute`` (tools/execute.py): a re-run keeps the outputs of machine-dependent cells unless
asked to refresh them, and writes each stream as one output (issue 38: one printed number
changed made a 46-line diff)."""


import execute  # noqa: E402
import nbformat
import pytest

from conventions import NOTEBOOKS


def notebook(path, number):
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    timing = nbformat.v4.new_code_cell("import time\nprint(time.perf_counter_ns())")
    timing.metadata["tags"] = [execute.MACHINE_DEPENDENT]
    nb.cells = [timing,
                nbformat.v4.new_code_cell(f"print({number})"),
                nbformat.v4.new_code_cell("import sys\nfor i in range(3):\n"
                                          "    print(i, flush=True)\n    time.sleep(0.05)\n"
                                          "    print('err', file=sys.stderr, flush=True)")]
    nbformat.write(nb, path)


def outputs(path):
    return [cell.outputs for cell in nbformat.read(path, as_version=4).cells]


def test_a_rerun_changes_what_changed_and_keeps_what_the_machine_decides(tmp_path):
    path = tmp_path / "chapter.ipynb"
    notebook(path, 1)
    execute.main([str(path), "--refresh"])
    first = outputs(path)
    timing = first[0][0]["text"]
    notebook_source = nbformat.read(path, as_version=4)
    notebook_source.cells[1].source = "print(2)"  # the author changes one number
    nbformat.write(notebook_source, path)
    execute.main([str(path)])
    second = outputs(path)
    assert second[0][0]["text"] == timing  # the timing kept
    assert second[1][0]["text"] == "2\n"
    # the streams, however the kernel split them, one output each
    assert [(o["name"], o["text"]) for o in second[2]] == [
        ("stdout", "0\n"), ("stderr", "err\n"), ("stdout", "1\n"), ("stderr", "err\n"),
        ("stdout", "2\n"), ("stderr", "err\n")]
    execute.main([str(path), "--refresh"])
    assert outputs(path)[0][0]["text"] != timing


def test_a_machine_dependent_cell_whose_code_changed_is_recorded_anew(tmp_path, capsys):
    """Maintainer 48: the timing cell's code was edited to print more, and the loop kept its old
    output, which the new code cannot print. Every machine-dependent cell is then recorded
    anew (a table and its figure stay of one run)."""
    path = tmp_path / "chapter.ipynb"
    notebook(path, 1)
    nb = nbformat.read(path, as_version=4)
    other = nbformat.v4.new_code_cell("import time\nprint('other', time.perf_counter_ns())")
    other.metadata["tags"] = [execute.MACHINE_DEPENDENT]
    nb.cells.append(other)
    nbformat.write(nb, path)
    execute.main([str(path), "--refresh"])
    before = outputs(path)
    nb = nbformat.read(path, as_version=4)
    nb.cells[0].source = "import time\nprint('ns', time.perf_counter_ns())"  # the edit
    nbformat.write(nb, path)
    execute.main([str(path)])
    after = outputs(path)
    assert after[0][0]["text"].startswith("ns ")  # this code's output, not the old one
    assert after[3][0]["text"] != before[3][0]["text"]  # the other one too, with it
    assert "cell(s) 0 (counting cells from 0) changed since their outputs were recorded" in \
        capsys.readouterr().out
    execute.main([str(path)])  # and then kept, as before
    assert outputs(path)[3][0]["text"] == after[3][0]["text"]
    cells = nbformat.read(path, as_version=4).cells
    assert cells[0].metadata[execute.RECORDED_FROM] == execute.fingerprint(cells[0].source)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_every_machine_dependent_output_comes_from_the_code_beside_it(path):
    """A machine-dependent cell's committed outputs were recorded from its committed code: its
    fingerprint says so (make chapter / make execute write it, and record a changed cell
    anew). An edit committed without running the loop fails here."""
    stale = [i for i, cell in enumerate(nbformat.read(path, as_version=4).cells)
             if cell.cell_type == "code" and execute.MACHINE_DEPENDENT in cell.metadata.get(
                 "tags", []) and cell.metadata.get(execute.RECORDED_FROM)
             != execute.fingerprint(cell.source)]
    assert stale == [], (f"{path.name}: the code of machine-dependent cell(s) {stale} (counting "
                         f"from 0) is not the code their outputs came from: run `make chapter "
                         f"CHAPTER={path.name[:2]}`, which records them anew")


def test_consecutive_outputs_of_one_stream_are_merged():
    split = [{"output_type": "stream", "name": "stdout", "text": "a"},
             {"output_type": "stream", "name": "stdout", "text": "b\n"},
             {"output_type": "display_data", "data": {}, "metadata": {}},
             {"output_type": "stream", "name": "stdout", "text": "c\n"}]
    assert [o.get("text") for o in execute.merged_streams(split)] == ["ab\n", None, "c\n"]


TIMERS = ("perf_counter", "timeit", "time.time(", "process_time", "tracemalloc",
          "measure.time_call", "measure.peak_memor")


def test_the_package_timers_named_above_exist():
    """Maintainer 48: a renamed timer left here by name would stop this file's check quietly."""
    import mha.analysis.measure as measure

    named = [t.removeprefix("measure.") for t in TIMERS if t.startswith("measure.")]
    assert named and all(any(n.startswith(t) for n in dir(measure)) for t in named), named


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_every_uncompared_cell_that_measures_the_machine_is_tagged_machine_dependent(path):
    """A timing nbval does not compare, re-run, would otherwise move with each execution."""
    untagged = [i for i, cell in enumerate(nbformat.read(path, as_version=4).cells)
                if cell.cell_type == "code" and any(t in cell.source for t in TIMERS)
                and "nbval-ignore-output" in cell.metadata.get("tags", [])
                and execute.MACHINE_DEPENDENT not in cell.metadata.get("tags", [])]
    assert untagged == [], f"{path.name}: cells {untagged} measure the machine; tag them " \
                           f"{execute.MACHINE_DEPENDENT} (CONTRIBUTING.md)"
