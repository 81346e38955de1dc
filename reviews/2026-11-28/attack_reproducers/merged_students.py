"""Two different students whose keys differ only in punctuation or case (Gradescope e-mails
john.smith@uni.edu and johnsmith@uni.edu, or folders "JSmith" and "j-smith") are merged into
one gradebook row: the report keys students by norm(key) (letters and digits, lower case).
One of the two notebooks is then "handed in twice" and not counted; the other student vanishes.

Run: cd /work/wt/attack && .venv/bin/python /work/wt/reviews-r3/attack/merged_students.py
"""
import csv
import json
import sys
import tempfile
from pathlib import Path

sys.path[:0] = ["/work/wt/attack/tests"]
from test_report import CLASS, EXAMPLE, NAME, grader_files, run, student_nb  # noqa: E402

tmp = Path(tempfile.mkdtemp(prefix="attack-merge-"))
export = tmp / "export"
graded = {f"submission_11/{NAME}": CLASS["alice"], f"submission_12/{NAME}": CLASS["carol"]}
for name, spec in graded.items():
    (export / name).parent.mkdir(parents=True)
    (export / name).write_text(json.dumps(student_nb(spec["answer"])))
grader_files(export, graded)
(export / "submission_metadata.yml").write_text(
    "submission_11:\n  :submitters:\n  - :name: John Smith\n    :email: john.smith@uni.edu\n"
    "submission_12:\n  :submitters:\n  - :name: Jon Smith\n    :email: johnsmith@uni.edu\n")
for extra in ([], ["--roster"]):
    args = [export, "--out", tmp / f"out{len(extra)}", "--source", EXAMPLE]
    if extra:
        roster = tmp / "roster.csv"
        roster.write_text("name,id,sis_user_id,login\nJohn Smith,1,S1,john.smith@uni.edu\n"
                          "Jon Smith,2,S2,johnsmith@uni.edu\n")
        args += ["--roster", roster]
    run(*args)
    rows = list(csv.reader((tmp / f"out{len(extra)}" / "gradebook.csv").open()))
    total, notes = rows[0].index("total"), rows[0].index("notes")
    print("with roster" if extra else "without roster")
    for row in rows[1:]:
        print("  ", row[0], "| total =", row[total], "|", row[notes][:160])
