"""The package's layout shows its architecture: every module sits in the group of its role, and a
group imports only the groups below it, so `layers` can be read (and reused) without the rest.

    _validation, diagrams      argument validation and the drawing kit: every group may use them
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

from mha._old_paths import MOVED, SAME_NAME_AS_A_FUNCTION

from conventions import ROOT

PACKAGE = ROOT / "src" / "mha"
RANK = {"foundation": 0, "layers": 1, "tasks": 2, "analysis": 2, "models": 3, "figures": 4,
        "course": 5, "mha": 6}
TOP_LEVEL = {"__init__.py": "mha", "_validation.py": "foundation",
             "diagrams.py": "foundation",
             "exercises.py": "course", "answer_watch.py": "course", "_old_paths.py": "foundation"}


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
        "mha.layers.multi_head", "mha.analysis.pruning", "mha._validation"}
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


def test_the_old_paths_are_the_modules_at_their_new_homes_with_a_warning_naming_it():
    import mha

    for old, new_path in MOVED.items():
        new = importlib.import_module(new_path)
        if old in SAME_NAME_AS_A_FUNCTION:
            assert importlib.import_module(f"mha.{old}") is new
            continue
        sys.modules.pop(f"mha.{old}", None)  # a first import, whatever ran before
        with pytest.warns(DeprecationWarning, match=rf"mha\.{old} is an old path: import "
                                                    rf"{new_path} instead"):
            assert importlib.import_module(f"mha.{old}") is new
        assert new.__spec__.name == new_path
    # the two names that are both a module and a function stay the functions; the modules
    # that are public names of mha are those modules
    assert callable(mha.attention) and callable(mha.lookup_task)
    assert mha.pretrained is mha.models.pretrained and mha.cost is mha.analysis.cost


OLD_PATH_USES = """import sys, warnings
warnings.simplefilter("error", DeprecationWarning)
import mha
print("mha.tasks.similarity_pairs" in sys.modules)
for use in ("from mha.similarity_pairs import *", "import mha.kv_sharing",
            "mha.rotary", "from mha import decoder", "import mha._checks"):
    try:
        exec(use)
    except DeprecationWarning as warning:
        print(str(warning).replace(" ", "_"))
import mha.tasks.similarity_pairs as new
warnings.simplefilter("ignore", DeprecationWarning)
import mha.similarity_pairs as old
print(old is new, new.__spec__.name, mha.similarity_pairs is new, mha.models.decoder is mha.decoder)
"""


def test_an_old_path_imported_or_read_warns_with_its_new_path_in_a_fresh_process():
    """Only old paths warn: `import mha` and the new paths do not (the warnings are errors in
    this process), and an old path not imported by mha loads on first use as the new module."""
    run = subprocess.run([sys.executable, "-c", OLD_PATH_USES], capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == [
        "False",
        "mha.similarity_pairs_is_an_old_path:_import_mha.tasks.similarity_pairs_instead",
        "mha.kv_sharing_is_an_old_path:_import_mha.layers.kv_sharing_instead",
        "mha.rotary_is_an_old_path:_import_mha.layers.rotary_instead",
        "mha.decoder_is_an_old_path:_import_mha.models.decoder_instead",
        "mha._checks_is_an_old_path:_import_mha._validation_instead",
        "True", "mha.tasks.similarity_pairs", "True", "True"]


def test_the_warning_points_at_the_readers_line_so_a_notebook_shows_it():
    """Python shows a DeprecationWarning by default only when it is attributed to __main__ (a
    script or a notebook cell): the warning names the reader's file and line, not importlib's."""
    code = "import mha\nimport mha.multi_head\nx = mha.kv_cache\n"
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0, run.stderr
    assert "<string>:2: DeprecationWarning: mha.multi_head is an old path" in run.stderr
    assert "<string>:3: DeprecationWarning: mha.kv_cache is an old path" in run.stderr


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
