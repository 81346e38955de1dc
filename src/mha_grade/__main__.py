"""``python -m mha_grade <command>``: the same as ``mha-grade <command>``."""

import sys

from mha_grade.cli import main

sys.exit(main())
