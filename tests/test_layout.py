"""The package's layout shows its architecture: every module sits in the group of its role, and a
group imports only the groups below it, so `layers` can be read (and reused) without the rest.

    _checks, diagrams          argument checks and the drawing kit: every group may use them
    layers                     attention itself
    tasks, analysis            toy tasks and data; tools that look at layers (not at each other)
    models                     whole models, trained on tasks, pruned with analysis
    figures                    pictures of any of the above
    exercises, answer_watch,   the course machinery
    checks
    mha (__init__)             the public names
"""

import ast
import importlib
import subprocess
import sys

import pytest

from conventions import ROOT

PACKAGE = ROOT / "src" / "mha"
RANK = {"foundation": 0, "layers": 1, "tasks": 2, "analysis": 2, "models": 3, "figures": 4,
        "course": 5, "mha": 6}
TOP_LEVEL = {"__init__.py": "mha", "_checks.py": "foundation", "diagrams.py": "foundation",
             "exercises.py": "course", "answer_watch.py": "course"}
# the flat names of the modules before they were grouped (2026-11), which readers' code uses
OLD_PATHS = {
    "layers": ["attention", "scoring", "single_head", "multi_head", "split_input", "kv_cache",
               "kv_sharing", "latent_attention", "rotary", "alibi", "positional", "chunked"],
    "tasks": ["lookup_task", "neighbour_task", "position_task", "similarity_pairs",
              "text_corpus"],
    "analysis": ["diagonal", "convolution", "pruning", "hard_concrete", "head_roles",
                 "content_heads", "pruning_curves", "bootstrap", "cost", "measure"],
    "models": ["encoder", "decoder", "seq2seq", "pretrained", "trained_models"],
    "figures": ["dataflow", "explorer"],
}


def modules() -> dict[str, object]:
    """Dotted name -> path of every module file of the package."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def group(name: str) -> str:
    """The role of module `name` (dotted, within mha)."""
    parts = name.split(".")
    if len(parts) == 1:
        return "mha"
    if parts[1] == "checks":
        return "course"
    if parts[1] in RANK and parts[1] not in ("course", "mha", "foundation"):
        return parts[1]
    return TOP_LEVEL.get(parts[1] + ".py", "unknown")


def imported(name: str, path) -> set[str]:
    """The modules of mha that the module imports, at the top or inside a function."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets = set()
    known = modules()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            for alias in node.names:  # `from mha import pretrained` imports a module
                full = f"{base}.{alias.name}"
                targets.add(full if full in known else base)
    return {t for t in targets if t == "mha" or t.startswith("mha.")}


def test_the_layout_sees_every_module_and_its_imports():
    found = modules()
    assert len(found) >= 40 and "mha.layers.multi_head" in found
    assert imported("mha.models.encoder", found["mha.models.encoder"]) >= {
        "mha.layers.multi_head", "mha.analysis.pruning", "mha._checks"}
    # the test itself can fail: a layer that imported a figure would be caught
    assert RANK[group("mha.figures.dataflow")] > RANK[group("mha.layers.rotary")]


def test_every_module_lives_in_the_group_of_its_role():
    stray = [name for name in modules() if group(name) == "unknown"]
    assert stray == [], f"put these in layers/tasks/analysis/models/figures: {stray}"


@pytest.mark.parametrize("name", sorted(modules()))
def test_a_group_imports_only_groups_below_it(name):
    path, mine = modules()[name], group(name)
    known = modules()
    for target in sorted(imported(name, path)):
        assert target in known, f"{name} imports {target}, which is not a module file (old path?)"
        theirs = group(target)
        if theirs == mine:
            continue
        assert RANK[theirs] < RANK[mine], (
            f"{name} ({mine}) imports {target} ({theirs}): a group imports only groups below it")


def test_the_old_flat_paths_are_the_modules_at_their_new_homes():
    import mha

    for home, names in OLD_PATHS.items():
        for name in names:
            new = importlib.import_module(f"mha.{home}.{name}")
            assert importlib.import_module(f"mha.{name}") is new
            assert new.__spec__.name == f"mha.{home}.{name}"
    # the two names that are both a module and a function stay the functions
    assert callable(mha.attention) and callable(mha.lookup_task)
    assert mha.pretrained is mha.models.pretrained and mha.cost is mha.analysis.cost


def test_an_old_path_not_imported_by_mha_loads_on_first_use_as_the_new_module():
    code = ("import sys, mha\n"
            "print('mha.tasks.similarity_pairs' in sys.modules)\n"
            "from mha.similarity_pairs import *\n"
            "import mha.similarity_pairs as old\n"
            "import mha.tasks.similarity_pairs as new\n"
            "print(old is new, new.__spec__.name, mha.similarity_pairs is new)\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["False", "True", "mha.tasks.similarity_pairs", "True"]


def test_review_reports_live_outside_the_tree_a_course_user_clones():
    """Outside reviews and their attack reproducers are kept in the review archive (the orphan
    branch reviews-archive); each reproducer's attack is a test in tests/. A reviews/ folder
    coming back, tracked or not, fails here."""
    assert not (ROOT / "reviews").exists()
    if not (ROOT / ".git").exists():  # an unpacked archive: the folder test above is all
        return
    tracked = subprocess.run(["git", "ls-files", "reviews"], cwd=ROOT, capture_output=True,
                             text=True, check=True).stdout
    assert tracked == ""
