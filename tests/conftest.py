import sys
from pathlib import Path

# let tests import the shared conventions module
sys.path.insert(0, str(Path(__file__).parent))

import pytest  # noqa: E402


@pytest.fixture(autouse=True)
def _not_in_grading_mode():
    """Grading mode (the hidden seed, and with it the checks' hidden parts) is process-wide: a
    test that runs `mha-grade grade`'s main in-process turns it on. The next test on the same
    worker must see a student's notebook again, whatever ran before it."""
    yield
    if "mha.exercises" in sys.modules:
        sys.modules["mha.exercises"].set_grading_seed(None)


# The files (each a scope of `--dist loadscope`, handed out in this order) that take longest,
# measured in `make test` (issue 28): started first, so that both workers end together rather
# than one running a long file alone at the end. The rest keep their order.
SLOW_FIRST = [
    "tests/test_grading_chapters.py", "tests/test_book_in_browser.py",
    "tests/test_grading_capture.py", "tests/test_grading_tamper.py",
    "tests/test_gradescope_tamper.py", "tests/test_grading.py", "tests/test_grading_attacks.py",
    "tests/test_gradescope.py", "notebooks/07_head_pruning.ipynb", "tests/test_grading_env.py",
    "tests/test_grading_limits.py", "notebooks/09_decoders.ipynb", "tests/test_cost.py",
    "notebooks/05_convolution.ipynb", "tests/test_position_task.py",
    "tests/test_gqa_uptraining.py", "notebooks/06_positional_encoding.ipynb",
]


def pytest_collection_modifyitems(items):
    rank = {path: i for i, path in enumerate(SLOW_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(SLOW_FIRST)))
