"""Hostile names (Gradescope metadata, folder names), messages and answers against the report's
pages and CSVs: markup, formulas, a path in the name. Expect: all escaped, nothing outside OUT.

Run: cd /work/wt/attack && .venv/bin/python /work/wt/reviews-r3/attack/report_injection.py
"""
import csv
import json
import re
import sys
import tempfile
from pathlib import Path

sys.path[:0] = ["/work/wt/attack/tests"]
from test_report import CLASS, EXAMPLE, NAME, grader_files, run, student_nb  # noqa: E402

tmp = Path(tempfile.mkdtemp(prefix="attack-inj-"))
export = tmp / "export"
evil = dict(CLASS["bob"], messages=("correct", '</td></table><script>alert(1)</script>'
                                    '<meta http-equiv="refresh" content="0;url=//x">'),
            problem="=HYPERLINK(\"http://x\",\"click\")", first_error="@SUM(1+1)")
graded = {f"submission_11/{NAME}": evil}
for name, spec in graded.items():
    (export / name).parent.mkdir(parents=True)
    answer = '</pre><img src=x onerror=alert(1)><script>alert(2)</script>\n-2+3'
    (export / name).write_text(json.dumps(student_nb(answer)))
grader_files(export, graded)
(export / "submission_metadata.yml").write_text(
    "submission_11:\n  :submitters:\n  - :name: '=cmd|'' /C calc''!A0'\n"
    "    :email: '../../../../tmp/pwned<script>@x'\n")
assert run(export, "--out", tmp / "out", "--source", EXAMPLE) == 0
pages = list((tmp / "out").rglob("*.html"))
bad = [(p.name, m) for p in pages for m in re.findall(r"<(?:script|img|meta http-equiv=.refresh)[^>]*>",
                                                      p.read_text())]
print("files written:", sorted(str(p.relative_to(tmp)) for p in tmp.rglob("*") if p.is_file()
                               and "export" not in p.parts))
print("live markup in pages:", bad)
for name in ("gradebook.csv", "canvas_import.csv", "by_hand/points.csv"):
    for row in csv.reader((tmp / "out" / name).open()):
        risky = [f for f in row if f and f[0] in "=+-@\t\r"]
        if risky:
            print(name, "formula-like fields:", risky)
print("CSP:", all("Content-Security-Policy" in p.read_text() for p in pages))
