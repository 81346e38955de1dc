"""A Gradescope autograder for the course, built on tools/grade.py.

    python tools/gradescope.py build [OUT.zip]          # make gradescope
    python tools/gradescope.py results GRADED RESULTS   # used by run_autograder

``build`` writes a zip with Gradescope's two entry points at its top (tools/autograder/setup.sh,
tools/autograder/run_autograder) and what they need: the course package's source (installed,
not editable, by setup.sh), the instructor's chapter notebooks (the checks' reference), the
grader and the pinned requirements. ``results`` turns the grader's grades.csv and
grading_log.csv into ``results.json`` in Gradescope's documented format: one test per exercise
(name, score, max_score, output), and the total score.
"""

from __future__ import annotations

import argparse
import csv
import json
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# what the autograder needs, relative to the repository
CONTENTS = ["pyproject.toml", "README.md", "binder/requirements.txt", "src/mha", "notebooks",
            "tools/grade.py", "tools/sandbox.py", "tools/run_notebook.py",
            "tools/exercise_format.py", "tools/student_edition.py", "tools/gradescope.py"]


def build(out: Path) -> Path:
    out.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as bundle:
        for name in ("setup.sh", "run_autograder"):
            info = zipfile.ZipInfo(name)
            info.external_attr = 0o100755 << 16  # a regular, executable file, as Gradescope needs
            bundle.writestr(info, (ROOT / "tools" / "autograder" / name).read_bytes())
        for entry in CONTENTS:
            path = ROOT / entry
            files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file()
                                                         and "__pycache__" not in p.parts)
            for file in files:
                bundle.write(file, file.relative_to(ROOT))
    return out


def results(graded: Path, out: Path) -> dict:
    with (graded / "grades.csv").open(newline="", encoding="utf-8") as handle:
        grades = list(csv.DictReader(handle))
    with (graded / "grading_log.csv").open(newline="", encoding="utf-8") as handle:
        log = {(r["notebook"], r["exercise"]): r for r in csv.DictReader(handle)}
    tests = []
    for row in grades:
        entry = log.get((row["notebook"], row["exercise"]), {})
        test = {"name": f"{row['notebook']}: exercise {row['exercise']}",
                "output": " ".join(filter(None, [entry.get("status", ""),
                                                 entry.get("message", ""),
                                                 entry.get("problem", "")]))}
        if row["max_points"]:  # exercises graded by hand have no points here
            test.update(score=float(row["points"] or 0), max_score=float(row["max_points"]))
        tests.append(test)
    report = {"score": sum(t.get("score", 0.0) for t in tests), "tests": tests,
              "visibility": "visible", "stdout_visibility": "hidden"}
    if not tests:
        report["output"] = "No notebook of the course was found in the submission."
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1), encoding="utf-8")
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    make = commands.add_parser("build", help="write the autograder zip")
    make.add_argument("out", type=Path, nargs="?", default=ROOT / "_build" / "gradescope.zip")
    convert = commands.add_parser("results", help="grades.csv + grading_log.csv -> results.json")
    convert.add_argument("graded", type=Path)
    convert.add_argument("out", type=Path)
    args = parser.parse_args()
    if args.command == "build":
        print(f"wrote {build(args.out)}")
    else:
        results(args.graded, args.out)


if __name__ == "__main__":
    main()
