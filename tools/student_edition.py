"""Write the student edition of the chapter notebooks (mha_grade.student_edition, which the
grader also uses).

    python tools/student_edition.py [--out _build/student/notebooks] [notebook ...]
"""
import sys

from mha_grade.student_edition import *  # noqa: F403 (tests import this module from tools/)
from mha_grade.student_edition import main

if __name__ == "__main__":
    sys.exit(main())
