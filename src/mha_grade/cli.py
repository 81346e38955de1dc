"""``mha-grade <command> [options]``: the grader's console command.

    mha-grade grade SUBMISSIONS [options]     grade a class folder (grades.csv, grading_log.csv)
    mha-grade gradescope build|prepare|run    the Gradescope autograder
    mha-grade report ...                      the gradebook and feedback (mha_grade.report)

Each command is a module's ``main(argv)``, imported only when that command runs: ``grade``
needs none of the Gradescope code, and a command whose module is missing says so plainly.
"""

from __future__ import annotations

import importlib
import sys

# command -> (module, what it does)
COMMANDS = {
    "grade": ("mha_grade.grade", "grade every notebook of a class folder, each in a sandbox"),
    "gradescope": ("mha_grade.gradescope", "build the Gradescope autograder zip, or run it"),
    "report": ("mha_grade.report", "the gradebook, feedback files and by-hand pages"),
}


def usage() -> str:
    lines = ["usage: mha-grade <command> [options]   (mha-grade <command> -h for its options)",
             "", "commands:"]
    lines += [f"  {name:<11} {what}" for name, (_, what) in COMMANDS.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(usage())
        return 0 if argv else 2
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(f"mha-grade: unknown command {name!r}\n\n{usage()}", file=sys.stderr)
        return 2
    module_name = COMMANDS[name][0]
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        if error.name != module_name:  # the command exists but something it imports is missing
            raise
        print(f"mha-grade: the command {name!r} is not available in this version "
              f"(no module {module_name})", file=sys.stderr)
        return 2
    code = module.main(rest)
    return code if isinstance(code, int) else 0


if __name__ == "__main__":
    sys.exit(main())
