"""A student's own submission_metadata.yml, uploaded with their notebook, overrides Gradescope's
(or attributes a notebook in a per-student LMS folder): mha-grade report reads one in SUBMISSIONS
*and in every folder directly inside it* (submission_NNN/ or alice/), and its keys
"<folder>/<file>" are looked up before the genuine "<folder>" key.

Run: cd /work/wt/attack && .venv/bin/python /work/wt/reviews-r3/attack/metadata_override.py
"""
import csv
import json
import sys
import tempfile
from pathlib import Path

sys.path[:0] = ["/work/wt/attack/tests"]
from test_report import CLASS, EXAMPLE, NAME, grader_files, run, student_nb  # noqa: E402

tmp = Path(tempfile.mkdtemp(prefix="attack-meta-"))
export = tmp / "export"  # Gradescope's "Export submissions" of one assignment
graded = {f"submission_11/{NAME}": CLASS["alice"],    # alice: 3 points, honest
          f"submission_12/{NAME}": CLASS["zed"]}      # mallory: 3 points too
for name, spec in graded.items():
    (export / name).parent.mkdir(parents=True)
    (export / name).write_text(json.dumps(student_nb(spec["answer"])))
grader_files(export, graded)
(export / "submission_metadata.yml").write_text(   # Gradescope's own file
    "submission_11:\n  :submitters:\n  - :name: Alice Archer\n    :email: alice@example.edu\n"
    "submission_12:\n  :submitters:\n  - :name: Mallory M\n    :email: mallory@example.edu\n")
# what mallory uploaded beside her notebook: credit her friend fred, who handed in nothing
(export / "submission_12" / "submission_metadata.yml").write_text(
    f"{NAME}:\n  :submitters:\n  - :name: Mallory M\n    :email: mallory@example.edu\n"
    "  - :name: Fred Friend\n    :email: fred@example.edu\n")
roster = tmp / "roster.csv"
roster.write_text("name,id,sis_user_id,login\nAlice Archer,1,A1,alice@example.edu\n"
                  "Mallory M,2,M2,mallory@example.edu\nFred Friend,3,F3,fred@example.edu\n")
assert run(export, "--out", tmp / "out", "--roster", roster, "--source", EXAMPLE) == 0
rows = list(csv.reader((tmp / "out" / "gradebook.csv").open()))
total = rows[0].index("total")
for row in rows:
    print(row[0], row[1], "total =", row[total])
print((tmp / "out" / "canvas_import.csv").read_text())

# Variant 2, the LMS layout (a folder per student): mallory's folder holds a 0-point notebook
# named exactly as the chapter and a submission_metadata.yml naming alice as its author; alice's
# own notebook carries a suffix (a re-submission, "-1"). Alice's 3 points become 0.
lms = tmp / "lms"
graded = {f"alice/{EXAMPLE.stem}-1.ipynb": CLASS["alice"], f"mallory/{NAME}": CLASS["carol"]}
for name, spec in graded.items():
    (lms / name).parent.mkdir(parents=True)
    (lms / name).write_text(json.dumps(student_nb(spec["answer"])))
grader_files(lms, graded)
(lms / "mallory" / "submission_metadata.yml").write_text(
    f"{NAME}:\n  :submitters:\n  - :name: alice\n    :email: alice\n")
assert run(lms, "--out", tmp / "out2", "--source", EXAMPLE) == 0
rows = list(csv.reader((tmp / "out2" / "gradebook.csv").open()))
total, notes = rows[0].index("total"), rows[0].index("notes")
for row in rows:
    print(row[0], "total =", row[total], "|", row[notes])
