"""The course's grader: submitted notebooks run in a sandbox, verdicts computed outside it.

One module per concern (``mha-grade <command>``, see ``cli``):

- ``submissions``: finding notebooks in a class folder, the chapter each is graded as, duplicates;
- ``assignments``: the instructor's chapter notebooks, their exercises and checks;
- ``sandbox`` and ``run_notebook``: the bubblewrap sandbox, and the runner inside it;
- ``run``: running one submission (the plan of its steps, the channel to the sandbox);
- ``compare``: verdicts and points per exercise;
- ``flags``: code that deserves a human look;
- ``outputs``: grades.csv and grading_log.csv (``.part`` files, ``--resume``);
- ``workers``: one grading process per submission at a time;
- ``grade``: the ``grade`` command; ``gradescope``: the Gradescope autograder.
"""

from __future__ import annotations

from pathlib import Path


def _course_root() -> Path:
    """The course repository this package's source is in (a clone, or Gradescope's
    /autograder/source after ``pip install``: then the current folder)."""
    here = Path(__file__).resolve().parents[2]
    if (here / "notebooks").is_dir() and (here / "pyproject.toml").is_file():
        return here
    return Path.cwd()


ROOT = _course_root()
