"""Kept for old commands: ``mha-grade grade`` (mha_grade.grade) is the grader."""
import sys

from mha_grade.grade import main

if __name__ == "__main__":
    sys.exit(main())
