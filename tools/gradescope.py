"""Kept for old commands: ``mha-grade gradescope`` (mha_grade.gradescope) is the autograder."""
import sys

from mha_grade.gradescope import main

if __name__ == "__main__":
    sys.exit(main())
