"""`mha-grade report`: gradebook, Canvas import, feedback per student, by-hand pages and points.

The class is built here from the example chapter (tests/fixtures/00_example_exercises.ipynb:
0.1 by hand, 0.2 one point, 0.3 two points): the student edition with answers written in, and a
grades.csv and grading_log.csv written as the grader writes them, so the expected numbers are
the ones put in, not the report's. One test runs the real grader first (the end-to-end test).
"""

from __future__ import annotations

import base64
import csv
import functools
import json
import os
import re
import shutil
import subprocess
import sys
import time
from html.parser import HTMLParser

import jupyter_edition  # tools/
import pytest
import student_jupyter_edition  # tools/
from exercise_notebooks import EXAMPLE, WITH_EXERCISES, fmt, student_edition

from mha_grade import by_hand, copies, late, pdf, report, rubric
from mha_grade._shared import cell, display
from mha_grade.feedback import file_name
from mha_grade.grade import main as grade_main
from mha_grade.gradebook import CANVAS_HEADER, POINTS_POSSIBLE, owner_of

from conventions import ROOT

NAME = EXAMPLE.name
STEM = EXAMPLE.stem
GRADES_HEADER = ["notebook", "exercise", "points", "max_points"]
LOG_HEADER = ["notebook", "exercise", "status", "message", "seconds", "errors", "flags",
              "problem", "first_error", "parts"]
FAILED_FIRST = "cell 1: ModuleNotFoundError: No module named 'mha'"
NOT_DEFINED = "NameError: name 'mha' is not defined"
HOSTILE = "<script>alert('x')</script> $\\frac{a}{b}$ =1+1"


def student_nb(answer_01=None, extra=None):
    """The student edition of the example chapter, with an answer to 0.1 (and a cell the
    student added below it)."""
    nb = student_edition.student_edition(fmt.load(EXAMPLE))
    cells = nb["cells"]
    position = next(i for i, c in enumerate(cells) if c.get("id") == "answer-ex-00-1")
    if answer_01 is not None:
        cells[position]["source"] = answer_01
    if extra is not None:
        cells.insert(position + 1, {"cell_type": "code", "metadata": {}, "outputs": [
            {"output_type": "stream", "name": "stdout", "text": "printed <b>bold</b>\n"}],
            "execution_count": 1, "source": extra, "id": "added"})
    return nb


# what each student handed in and what the grader said: (0.2 points, 0.3 points, statuses...)
CLASS = {
    "alice": dict(answer="Adding c multiplies every exp by e^c. " + HOSTILE, extra="print(1)",
                  points=(1, 2), status=("correct", "correct"), messages=("correct", "correct")),
    "bob": dict(answer="I think it changes.", points=(1, 0), status=("correct", "wrong"),
                messages=("correct", "for n = 3: <img src=x onerror=alert(1)> the transpose")),
    "carol": dict(answer=None, points=(0, 0), status=("not done", "not done"),
                  messages=("not done yet", "not done yet")),
    "dave": dict(answer="My notebook fails at the top.", points=(0, 0),
                 status=("error", "error"), messages=(NOT_DEFINED, NOT_DEFINED),
                 first_error=FAILED_FIRST),
    "zed": dict(answer="Not on the roster, still graded.", points=(1, 2),
                status=("correct", "correct"), messages=("correct", "correct")),
}
ROSTER = [("Alice Archer", "1001", "S1", "alice", "A"), ("Bob Baker", "1002", "S2", "bob", "A"),
          ("Carol Cole", "1003", "S3", "carol", "B"), ("Dave Dunn", "1004", "S4", "dave", "B"),
          ("Erin Evans", "1005", "S5", "erin", "B")]


def write_csv(path, header, rows):
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=header, lineterminator="\n")
        writer.writeheader()
        writer.writerows([{k: cell(v) for k, v in row.items()} for row in rows])


def grader_files(folder, graded):
    """grades.csv and grading_log.csv as the grader writes them, for notebooks
    ``{relative path: spec}``."""
    grades, log = [], []
    for name, spec in graded.items():
        shown = display(name)
        grades.append({"notebook": shown, "exercise": "0.1", "points": "", "max_points": ""})
        log.append({"notebook": shown, "exercise": "0.1", "status": "by hand", "message": "",
                    "seconds": "3.0", "errors": 0, "flags": spec.get("flags", ""),
                    "problem": spec.get("problem", ""),
                    "first_error": spec.get("first_error", "")})
        for index, (exercise, most) in enumerate((("0.2", 1), ("0.3", 2))):
            grades.append({"notebook": shown, "exercise": exercise,
                           "points": spec["points"][index], "max_points": most})
            log.append({"notebook": shown, "exercise": exercise,
                        "status": spec["status"][index], "message": spec["messages"][index],
                        "seconds": "3.0", "errors": 0, "flags": spec.get("flags", ""),
                        "problem": spec.get("problem", ""),
                        "first_error": spec.get("first_error", ""),
                        "parts": spec.get("parts", ("", ""))[index]})
    write_csv(folder / "grades.csv", GRADES_HEADER, grades)
    write_csv(folder / "grading_log.csv", LOG_HEADER, log)


def make_class(tmp_path, layout="folders"):
    folder = tmp_path / "submissions"
    folder.mkdir()
    graded = {}
    for who, spec in CLASS.items():
        relative = f"{who}/{NAME}" if layout == "folders" else f"{who}_{NAME}"
        path = folder / relative
        path.parent.mkdir(exist_ok=True)
        path.write_text(json.dumps(student_nb(spec["answer"], spec.get("extra"))))
        graded[relative] = spec
    grader_files(folder, graded)
    roster = tmp_path / "roster.csv"
    with roster.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["Student", "ID", "SIS User ID", "SIS Login ID", "Section",
                         f"{STEM} (777)"])
        writer.writerow([POINTS_POSSIBLE, "", "", "", "", "4"])
        writer.writerows([[*r, ""] for r in ROSTER])
    return folder, roster


def run(*args):
    return report.main([str(a) for a in args])


def rows_of(path):
    with path.open(newline="", encoding="utf-8") as handle:
        return list(csv.reader(handle))


def by_student(path):
    rows = rows_of(path)
    header = rows[0]
    return header, {r[0]: dict(zip(header, r, strict=True)) for r in rows[1:]}


@pytest.fixture
def reported(tmp_path, capsys):
    folder, roster = make_class(tmp_path)
    out = tmp_path / "out"
    code = run(folder, "--roster", roster, "--out", out, "--source", EXAMPLE)
    printed = capsys.readouterr()
    assert code == 0, printed.err
    return {"folder": folder, "roster": roster, "out": out, "printed": printed.out}


# ---------------------------------------------------------------------------------------------
# Who is who

@pytest.mark.parametrize("notebook, key, name, canvas_id", [
    (f"alice/{NAME}", "alice", "alice", ""),
    (f"submission_123/sub/{NAME}", "submission_123", "submission_123", ""),
    (f"alice_{NAME}", "alice", "alice", ""),
    (f"Alice Archer - {NAME}", "Alice Archer", "Alice Archer", ""),
    (f"archeralice_1001_5001_{NAME}", "canvas-1001", "archeralice", "1001"),
    (f"archeralice_late_1001_5002_{STEM}-1.ipynb", "canvas-1001", "archeralice", "1001"),
    ("alice_copy.ipynb", "alice", "alice", ""),  # renamed: graded by its labels
])
def test_a_notebook_belongs_to_its_folder_its_canvas_id_or_its_name_prefix(notebook, key, name,
                                                                           canvas_id):
    owner = owner_of(notebook, STEM)
    assert (owner.key, owner.name, owner.canvas_id) == (key, name, canvas_id)


# ---------------------------------------------------------------------------------------------
# The gradebook

def test_the_gradebook_has_a_row_per_student_with_the_graders_points_and_totals(reported):
    header, rows = by_student(reported["out"] / "gradebook.csv")
    assert header[:6] == ["student", "name", "id", "sis_user_id", "login", "section"]
    assert header[6:10] == ["0.1 (by hand)", "0.2", "0.3", f"{STEM} total"]
    top = rows["max points"]
    assert (top["0.1 (by hand)"], top["0.2"], top["0.3"], top[f"{STEM} total"]) == \
        ("1", "1", "2", "4")
    # roster students by their login, the one not on it by its folder
    assert set(rows) == {"max points", "alice", "bob", "carol", "dave", "erin", "zed"}
    for who, spec in CLASS.items():
        row = rows[who]
        auto = sum(spec["points"])
        assert (row["0.2"], row["0.3"]) == tuple(str(p) for p in spec["points"]), who
        assert row["0.1 (by hand)"] == "", who  # handed in, not graded yet
        assert (row["autograded"], row["by hand"], row["total"]) == (str(auto), "0", str(auto))
        assert row[f"{STEM} total"] == str(auto)
        assert "by hand, not graded yet: 0.1" in row["notes"]
    erin = rows["erin"]
    assert (erin["name"], erin["id"], erin["section"]) == ("Erin Evans", "1005", "B")
    assert [erin[k] for k in ("0.1 (by hand)", "0.2", "0.3", "total")] == ["0", "0", "0", "0"]
    assert "handed in nothing" in erin["notes"]
    assert "not on the roster" in rows["zed"]["notes"] and rows["zed"]["id"] == ""
    assert rows["alice"]["name"] == "Alice Archer" and rows["alice"]["id"] == "1001"
    assert rows["alice"]["feedback"] == f"feedback/{file_name('alice')}"
    assert (reported["out"] / rows["erin"]["feedback"]).is_file()
    # one a line, with the login to find them by (instructor's term, L3)
    assert "handed in nothing (1):\n  Erin Evans (erin)\n" in reported["printed"]
    assert "not on the roster (1):\n  zed\n" in reported["printed"]
    assert (reported["out"] / "summary.txt").read_text() == reported["printed"]


def test_the_canvas_file_follows_canvas_import_format(reported):
    rows = rows_of(reported["out"] / "canvas_import.csv")
    # the roster (a Canvas export) has the chapter's column: its assignment id is reused
    assert rows[0] == CANVAS_HEADER + [f"{STEM} (777)"]
    assert rows[1] == [POINTS_POSSIBLE, "", "", "", "", "4"]
    body = {r[1]: r for r in rows[2:]}
    assert body["1001"] == ["Alice Archer", "1001", "S1", "alice", "A", "3"]
    assert body["1002"][5] == "1" and body["1003"][5] == "0" and body["1004"][5] == "0"
    assert body["1005"] == ["Erin Evans", "1005", "S5", "erin", "B", "0"]
    assert len(rows) == 2 + 5  # zed has no Canvas id: left out, and said so
    assert "canvas_import.csv leaves out 1 student(s) with no Canvas id, SIS id or login" \
        in reported["printed"] and reported["printed"].rstrip().endswith(": zed")


def test_missing_work_is_zero_in_canvas_or_blank_when_asked(reported, capsys):
    def erin():
        return next(r for r in rows_of(reported["out"] / "canvas_import.csv") if r[1] == "1005")
    assert erin()[5] == "0"
    assert run(reported["folder"], "--roster", reported["roster"], "--out", reported["out"],
               "--source", EXAMPLE, "--blank-missing") == 0
    assert erin()[5] == ""
    carol = next(r for r in rows_of(reported["out"] / "canvas_import.csv") if r[1] == "1003")
    assert carol[5] == "0"  # handed in, scored 0: a zero
    capsys.readouterr()


def test_a_canvas_download_is_matched_by_canvas_id_and_a_flat_folder_by_name(tmp_path, capsys):
    folder = tmp_path / "canvas"
    folder.mkdir()
    graded = {f"archeralice_1001_5001_{NAME}": CLASS["alice"],
              f"bakerbob_late_1002_5002_{STEM}-1.ipynb": CLASS["bob"],
              f"Carol Cole_{NAME}": CLASS["carol"]}
    for name, spec in graded.items():
        (folder / name).write_text(json.dumps(student_nb(spec["answer"])))
    grader_files(folder, graded)
    roster = tmp_path / "roster.csv"
    with roster.open("w", newline="") as handle:  # a plain roster, not Canvas's export
        csv.writer(handle).writerows([["name", "id", "login"], *[r[:2] + r[3:4] for r in ROSTER]])
    assert run(folder, "--roster", roster, "--out", tmp_path / "out", "--source", EXAMPLE,
               "--canvas-column", "00=Chapter zero (42)") == 0
    printed = capsys.readouterr().out
    _, rows = by_student(tmp_path / "out" / "gradebook.csv")
    assert (rows["alice"]["0.3"], rows["bob"]["0.3"], rows["carol"]["0.2"]) == ("2", "0", "0")
    assert "not on the roster" not in printed
    assert "handed in nothing (2):\n  Dave Dunn (dave)\n  Erin Evans (erin)\n" in printed
    assert rows_of(tmp_path / "out" / "canvas_import.csv")[0][-1] == "Chapter zero (42)"


def test_with_a_roster_a_student_not_on_it_stays_out_of_the_canvas_file(tmp_path, capsys):
    """#39 L10: in a Canvas download, an id read from a file name is not Canvas's word: a student
    the roster does not have is graded in gradebook.csv but left out of canvas_import.csv, and
    named, so no grade goes to whoever that id is."""
    folder = tmp_path / "canvas"
    folder.mkdir()
    graded = {f"archeralice_1001_5001_{NAME}": CLASS["alice"],
              f"zedzed_1999_5009_{NAME}": CLASS["zed"]}
    for name, spec in graded.items():
        (folder / name).write_text(json.dumps(student_nb(spec["answer"])))
    grader_files(folder, graded)
    roster = tmp_path / "roster.csv"
    with roster.open("w", newline="") as handle:
        csv.writer(handle).writerows([["name", "id", "login"], *[r[:2] + r[3:4] for r in ROSTER]])
    assert run(folder, "--roster", roster, "--out", tmp_path / "out", "--source", EXAMPLE) == 0
    printed = capsys.readouterr().out
    _, rows = by_student(tmp_path / "out" / "gradebook.csv")
    zed = rows["canvas-1999"]  # the key a Canvas id gives
    assert "not on the roster" in zed["notes"] and zed["total"] == str(sum(CLASS["zed"]["points"]))
    canvas_ids = [r[1] for r in rows_of(tmp_path / "out" / "canvas_import.csv")[2:]]
    assert "1001" in canvas_ids and "1999" not in canvas_ids
    assert "canvas_import.csv leaves out 1 student(s) not on the roster" in printed


def test_a_gradescope_export_names_its_students_and_credits_every_group_member(tmp_path):
    """Gradescope's export (here one folder per assignment inside SUBMISSIONS): its
    submission_metadata.yml names each submission's students; a student is known by e-mail."""
    folder = tmp_path / "class"
    export = folder / "chapter00"
    graded = {f"chapter00/submission_11/{NAME}": CLASS["alice"],
              f"chapter00/submission_12/{NAME}": CLASS["bob"],
              f"chapter00/submission_13/{NAME}": CLASS["carol"]}
    for name, spec in graded.items():
        (folder / name).parent.mkdir(parents=True)
        (folder / name).write_text(json.dumps(student_nb(spec["answer"])))
    grader_files(folder, graded)
    (export / "submission_metadata.yml").write_text(
        "submission_11:\n  :submitters:\n  - :name: Alice Archer\n    :sid: '100'\n"
        "    :email: alice@example.edu\n"
        "submission_12:\n  :submitters:\n  - :name: Bob Baker\n    :sid: '200'\n"
        "    :email: bob@example.edu\n  - :name: Dave Dunn\n    :sid: '400'\n"
        "    :email: dave@example.edu\n")
    assert run(folder, "--out", tmp_path / "out", "--source", EXAMPLE) == 0
    _, rows = by_student(tmp_path / "out" / "gradebook.csv")
    assert set(rows) == {"max points", "alice@example.edu", "bob@example.edu",
                         "dave@example.edu", "chapter00/submission_13"}
    assert rows["alice@example.edu"]["name"] == "Alice Archer"
    assert rows["alice@example.edu"]["sis_user_id"] == "100"
    assert rows["alice@example.edu"]["total"] == "3"
    # a group's submission counts for each member
    assert rows["bob@example.edu"]["total"] == rows["dave@example.edu"]["total"] == "1"
    # a submission the metadata does not name: its own folder, as without a roster
    assert rows["chapter00/submission_13"]["total"] == "0"
    # with a roster, matched by e-mail or SIS id
    roster = tmp_path / "roster.csv"
    roster.write_text("name,sis_user_id,login\nAlice Archer,100,aa\nDave Dunn,,dave@example.edu\n")
    assert run(folder, "--roster", roster, "--out", tmp_path / "out2", "--source", EXAMPLE) == 0
    _, rows = by_student(tmp_path / "out2" / "gradebook.csv")
    assert rows["aa"]["total"] == "3" and rows["dave@example.edu"]["total"] == "1"
    assert "not on the roster" in rows["bob@example.edu"]["notes"]


GRADESCOPE_METADATA = (
    "submission_11:\n  :submitters:\n  - :name: Alice Archer\n    :email: alice@example.edu\n"
    "submission_12:\n  :submitters:\n  - :name: Mallory M\n    :email: mallory@example.edu\n")


def test_a_metadata_file_a_student_hands_in_names_nobody(tmp_path, capsys):
    """Attack (round 3, #2): mallory uploads a submission_metadata.yml beside her notebook,
    crediting her friend fred, who handed in nothing. Only Gradescope's own file, at the top of
    the export, names students: fred gets 0, mallory her 3."""
    export = tmp_path / "export"
    graded = {f"submission_11/{NAME}": CLASS["alice"], f"submission_12/{NAME}": CLASS["zed"]}
    for name, spec in graded.items():
        (export / name).parent.mkdir(parents=True)
        (export / name).write_text(json.dumps(student_nb(spec["answer"])))
    grader_files(export, graded)
    (export / "submission_metadata.yml").write_text(GRADESCOPE_METADATA)
    (export / "submission_12" / "submission_metadata.yml").write_text(
        f"{NAME}:\n  :submitters:\n  - :name: Mallory M\n    :email: mallory@example.edu\n"
        "  - :name: Fred Friend\n    :email: fred@example.edu\n"
        "submission_12:\n  :submitters:\n  - :name: Fred Friend\n    :email: fred@example.edu\n")
    roster = tmp_path / "roster.csv"
    roster.write_text("name,id,sis_user_id,login\nAlice Archer,1,A1,alice@example.edu\n"
                      "Mallory M,2,M2,mallory@example.edu\nFred Friend,3,F3,fred@example.edu\n")
    assert run(export, "--out", tmp_path / "out", "--roster", roster, "--source", EXAMPLE) == 0
    _, rows = by_student(tmp_path / "out" / "gradebook.csv")
    assert set(rows) == {"max points", "alice@example.edu", "mallory@example.edu",
                         "fred@example.edu"}
    assert [rows[f"{who}@example.edu"]["total"] for who in ("alice", "mallory", "fred")] == \
        ["3", "3", "0"]
    assert "handed in nothing" in rows["fred@example.edu"]["notes"]
    canvas = {r[3]: r[5] for r in rows_of(tmp_path / "out" / "canvas_import.csv")[2:]}
    assert canvas == {"alice@example.edu": "3", "mallory@example.edu": "3",
                      "fred@example.edu": "0"}
    capsys.readouterr()


def test_a_metadata_file_in_a_students_folder_moves_no_notebook(tmp_path, capsys):
    """Attack (round 3, #2), the LMS layout (a folder per student): mallory's folder holds a
    0-point notebook named as the chapter and a submission_metadata.yml naming alice as its
    author (also as a fake submission_NNN folder); alice's own copy is "-1". The file is not
    read (and said so): alice keeps her 3 points, mallory has her own row."""
    folder = tmp_path / "lms"
    graded = {f"alice/{STEM}-1.ipynb": CLASS["alice"], f"mallory/{NAME}": CLASS["carol"],
              f"mallory/submission_1/{NAME}": CLASS["carol"]}
    for name, spec in graded.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(json.dumps(student_nb(spec["answer"])))
    grader_files(folder, graded)
    (folder / "mallory" / "submission_metadata.yml").write_text(
        f"{NAME}:\n  :submitters:\n  - :name: alice\n    :email: alice\n"
        "submission_1:\n  :submitters:\n  - :name: alice\n    :email: alice\n")
    assert run(folder, "--out", tmp_path / "out", "--source", EXAMPLE) == 0
    _, rows = by_student(tmp_path / "out" / "gradebook.csv")
    assert set(rows) == {"max points", "alice", "mallory"}
    assert (rows["alice"]["total"], rows["mallory"]["total"]) == ("3", "0")
    assert "handed in twice" not in rows["alice"]["notes"]
    assert "submission_metadata.yml in mallory not read" in capsys.readouterr().out


MERGED_METADATA = (
    "submission_11:\n  :submitters:\n  - :name: John Smith\n    :email: john.smith@uni.edu\n"
    "submission_12:\n  :submitters:\n  - :name: Jon Smith\n    :email: JohnSmith@uni.edu\n"
    "submission_13:\n  :submitters:\n  - :name: Jon Smith\n    :email: johnsmith@UNI.edu\n")


@pytest.mark.parametrize("with_roster", [False, True], ids=["no roster", "roster"])
def test_students_whose_keys_differ_in_dots_or_case_are_two_students(tmp_path, capsys,
                                                                     with_roster):
    """Attack (round 3, #3): john.smith@ and johnsmith@ are two students, each with their own
    notebook and points (an e-mail is compared without case only: Jon's two submissions are
    his, handed in twice); with a roster each is matched by login, and Canvas gets one row per
    login."""
    export = tmp_path / "export"
    graded = {f"submission_11/{NAME}": CLASS["alice"], f"submission_12/{NAME}": CLASS["bob"],
              f"submission_13/{STEM}-1.ipynb": CLASS["carol"]}
    for number, (name, spec) in enumerate(graded.items()):
        (export / name).parent.mkdir(parents=True)
        (export / name).write_text(json.dumps(student_nb(spec["answer"])))
        os.utime(export / name, (1.7e9 - number, 1.7e9 - number))  # 12 after 13
    grader_files(export, graded)
    (export / "submission_metadata.yml").write_text(MERGED_METADATA)
    args = [export, "--out", tmp_path / "out", "--source", EXAMPLE]
    if with_roster:
        roster = tmp_path / "roster.csv"
        roster.write_text("name,id,sis_user_id,login\nJohn Smith,1,S1,john.smith@uni.edu\n"
                          "Jon Smith,2,S2,johnsmith@uni.edu\n")
        args += ["--roster", roster]
    assert run(*args) == 0
    _, rows = by_student(tmp_path / "out" / "gradebook.csv")
    john, jon = ("john.smith@uni.edu", "johnsmith@uni.edu") if with_roster else \
        ("john.smith@uni.edu", "JohnSmith@uni.edu")
    assert set(rows) == {"max points", john, jon}
    assert (rows[john]["total"], rows[jon]["total"]) == ("3", "1")
    assert "handed in twice" not in rows[john]["notes"]
    assert f"submission_12/{NAME} counted (handed in last, by the files' modification " \
        "times; --copies latest)" in rows[jon]["notes"]
    if with_roster:
        assert "not on the roster" not in rows[john]["notes"] + rows[jon]["notes"]
        canvas = rows_of(tmp_path / "out" / "canvas_import.csv")[2:]
        assert sorted((r[3], r[5]) for r in canvas) == [(john, "3"), (jon, "1")]
    capsys.readouterr()


def test_a_roster_entry_two_submissions_match_stops_the_report_until_resolved(tmp_path,
                                                                             capsys):
    """Folders "john-smith" and "John_Smith" both match the roster's John Smith by name: the
    report stops before it writes anything and names both (neither is taken for him, and he
    gets no silent 0 for "handed in nothing"); --match settles it as the instructor says."""
    folder = tmp_path / "folders"
    graded = {f"john-smith/{NAME}": CLASS["alice"], f"John_Smith/{NAME}": CLASS["bob"],
              f"Carol Cole/{NAME}": CLASS["carol"]}
    for name, spec in graded.items():
        (folder / name).parent.mkdir(parents=True)
        (folder / name).write_text(json.dumps(student_nb(spec["answer"])))
    grader_files(folder, graded)
    roster = tmp_path / "roster.csv"
    roster.write_text("name,id,login\nJohn Smith,1,jsmith\nCarol Cole,3,ccole\n")
    args = [folder, "--out", tmp_path / "out", "--source", EXAMPLE, "--roster", roster]
    assert run(*args) == 2
    err = capsys.readouterr().err
    assert "\n  'John_Smith', 'john-smith' all match John Smith (jsmith) on the roster\n" in err
    assert "\\u000a" not in err  # the message's own line breaks are line breaks
    assert "--match KEY=LOGIN" in err and not (tmp_path / "out").exists()
    assert run(*args, "--match", "John_Smith=jsmith", "--match", "john-smith=") == 0
    _, rows = by_student(tmp_path / "out" / "gradebook.csv")
    assert set(rows) == {"max points", "jsmith", "ccole", "john-smith"}
    assert (rows["jsmith"]["total"], rows["john-smith"]["total"]) == ("1", "3")
    assert "not on the roster" in rows["john-smith"]["notes"]
    assert "not on the roster" not in rows["ccole"]["notes"]  # one name match: taken
    assert run(*args, "--match", "Jon=jsmith") == 2
    assert "--match names no submission: 'Jon'" in capsys.readouterr().err


def test_one_student_under_two_layouts_of_the_class_folder_is_one_student():
    """Instructor 47: chapter 1 from a Canvas download (the key is the Canvas id) and chapter 9
    in folders named by login: both keys match Alice exactly, and the report stopped for every
    student, even with the --match its message suggested. Keys that match one student by a
    login or an id, each with other chapters, are that student; look-alike keys, a match by
    name, or one chapter under two keys still stop it, and --match settles those."""
    from mha_grade.copies import Owner
    from mha_grade.gradebook import Ambiguous, Matcher, Notebook, Student, _match

    alice = Student("alice", "Alice Archer", "1001", "", "alice", on_roster=True)
    roster = [alice, Student("bob", "Bob Baker", "1002", "", "bob", on_roster=True)]
    canvas = Owner("canvas-1001", "archeralice", "1001")

    def matched(owners, chosen=None):
        return _match([(Notebook(f"{o.key}/{ch}.ipynb", ch), o) for o, ch in owners],
                      Matcher(roster), roster, chosen or {})

    found = matched([(canvas, "01"), (Owner("alice", "alice"), "09")])
    assert found["canvas-1001"] is alice and found["alice"] is alice
    for owners in ([(canvas, "01"), (Owner("alice", "alice"), "01")],  # one chapter twice
                   [(Owner("ALICE", "ALICE"), "01"), (Owner("alice", "alice"), "09")],  # alike
                   [(canvas, "01"), (Owner("Alice Archer", "Alice Archer"), "09")]):  # by name
        with pytest.raises(Ambiguous, match="all match Alice Archer"):
            matched(owners)
    # the instructor's word settles a key, which then claims nobody else's place
    owners = [(canvas, "01"), (Owner("Alice Archer", "Alice Archer"), "01")]
    found = matched(owners, {"Alice Archer": "alice"})
    assert found["Alice Archer"] is alice and found["canvas-1001"] is alice


def planted(tmp_path, folders, roster=None):
    """A class of ``{folder: spec}`` (each the example chapter), written in that order, one
    second apart; the report's exit status, and its stderr."""
    folder = tmp_path / "class"
    graded = {}
    for number, (who, (name, spec)) in enumerate(folders.items()):
        path = folder / who / name
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps(student_nb(spec["answer"])))
        os.utime(path, (1.7e9 + number, 1.7e9 + number))
        graded[f"{who}/{name}"] = spec
    grader_files(folder, graded)
    args = [folder, "--out", tmp_path / "out", "--source", EXAMPLE]
    if roster:
        (tmp_path / "roster.csv").write_text(roster)
        args += ["--roster", tmp_path / "roster.csv"]
    return run(*args), args


ALICE_ROSTER = "name,id,login\nAlice Smith,1001,alice\nBob Baker,1002,bob\n"


@pytest.mark.parametrize("planted_as, mine, roster", [
    ("ALICE", "alice", ALICE_ROSTER),  # one login once case is folded
    ("ＡＬＩＣＥ ＳＭＩＴＨ", "Alice Smith", ALICE_ROSTER),  # one name after NFKD
    ("ＡＬＩＣＥ ＳＭＩＴＨ", "Alice Smith", None),  # alike, with no roster to tell them
    (" alice", "alice", None),  # a leading space
    (" alice", "alice", ALICE_ROSTER),
])
def test_a_planted_look_alike_folder_stops_the_report(tmp_path, capsys, planted_as, mine,
                                                      roster):
    """Issue 35, items 5 and 6: a 0-point copy named as the chapter, handed in after Alice's
    own, in a folder that matches or looks like hers: neither displaces the other, and Alice
    gets no 0; the report stops, naming both, and writes nothing."""
    code, _ = planted(tmp_path, {mine: (f"{STEM}-1.ipynb", CLASS["alice"]),
                                 planted_as: (NAME, CLASS["carol"]), "bob": (NAME, CLASS["bob"])},
                      roster)
    err = capsys.readouterr().err
    assert code == 2, err
    assert f"'{planted_as}'" in err and f"'{mine}'" in err
    assert not (tmp_path / "out").exists()


def test_a_look_alike_folder_resolved_keeps_its_own_row_and_points(tmp_path, capsys):
    """`` alice`` (leading space) made a row of its own with --match: points entered for it
    in points.csv are its own, never alice's (keys are compared exactly)."""
    code, args = planted(tmp_path, {"alice": (NAME, CLASS["alice"]),
                                    " alice": (NAME, CLASS["carol"])}, ALICE_ROSTER)
    assert code == 2
    assert run(*args, "--match", " alice=") == 0
    points = tmp_path / "out" / "by_hand" / "points.csv"
    rows = list(csv.DictReader(points.open()))
    assert sorted(r["student"] for r in rows) == [" alice", "alice"]
    for row in rows:
        row["points"], row["comment"] = ("1", "planted") if row["student"] == " alice" \
            else ("", "")
    write_csv(points, by_hand.POINTS_HEADER, rows)
    assert run(*args, "--match", " alice=") == 0
    _, rows = by_student(tmp_path / "out" / "gradebook.csv")
    assert (rows["alice"]["0.1 (by hand)"], rows[" alice"]["0.1 (by hand)"]) == ("", "1")
    assert (rows["alice"]["total"], rows[" alice"]["total"]) == ("3", "1")
    capsys.readouterr()


def test_several_chapters_get_their_columns_and_totals(tmp_path, capsys):
    """Chapter 0 and chapter 3 (its exercises and points as the grader would write them):
    columns in chapter order, per-chapter totals, and zeros for a chapter not handed in."""
    folder = tmp_path / "two"
    chapter_03 = ROOT / "notebooks" / "03_attention_with_weights.ipynb"
    points_03 = {"3.1": (1, 1), "3.3": (0, 2)}  # (alice's points, max) of the checked ones
    by_hand_03 = ["3.2", "3.4", "3.5"]
    graded = {f"alice/{NAME}": CLASS["alice"], f"bob/{NAME}": CLASS["bob"]}
    for name in graded:
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(json.dumps(student_nb()))
    grader_files(folder, graded)
    (folder / "alice" / chapter_03.name).write_text(json.dumps({"cells": []}))
    with (folder / "grades.csv").open("a", newline="") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        for exercise, (got, most) in points_03.items():
            writer.writerow([f"alice/{chapter_03.name}", exercise, got, most])
        for exercise in by_hand_03:
            writer.writerow([f"alice/{chapter_03.name}", exercise, "", ""])
    with (folder / "grading_log.csv").open("a", newline="") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        for exercise in [*points_03, *by_hand_03]:
            writer.writerow([f"alice/{chapter_03.name}", exercise, "correct", "", "1", "0", "",
                             "", ""])
    out = tmp_path / "out"
    assert run(folder, "--out", out, "--source", EXAMPLE, "--source", chapter_03,
               "--hand-max", "2", "--hand-max", "3.5=4") == 0
    header, rows = by_student(out / "gradebook.csv")
    assert header[6:] == ["0.1 (by hand)", "0.2", "0.3", f"{STEM} total", "3.1", "3.2 (by hand)",
                          "3.3", "3.4 (by hand)", "3.5 (by hand)", f"{chapter_03.stem} total",
                          "autograded", "by hand", "total", "chapters handed in", "notes",
                          "feedback"]
    top = rows["max points"]
    assert (top[f"{STEM} total"], top[f"{chapter_03.stem} total"], top["total"]) == \
        ("5", str(1 + 2 + 2 + 2 + 4), str(5 + 11))
    assert (rows["alice"][f"{chapter_03.stem} total"], rows["alice"]["autograded"]) == ("1", "4")
    assert rows["alice"]["chapters handed in"] == "2"
    assert rows["bob"]["3.1"] == "0" and rows["bob"]["3.2 (by hand)"] == "0"
    assert rows["bob"]["chapters handed in"] == "1" and rows["bob"]["total"] == "1"
    assert sorted(p.name for p in (out / "by_hand").glob("*.html")) == \
        ["0.1.html", "3.2.html", "3.4.html", "3.5.html", "index.html"]
    page = (out / "by_hand" / "3.2.html").read_text()
    assert "The exercise's prompt is not in this notebook" in page
    assert "No notebook of this chapter</h2><p>bob" in page
    capsys.readouterr()


@pytest.mark.parametrize("rule, counted, total", [
    ("latest", NAME, "1"), ("best", f"again_{NAME}", "3")])
def test_a_chapter_handed_in_twice_counts_once_by_the_rule_and_says_which(tmp_path, rule,
                                                                          counted, total):
    """Two graded copies (the grader's --copies best): the one handed in last counts by
    default (its name, exactly the chapter's, is no reason), the one with more points with
    --copies best."""
    folder = tmp_path / "twice"
    graded = {f"alice/again_{NAME}": CLASS["alice"], f"alice/{NAME}": CLASS["bob"]}
    for number, (name, spec) in enumerate(graded.items()):  # NAME handed in last
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(json.dumps(student_nb(spec["answer"])))
        os.utime(folder / name, (1.7e9 + number, 1.7e9 + number))
    grader_files(folder, graded)
    assert run(folder, "--out", tmp_path / "out", "--source", EXAMPLE, "--copies", rule) == 0
    _, rows = by_student(tmp_path / "out" / "gradebook.csv")
    assert rows["alice"]["total"] == total
    other = next(n for n in graded if n != f"alice/{counted}")
    why = ("handed in last, by the files' modification times" if rule == "latest"
           else "the most points")
    assert f"alice/{counted} counted ({why}; --copies {rule}), {other} not" in \
        rows["alice"]["notes"]


@pytest.mark.parametrize("graded_by, given, total", [
    ("best", None, "3"), ("latest", None, "1"), (None, None, "1"), ("best", "latest", "1")])
def test_the_report_counts_copies_by_the_rule_the_grading_wrote_down(tmp_path, graded_by,
                                                                     given, total):
    """--copies is kept with the grades (copies_rule.json): graded with best, the report counts
    the best copy without being told again; an explicit --copies still decides."""
    folder = tmp_path / "twice"
    graded = {f"alice/again_{NAME}": CLASS["alice"], f"alice/{NAME}": CLASS["bob"]}
    for number, (name, spec) in enumerate(graded.items()):  # NAME (1 point) handed in last
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(json.dumps(student_nb(spec["answer"])))
        os.utime(folder / name, (1.7e9 + number, 1.7e9 + number))
    grader_files(folder, graded)
    if graded_by:
        copies.keep_rule(folder, graded_by)
    extra = ["--copies", given] if given else []
    assert run(folder, "--out", tmp_path / "out", "--source", EXAMPLE, *extra) == 0
    _, rows = by_student(tmp_path / "out" / "gradebook.csv")
    assert rows["alice"]["total"] == total


def test_grading_again_with_another_copies_rule_is_refused(tmp_path, capsys):
    folder = tmp_path / "class"
    folder.mkdir()
    copies.keep_rule(folder, "best")
    (folder / "grading_log.csv").write_text("notebook\n")
    with pytest.raises(SystemExit):
        grade_main([str(folder), "--resume", "--copies", "latest"])
    assert "was graded with --copies best" in capsys.readouterr().err
    assert copies.graded_rule(folder) == "best"  # left as it was


def test_in_a_canvas_download_the_later_submission_counts(tmp_path):
    """Instructor's term, H1: Canvas names a second upload of the same file "-1"; the earlier
    one, named exactly as the chapter, scored 1, the later one 3. Canvas's submission id says
    which is later, whatever the files' times say."""
    folder = tmp_path / "canvas"
    folder.mkdir()
    graded = {f"archeralice_1001_700031_{STEM}-1.ipynb": CLASS["alice"],
              f"archeralice_1001_700030_{NAME}": CLASS["bob"]}
    for number, (name, spec) in enumerate(graded.items()):  # the earlier one modified last
        (folder / name).write_text(json.dumps(student_nb(spec["answer"])))
        os.utime(folder / name, (1.7e9 + number, 1.7e9 + number))
    grader_files(folder, graded)
    assert run(folder, "--out", tmp_path / "out", "--source", EXAMPLE) == 0
    _, rows = by_student(tmp_path / "out" / "gradebook.csv")
    assert rows["canvas-1001"]["total"] == "3"
    assert (f"archeralice_1001_700031_{STEM}-1.ipynb counted (handed in last, by Canvas's "
            "submission order") in rows["canvas-1001"]["notes"]


PENALTY_COLUMN = "late penalty (points off)"


def late_class(tmp_path, graded, penalty=None):
    """A class folder of ``graded`` notebooks, graded (as far as the report sees) with the
    late ``penalty`` written beside the grades, as ``mha-grade grade --late-penalty`` does."""
    folder = tmp_path / "late"
    for name, spec in graded.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(json.dumps(student_nb(spec["answer"])))
    grader_files(folder, graded)
    if penalty is not None:
        late.keep_rule(folder, late.Penalty.parse(penalty))
    return folder


@pytest.mark.parametrize("given, total, off, column", [
    (None, "2.7", "0.3", "0.3"),  # the rule the grading wrote down: 10% of 3, one day
    ("25%", "2.25", "0.75", "0.75"),
    ("none", "3", None, None)])
def test_canvas_late_work_loses_the_classs_penalty_in_gradebook_canvas_and_feedback(
        tmp_path, capsys, given, total, off, column):
    """Canvas's bulk download marks late work (``_late``) without saying how late: a per-day
    rule counts it as one day. The penalty comes off the chapter's total in gradebook.csv,
    canvas_import.csv and the feedback page, which says why; on-time work keeps its points."""
    folder = late_class(tmp_path, {f"archeralice_late_1001_5002_{NAME}": CLASS["alice"],
                                   f"bakerbob_1002_5003_{NAME}": CLASS["bob"]}, "10%/day")
    extra = ["--late-penalty", given] if given else []
    out = tmp_path / "out"
    assert run(folder, "--roster", make_class(tmp_path)[1], "--out", out, "--source", EXAMPLE,
               *extra) == 0
    printed = capsys.readouterr().out
    header, rows = by_student(out / "gradebook.csv")
    alice, bob = rows["alice"], rows["bob"]
    assert (alice[f"{STEM} total"], alice["total"], bob["total"]) == (total, total, "1")
    assert alice["autograded"] == "3"  # the exercises' points stay as graded
    assert (PENALTY_COLUMN in header) == (column is not None)
    canvas = {r[3]: r[-1] for r in rows_of(out / "canvas_import.csv")[2:]}
    assert (canvas["alice"], canvas["bob"]) == (total, "1")
    page = (out / "feedback" / file_name("alice")).read_text()
    assert f"Total: {total} / 4 points" in page
    if column is None:
        assert alice["total"] == "3"
        assert "no penalty (--late-penalty none)" in alice["notes"]
        assert "applied, though the grading chose 10%/day" in printed
        return
    assert (alice[PENALTY_COLUMN], bob[PENALTY_COLUMN]) == (column, "0")
    said = "handed in late (Canvas marked the file late): "
    assert said in alice["notes"] and f"{off} point(s) of 3 taken off" in alice["notes"]
    assert "Late: " + said in page and "late" not in bob["notes"]
    assert ("applied, though the grading chose" in printed) == (given is not None)


def test_a_name_imitating_canvas_in_a_students_folder_gives_no_lateness_unless_the_lms_does(
        tmp_path, capsys):
    """In a folder per student the file names are the students': a name made to look like an
    on-time Canvas file proves nothing, and file times are theirs to set. No lateness is known
    (the summary says so) until the instructor gives the due date and the LMS's times."""
    imitation = f"alice/archeralice_1001_5001_{NAME}"
    folder = late_class(tmp_path, {imitation: CLASS["alice"],
                                   f"bob/bakerbob_late_1002_5002_{NAME}": CLASS["bob"]},
                        "10%/day")
    out = tmp_path / "out"
    assert run(folder, "--out", out, "--source", EXAMPLE) == 0
    printed = capsys.readouterr().out
    _, rows = by_student(out / "gradebook.csv")
    assert (rows["alice"]["total"], rows["bob"]["total"]) == ("3", "1")
    assert "no lateness is known for 2 notebook(s) outside a Canvas bulk download" in printed
    times = tmp_path / "times.csv"
    write_csv(times, ["notebook", "handed_in"], [
        {"notebook": imitation, "handed_in": "2026-03-03T09:00+01:00"},  # 2 days late (Paris)
        {"notebook": f"bob/bakerbob_late_1002_5002_{NAME}",
         "handed_in": "2026-03-01T22:00:00Z"}])  # on time: 23:00 in Paris
    assert run(folder, "--out", out, "--source", EXAMPLE, "--due", "00=2026-03-01T23:59+01:00",
               "--handed-in", times) == 0
    _, rows = by_student(out / "gradebook.csv")
    assert (rows["alice"]["total"], rows["bob"]["total"]) == ("2.4", "1")
    assert "handed in 2 days late (handed in 2026-03-03T09:00:00+01:00, due " \
        "2026-03-01T23:59:00+01:00): 20% off" in rows["alice"]["notes"]
    assert run(folder, "--out", out, "--source", EXAMPLE, "--due", "2026-03-01T23:59") == 2
    assert "--due and --handed-in go together" in capsys.readouterr().err


@pytest.mark.parametrize("late_points, counted, total", [
    ((1, 2), f"archeralice_1001_5001_{NAME}", "3"),  # tied: the late copy would lose 0.3
    ((1, 1), f"archeralice_1001_5001_{NAME}", "3")])
def test_best_compares_copies_after_the_late_penalty(tmp_path, late_points, counted, total):
    """--copies best with a late penalty: an on-time copy and a late one with as many points
    (or fewer) -- the on-time one counts, so handing in again late never costs points."""
    late_copy = dict(CLASS["alice"], points=late_points)
    folder = late_class(tmp_path, {f"archeralice_1001_5001_{NAME}": CLASS["alice"],
                                   f"archeralice_late_1001_5002_{STEM}-1.ipynb": late_copy},
                        "10%/day")
    copies.keep_rule(folder, "best")
    assert run(folder, "--out", tmp_path / "out", "--source", EXAMPLE) == 0
    _, rows = by_student(tmp_path / "out" / "gradebook.csv")
    assert rows["canvas-1001"]["total"] == total
    assert f"{counted} counted (the most points" in rows["canvas-1001"]["notes"]


def test_grading_again_with_another_late_penalty_is_refused(tmp_path, capsys):
    folder = tmp_path / "class"
    folder.mkdir()
    late.keep_rule(folder, late.Penalty.parse("10%/day"))
    (folder / "grading_log.csv").write_text("notebook\n")
    with pytest.raises(SystemExit):
        grade_main([str(folder), "--regrade", "alice/", "--late-penalty", "20%"])
    assert "was graded with --late-penalty 10%/day" in capsys.readouterr().err
    assert str(late.graded_rule(folder)) == "10%/day"  # left as it was
    with pytest.raises(SystemExit):
        grade_main([str(folder), "--late-penalty", "ten"])
    assert "--late-penalty must be 'none'" in capsys.readouterr().err


def test_a_copy_the_grader_left_out_is_named_under_its_student(tmp_path, capsys):
    folder = tmp_path / "left"
    (folder / "alice").mkdir(parents=True)
    (folder / "alice" / NAME).write_text(json.dumps(student_nb("mine")))
    (folder / "alice" / "old.ipynb").write_text(json.dumps(student_nb("old")))
    grader_files(folder, {f"alice/{NAME}": CLASS["alice"]})
    why = "chapter 00 handed in 2 times by alice: alice/00_... is graded, not this one"
    with (folder / "grading_log.csv").open("a", newline="") as handle:
        csv.writer(handle, lineterminator="\n").writerow(
            ["alice/old.ipynb", "", "", "", "", "", "", "ignored copy: " + why, "", ""])
    assert run(folder, "--out", tmp_path / "out", "--source", EXAMPLE) == 0
    _, rows = by_student(tmp_path / "out" / "gradebook.csv")
    assert set(rows) == {"max points", "alice"} and rows["alice"]["total"] == "3"
    assert "alice/old.ipynb: a copy handed in earlier, not graded" in rows["alice"]["notes"]
    printed = capsys.readouterr().out
    assert "copies handed in earlier, not graded (1):\n  alice/old.ipynb\n" in printed
    assert "not graded as any chapter" not in printed


def test_a_copy_left_out_for_a_tie_says_the_name_chose_in_the_gradebook_and_summary(tmp_path,
                                                                                     capsys):
    # instructor 49: a tie's copy was "handed in earlier" there (the log said the name chose)
    folder = tmp_path / "tie"
    (folder / "alice").mkdir(parents=True)
    (folder / "alice" / NAME).write_text(json.dumps(student_nb("mine")))
    (folder / "alice" / "old.ipynb").write_text(json.dumps(student_nb("old")))
    grader_files(folder, {f"alice/{NAME}": CLASS["alice"]})
    why = (f"chapter 00 handed in 2 times by alice: alice/{NAME} (handed in at the same time as "
           "another copy, so chosen by its name (the last in alphabetical order): check it is "
           "the one meant, by the files' modification times) is graded, not this one")
    with (folder / "grading_log.csv").open("a", newline="") as handle:
        csv.writer(handle, lineterminator="\n").writerow(
            ["alice/old.ipynb", "", "", "", "", "", "", "ignored copy: " + why, "", ""])
    assert run(folder, "--out", tmp_path / "out", "--source", EXAMPLE) == 0
    _, rows = by_student(tmp_path / "out" / "gradebook.csv")
    assert "alice/old.ipynb: a copy handed in at the same time as the graded one, not graded " \
        "(the name chose: check it is the one meant)" in rows["alice"]["notes"]
    printed = capsys.readouterr().out
    assert "copies handed in at the same time as a graded one, not graded (the name chose: " \
        "check it is the one meant) (1):\n  alice/old.ipynb\n" in printed
    assert "handed in earlier" not in printed + rows["alice"]["notes"]


# ---------------------------------------------------------------------------------------------
# Feedback

def feedback_of(reported, key):
    return (reported["out"] / "feedback" / file_name(key)).read_text()


def test_feedback_lists_each_exercises_points_and_message(reported):
    bob = feedback_of(reported, "bob")
    assert "Feedback for Bob Baker" in bob and "Total: 1 / 4 points" in bob
    assert "<td>0.3</td><td>0 / 2</td><td>wrong</td>" in bob
    assert "&lt;img src=x onerror=alert(1)&gt; the transpose" in bob
    assert "<img" not in bob  # the message is text, never markup
    assert "<td>0.1</td><td>not graded yet</td><td>graded by hand</td>" in bob
    assert "Nothing handed in" in feedback_of(reported, "erin")


def test_feedback_names_the_first_cell_that_failed_and_why_later_checks_fail(reported):
    dave = feedback_of(reported, "dave")
    assert "The first cell that failed" in dave
    assert "cell 1: ModuleNotFoundError: No module named &#x27;mha&#x27;" in dave
    assert "fix that cell first" in dave
    assert "The first cell that failed" not in feedback_of(reported, "alice")


# 0.3 as the grader logs it for the attack's causal_mask that squeezes (round 3, #7): the
# visible part passes, the hidden one fails, and its message names the hidden case
VISIBLE_PART = "n = 2 and two sizes"
HIDDEN_PART = "one token (n = 1), and a longer sequence"
HIDDEN_MESSAGE = "for n=1: expected shape (1, 1), got ()"
PARTS = [{"name": VISIBLE_PART, "points": 1, "max_points": 1, "hidden": False,
          "status": "correct", "message": "correct"},
         {"name": HIDDEN_PART, "points": 0, "max_points": 1, "hidden": True,
          "status": "wrong", "message": HIDDEN_MESSAGE}]
LOGGED = f"part '{VISIBLE_PART}' [1/1]: correct; hidden part '{HIDDEN_PART}' [0/1]: " \
    + HIDDEN_MESSAGE


@pytest.mark.parametrize("logged_parts", [True, False], ids=["parts logged", "older log"])
def test_feedback_shows_a_hidden_parts_points_not_its_message_unless_asked(tmp_path, capsys,
                                                                           logged_parts):
    """Attack (round 3, #7): by default a page shows the hidden part's points and not its
    message (nor its name, which names the case), and says so; --show-hidden (after the due
    date) shows it. A log without the parts column shows no message that names a hidden part."""
    folder = tmp_path / "hidden"
    dana = dict(CLASS["bob"], points=(1, 1), status=("correct", "wrong"),
                messages=("correct", LOGGED),
                parts=("", json.dumps(PARTS) if logged_parts else ""))
    graded = {f"dana/{NAME}": dana, f"alice/{NAME}": CLASS["alice"]}
    for name, spec in graded.items():
        (folder / name).parent.mkdir(parents=True)
        (folder / name).write_text(json.dumps(student_nb(spec["answer"])))
    grader_files(folder, graded)
    assert run(folder, "--out", tmp_path / "out", "--source", EXAMPLE) == 0
    page = (tmp_path / "out" / "feedback" / file_name("dana")).read_text()
    assert HIDDEN_PART not in page and "expected shape" not in page
    assert "<td>0.3</td><td>1 / 2</td><td>wrong</td>" in page
    if logged_parts:
        assert f"part &#x27;{VISIBLE_PART}&#x27; [1/1]: correct; hidden part [0/1]: message " \
            "shown after the due date" in page
    else:
        assert "this check has hidden parts: its message shown after the due date" in page
    assert "their messages are shown after the due date" in page
    # a student with no hidden part's message withheld gets no such note
    assert "hidden parts" not in (tmp_path / "out" / "feedback" / file_name("alice")).read_text()
    assert run(folder, "--out", tmp_path / "shown", "--source", EXAMPLE, "--show-hidden") == 0
    page = (tmp_path / "shown" / "feedback" / file_name("dana")).read_text()
    assert f"hidden part &#x27;{HIDDEN_PART}&#x27; [0/1]: {HIDDEN_MESSAGE}" in page
    assert "This page shows the messages of the checks' hidden parts" in page
    capsys.readouterr()


@pytest.mark.parametrize("key", ["..", "../../etc/passwd", "a/b", "CON", "", ".hidden", "<x>",
                                 "=cmd|' /C calc'!A0", "ａｌｉｃｅ", "alice", "Alice",
                                 "\u202egnp.exe", "x" * 300])
def test_a_feedback_file_name_is_safe(key):
    name = file_name(key)
    assert re.fullmatch(r"[a-z0-9-]{1,40}-[0-9a-f]{10}\.html", name), name


def test_feedback_file_names_are_unique():
    keys = ["alice", "Alice", "ALICE", "al ice", "al-ice", "", "..", "a/b", "a_b", "ａｌｉｃｅ"]
    assert len({file_name(k) for k in keys}) == len(keys)


def test_hostile_names_stay_text_in_pages_and_csv(tmp_path):
    folder = tmp_path / "hostile"
    folder.mkdir()
    names = ["=HYPERLINK(\"x\")", "<img src=x onerror=alert(1)>", "a..b", "\u202eevil"]
    graded = {}
    for who in names:
        relative = f"{who}/{NAME}"
        (folder / who).mkdir()
        (folder / relative).write_text(json.dumps(student_nb(HOSTILE)))
        graded[relative] = CLASS["alice"]
    grader_files(folder, graded)
    out = tmp_path / "out"
    assert run(folder, "--out", out, "--source", EXAMPLE) == 0
    text = (out / "gradebook.csv").read_text()
    keys = [r[0] for r in rows_of(out / "gradebook.csv")]
    assert "'=HYPERLINK(\"x\")" in keys and not any(k.startswith("=") for k in keys)
    assert "\\u202eevil" in keys and "\u202e" not in text
    pages = sorted((out / "feedback").iterdir())
    assert len(pages) == len(names) and all(p.parent == out / "feedback" for p in pages)
    for page in [*pages, out / "by_hand" / "0.1.html"]:
        html = page.read_text()
        assert "<script>" not in html and "<img src=x" not in html and "\u202e" not in html


def test_outputs_replace_a_symbolic_link_and_never_write_through_one(reported, tmp_path):
    out, target = reported["out"], tmp_path / "elsewhere.txt"
    target.write_text("keep me")
    (out / "gradebook.csv").unlink()
    (out / "gradebook.csv").symlink_to(target)
    assert run(reported["folder"], "--roster", reported["roster"], "--out", out, "--source",
               EXAMPLE) == 0
    assert target.read_text() == "keep me" and not (out / "gradebook.csv").is_symlink()
    shutil.rmtree(out / "feedback")
    (out / "feedback").symlink_to(tmp_path, target_is_directory=True)
    assert run(reported["folder"], "--out", out, "--source", EXAMPLE) == 2
    assert not list(tmp_path.glob("*.html"))


# ---------------------------------------------------------------------------------------------
# By-hand exercises

def test_one_page_per_by_hand_exercise_with_every_answer_escaped(reported):
    html = (reported["out"] / "by_hand" / "0.1.html").read_text()
    assert "Content-Security-Policy" in html and "default-src &#x27;none&#x27;" not in html
    assert "default-src 'none'" in html
    assert "Softmax ignores a shift" in html  # the prompt
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt; $\\frac{a}{b}$" in html
    assert "<script>" not in html
    assert "I think it changes." in html and "Not on the roster, still graded." in html
    # a cell the student added below the answer, with what it printed (escaped)
    assert "print(1)" in html and "printed &lt;b&gt;bold&lt;/b&gt;" in html
    # carol left the answer cell as handed out; erin handed in nothing
    carol = html.split("Carol Cole</h2>")[1].split("</section>")[0]
    assert "No answer: the answer cells are as handed out" in carol
    assert "No notebook of this chapter</h2><p>Erin Evans" in html
    # the chapter's own text after the exercises and the other exercises are not answers
    assert "After the exercises" not in html and "scaled_scores" not in html
    assert (reported["out"] / "by_hand" / "index.html").exists()
    assert not (reported["out"] / "by_hand" / "0.2.html").exists()


def test_written_answers_to_an_autograded_exercise_get_a_page_and_optional_points(tmp_path,
                                                                                 capsys):
    """Instructor walkthrough M4: a code exercise whose prompt also asks a question gets an
    answer cell in the student edition; every such answer is on a page, and in points.csv to
    grade if the instructor wants (then it counts as a by-hand exercise)."""
    nb = fmt.load(EXAMPLE)
    exercises = fmt.parse(nb)
    prompt = nb["cells"][exercises[1].prompt]  # 0.2, autograded
    prompt["source"] = fmt.source(prompt) + "\nThen explain the result in words."
    source = tmp_path / NAME
    source.write_text(json.dumps(nb))
    assert by_hand.read_source(source).written == {"0.2"}
    folder, roster = make_class(tmp_path)
    for who, text in (("alice", "Because the exponent grows fast."), ("bob", None)):
        path = folder / who / NAME
        student = json.loads(path.read_text())
        check = max(i for i, c in enumerate(student["cells"])
                    if "mha.checks." in fmt.source(c) and "0.2" not in fmt.source(c)
                    and i < next(j for j, c in enumerate(student["cells"])
                                 if "ex-00-3" in fmt.source(c)))
        cell_ = student_edition.answer_cell("ex-00-2", "0.2")
        if text:
            cell_["source"] = text
        student["cells"].insert(check + 1, cell_)
        path.write_text(json.dumps(student))
    out = tmp_path / "out"
    assert run(folder, "--roster", roster, "--out", out, "--source", source) == 0
    page_ = (out / "by_hand" / "0.2-written.html").read_text()
    assert "Exercise 0.2: every written answer" in page_ and "autograded" in page_
    assert "Because the exponent grows fast." in page_
    bob = page_.split("Bob Baker</h2>")[1].split("</section>")[0]
    assert "No answer: the answer cells are as handed out" in bob
    assert "saved in the student's notebook, not the ones the grader" in page_
    assert "0.2-written.html" in (out / "by_hand" / "index.html").read_text()
    rows = list(csv.DictReader((out / "by_hand" / "points.csv").open()))
    assert {(r["student"], r["exercise"]) for r in rows} >= {("alice", "0.2 written"),
                                                             ("bob", "0.2 written")}
    # not graded: it counts nothing, and nobody's row says it is missing
    header, book_rows = by_student(out / "gradebook.csv")
    assert "0.2 written (by hand)" not in header and book_rows["max points"]["total"] == "4"
    assert "0.2 written" not in book_rows["alice"]["notes"]
    # graded: a by-hand exercise of the chapter, for everyone
    for row in rows:
        if row["exercise"] == "0.2 written":
            row["max_points"] = "2"  # one value per exercise
            row["points"] = "1.5" if row["student"] == "alice" else ""
    with (out / "by_hand" / "points.csv").open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    capsys.readouterr()
    assert run(folder, "--roster", roster, "--out", out, "--source", source) == 0
    # instructor 46: one student's answer graded raises every student's maximum; it is said
    warning = ("WARNING: 0.2 written: points entered for 1 of 5 notebook(s), so it now counts 2 "
               "point(s) in chapter 00's maximum for every student; enter points (0 for none) "
               "for the other 4, or clear its points to leave it uncounted")
    assert warning in capsys.readouterr().err
    assert warning.removeprefix("WARNING: ") in (out / "summary.txt").read_text()
    header, book_rows = by_student(out / "gradebook.csv")
    assert book_rows["max points"]["0.2 written (by hand)"] == "2"
    assert book_rows["max points"]["total"] == "6"
    assert book_rows["alice"]["0.2 written (by hand)"] == "1.5"
    assert book_rows["alice"]["total"] == str(1 + 2 + 1.5)
    assert "by hand, not graded yet: 0.1, 0.2 written" in book_rows["bob"]["notes"]
    # every student graded (the others 0): no warning
    for row in rows:
        if row["exercise"] == "0.2 written" and row["student"] != "alice":
            row["points"] = "0"
    with (out / "by_hand" / "points.csv").open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    capsys.readouterr()
    assert run(folder, "--roster", roster, "--out", out, "--source", source) == 0
    assert "0.2 written: points entered" not in capsys.readouterr().err


@functools.cache
def book():
    return jupyter_edition.load_book(ROOT)


@functools.cache
def handed_out(path):
    """The notebook `make student` hands out for a chapter."""
    docname = path.relative_to(ROOT).with_suffix("").as_posix()
    return json.dumps(student_jupyter_edition.student_jupyter_edition(fmt.load(path), book(),
                                                                 docname))


@pytest.mark.parametrize("ids", [True, False], ids=["with cell ids", "saved without ids"])
@pytest.mark.parametrize("path", WITH_EXERCISES, ids=lambda p: p.stem[:2])
def test_every_exercise_of_a_handed_out_notebook_is_found_and_blank(path, ids, tmp_path):
    """What `make student` hands out: each exercise's answer is found below its prompt, holds
    only the handed-out stubs (no chapter text after the exercises, no check cell), and so is
    shown as "no answer"; also for a notebook saved without cell ids (the chapter's text is
    then recognised by its words and its code)."""
    nb = json.loads(handed_out(path))
    for item in nb["cells"]:
        if not ids:
            item.pop("id", None)
    (tmp_path / path.name).write_text(json.dumps(nb))
    cells = by_hand.read_cells(tmp_path / path.name)
    source = by_hand.read_source(path)
    for exercise, label in source.labels.items():
        found = by_hand.answer(cells, label, source)
        assert found, exercise
        assert all(c.blank for c in found), (exercise, [c.source for c in found if not c.blank])
    # an answer written in is not blank, and a cell added below it belongs to it
    position = next(i for i, c in enumerate(cells) if c.source.startswith("**Your answer"))
    label = next(m.group(1) for c in reversed(cells[:position])
                 for m in [re.search(r":label: (ex-\d\d-\d+)", c.source)] if m)
    cells[position].source = "My answer."
    cells.insert(position + 1, by_hand.Cell("markdown", "More of it."))
    found = by_hand.answer(cells, label, source)
    assert [c.source for c in found if not c.blank] == ["My answer.", "More of it."]


PAYLOADS = ["</pre><script>alert(1)</script>", "<img src=x onerror=alert(1)>",
            "</title></style><svg onload=alert(1)>", "<a href=\"javascript:alert(1)\">x</a>",
            "<!-- <script>", "<iframe src=//evil>", "\u202e<b>reversed</b>", "&lt;escaped&gt;",
            "<meta http-equiv=refresh content=0;url=//evil>", "\" onmouseover=\"alert(1)"]
ALLOWED = {"html", "head", "meta", "title", "style", "body", "h1", "h2", "p", "pre", "code",
           "section", "img", "table", "tr", "th", "td", "strong", "ul", "li", "a",
           # the markdown renderer's (tests/test_rendering.py), the rubric's, MathJax's files
           "div", "span", "details", "summary", "aside", "em", "h3", "h4", "h5", "h6", "ol",
           "blockquote", "hr", "br", "del", "thead", "tbody", "script"}
SCRIPTS = {"mathjax/config.js", "mathjax/tex-svg-full.js"}


class Elements(HTMLParser):
    """Every element and attribute of a page, and the text of its <pre> blocks."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.tags, self.attributes, self.pre, self.inside = [], [], [], False

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.attributes += [(tag, k, v) for k, v in attrs]
        self.inside = tag == "pre"
        if self.inside:
            self.pre.append("")

    def handle_endtag(self, tag):
        self.inside = False if tag == "pre" else self.inside

    def handle_data(self, data):
        if self.inside:
            self.pre[-1] += data


def test_no_answer_or_output_can_add_markup_to_a_page(tmp_path):
    """Each payload as an answer, as what a cell printed, and as HTML and SVG outputs: the page
    holds only the report's own elements, and each payload as text (a PNG output as an image)."""
    folder = tmp_path / "attacks"
    png = base64.b64encode(png_header(1, 1) + bytes(32)).decode()
    graded = {}
    for number, payload in enumerate(PAYLOADS):
        nb = student_nb(payload, extra="print('x')")
        added = next(c for c in nb["cells"] if c.get("id") == "added")
        added["outputs"] = [
            {"output_type": "stream", "name": "stdout", "text": payload},
            {"output_type": "display_data", "metadata": {}, "data": {
                "text/html": payload, "image/svg+xml": "<svg onload=alert(1)/>",
                "text/plain": "plain " + payload}},
            {"output_type": "display_data", "metadata": {}, "data": {"image/png": png}},
            {"output_type": "display_data", "metadata": {}, "data": {
                "image/png": base64.b64encode(b"<script>not a png</script>").decode()}}]
        (folder / f"s{number}").mkdir(parents=True)
        (folder / f"s{number}" / NAME).write_text(json.dumps(nb))
        graded[f"s{number}/{NAME}"] = dict(CLASS["bob"], messages=(payload, payload),
                                            first_error=payload, problem=payload)
    grader_files(folder, graded)
    out = tmp_path / "out"
    assert run(folder, "--out", out, "--source", EXAMPLE) == 0
    for page in [out / "by_hand" / "0.1.html", *(out / "feedback").iterdir()]:
        found = Elements()
        found.feed(page.read_text())
        assert set(found.tags) <= ALLOWED, (page.name, set(found.tags) - ALLOWED)
        for tag, name, value in found.attributes:
            assert not name.startswith("on"), (page.name, tag, name)
            assert tag != "meta" or name != "http-equiv" or value == "Content-Security-Policy"
            if tag == "img":
                assert name == "alt" or value.startswith("data:image/png;base64,")
            if tag == "a":
                assert re.fullmatch(r"[\d.]+\.html", value)
            if tag == "script":
                assert name in ("src", "defer") and (value is None or value in SCRIPTS)
            assert name in ("class", "id", "alt", "src", "href", "content", "http-equiv",
                            "charset", "lang", "name", "defer"), (tag, name)
    found = Elements()
    found.feed((out / "by_hand" / "0.1.html").read_text())
    shown = "\n".join(found.pre)
    for payload in PAYLOADS:
        assert payload.replace("\u202e", "\\u202e") in shown
        assert "plain " + payload.replace("\u202e", "\\u202e") in shown
    assert "<svg onload=alert(1)/>" not in shown and "not a png" not in shown
    images = [v for t, k, v in found.attributes if t == "img" and k == "src"]
    assert images == [f"data:image/png;base64,{png}"] * len(PAYLOADS)


def test_a_huge_answer_is_cut_on_the_page():
    cells = [by_hand.Cell("markdown", "x" * 50_000) for _ in range(100)]
    html = by_hand.cells_html(cells)
    assert len(html) < 2 * by_hand.MAX_ANSWER
    assert "more cell(s): open the notebook" in html


def png_header(width, height):
    """The start of a PNG: its magic bytes and the header chunk (IHDR) of its size."""
    return (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + width.to_bytes(4, "big")
            + height.to_bytes(4, "big") + b"\x08\x06\x00\x00\x00" + bytes(4))


def test_the_first_cell_of_an_answer_is_cut_too():
    """One code cell with 10 figures of 1 MB (a notebook may hold 20 MB): before, the first
    cell was never cut and all 10 MB went on the page."""
    cells = [by_hand.Cell("code", "plot()", images=[png_header(100, 100) + bytes(2**20)] * 10)]
    html = by_hand.cells_html(cells)
    assert len(html) < 2 * by_hand.MAX_ANSWER
    assert "more image(s) of this cell" in html


def test_an_image_of_too_many_pixels_is_not_shown(tmp_path):
    """A PNG of 20000 by 20000 pixels (1.5 MB of one colour; 1.6 GB in a browser) is a note;
    a figure is an image; and an answer's figures share ``MAX_PIXELS``."""
    nb = {"cells": [{"cell_type": "code", "source": "plot()", "metadata": {}, "outputs": [
        {"output_type": "display_data", "metadata": {}, "data": {
            "image/png": base64.b64encode(png_header(w, h) + bytes(8)).decode()}}
        for w, h in [(20_000, 20_000), (640, 480), (3, 3)]]}]}
    (tmp_path / "nb.ipynb").write_text(json.dumps(nb))
    cell, = by_hand.read_cells(tmp_path / "nb.ipynb")
    assert cell.images == [png_header(640, 480) + bytes(8), png_header(3, 3) + bytes(8)]
    assert cell.text == ["[an image not shown: 400,000,000 pixels, above 25,000,000; open the "
                         "notebook]"]
    html = by_hand.cells_html([by_hand.Cell("code", "", images=[png_header(4000, 4000)] * 3)])
    assert html.count("<img") == 1 and "2 more image(s) of this cell" in html


def test_points_csv_lists_every_by_hand_answer_to_fill_in(reported):
    rows = list(csv.DictReader((reported["out"] / "by_hand" / "points.csv").open()))
    assert [(r["student"], r["exercise"], r["max_points"], r["points"]) for r in rows] == \
        [(who, "0.1", "1", "") for who in ("alice", "bob", "carol", "dave", "zed")]


def fill(reported, points, extra=()):
    path = reported["out"] / "by_hand" / "points.csv"
    rows = list(csv.DictReader(path.open()))
    for row in rows:
        row["max_points"] = "2"
        row["points"], row["comment"] = points.get(row["student"], ("", ""))
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows([*rows, *extra])
    return path


def test_points_entered_by_hand_reach_the_gradebook_canvas_and_feedback(reported, capsys):
    path = fill(reported, {"alice": ("2", "Clear."), "bob": ("0.5", "=1+1 is not a proof")})
    assert run(reported["folder"], "--roster", reported["roster"], "--out", reported["out"],
               "--source", EXAMPLE, "--hand-points", path) == 0
    _, rows = by_student(reported["out"] / "gradebook.csv")
    assert rows["max points"]["0.1 (by hand)"] == "2" and rows["max points"]["total"] == "5"
    assert (rows["alice"]["0.1 (by hand)"], rows["alice"]["by hand"], rows["alice"]["total"]) \
        == ("2", "2", "5")
    assert (rows["bob"]["0.1 (by hand)"], rows["bob"]["total"]) == ("0.5", "1.5")
    assert rows["carol"]["0.1 (by hand)"] == ""  # still to grade
    canvas = {r[1]: r for r in rows_of(reported["out"] / "canvas_import.csv")[2:]}
    assert canvas["1001"][5] == "5" and canvas["1002"][5] == "1.5"
    assert rows_of(reported["out"] / "canvas_import.csv")[1][5] == "5"
    bob = feedback_of(reported, "bob")
    assert "<td>0.1</td><td>0.5 / 2</td><td>graded by hand</td><td>=1+1 is not a proof</td>" \
        in bob
    # the points file is kept as filled (its comment made safe for a spreadsheet)
    kept = {r["student"]: r for r in csv.DictReader(path.open())}
    assert kept["alice"]["points"] == "2" and kept["bob"]["comment"] == "'=1+1 is not a proof"
    # and stays so, run after run
    for _ in range(2):
        assert run(reported["folder"], "--roster", reported["roster"], "--out",
                   reported["out"], "--source", EXAMPLE) == 0
    assert list(csv.DictReader(path.open())) == list(kept.values())
    capsys.readouterr()


def test_a_report_into_another_folder_starts_from_the_points_entered(tmp_path, capsys):
    """Instructor's term, L11: after the due date the feedback with hidden parts goes into a
    folder of its own (--show-hidden --out); its gradebook keeps the by-hand points entered in
    the default report's points.csv, and says where they were read."""
    folder, roster = make_class(tmp_path)
    assert run(folder, "--roster", roster, "--source", EXAMPLE) == 0
    default = folder.parent / f"{folder.name}_report"
    fill({"out": default}, {"alice": ("2", "Clear.")})
    shown = tmp_path / "after_due_date"
    assert run(folder, "--roster", roster, "--source", EXAMPLE, "--show-hidden",
               "--out", shown) == 0
    _, rows = by_student(shown / "gradebook.csv")
    assert rows["alice"]["0.1 (by hand)"] == "2"
    assert f"read from {default / 'by_hand' / 'points.csv'}" in capsys.readouterr().out
    kept = {r["student"]: r for r in csv.DictReader((shown / "by_hand" / "points.csv").open())}
    assert kept["alice"]["points"] == "2"


def test_a_report_into_another_folder_reads_rubric_items_with_their_rubric(tmp_path, capsys):
    """Instructor 46 F2: rubric items entered in the default report's points.csv are counted
    against the rubric.csv beside it, not against the new folder's (which does not exist yet:
    every entry was refused, and no gradebook written, until a second run); the rubric is
    carried over with the points, so that the new folder's next run counts the same items."""
    folder, roster = make_class(tmp_path)
    assert run(folder, "--roster", roster, "--source", EXAMPLE) == 0
    hand = folder.parent / f"{folder.name}_report" / "by_hand"
    edited = "exercise,item,points\n0.1,Adds c,0.5\n0.1,Cancels,1.25\n"
    (hand / "rubric.csv").write_text(edited)
    rows = list(csv.DictReader((hand / "points.csv").open()))
    for row in rows:
        row["max_points"] = "2"
        row["rubric"] = {"alice": "R1 R2", "bob": "R2"}.get(row["student"], "")
    write_csv(hand / "points.csv", by_hand.POINTS_HEADER, rows)
    shown = tmp_path / "after_due_date"
    args = (folder, "--roster", roster, "--source", EXAMPLE, "--show-hidden", "--out", shown)
    assert run(*args) == 0, capsys.readouterr().err
    _, book = by_student(shown / "gradebook.csv")
    assert (book["alice"]["0.1 (by hand)"], book["bob"]["0.1 (by hand)"]) == ("1.75", "1.25")
    assert (shown / "by_hand" / "rubric.csv").read_text() == edited  # not a first rubric
    assert run(*args) == 0  # now from the new folder's own points.csv and rubric.csv
    _, book = by_student(shown / "gradebook.csv")
    assert (book["alice"]["0.1 (by hand)"], book["bob"]["0.1 (by hand)"]) == ("1.75", "1.25")
    capsys.readouterr()


def test_running_again_without_hand_points_keeps_the_entered_points(reported, capsys):
    """Instructor walkthrough M2: after a regrade the report is run as at first; the points
    already in its points.csv stay in the gradebook and the Canvas file, and it says so."""
    fill(reported, {"alice": ("2", "Clear."), "bob": ("0.5", "")})
    assert run(reported["folder"], "--roster", reported["roster"], "--out", reported["out"],
               "--source", EXAMPLE) == 0
    printed = capsys.readouterr().out
    path = reported["out"] / "by_hand" / "points.csv"
    assert f"by-hand points: 2 entered, read from {path}" in printed
    assert "3 by-hand answer(s) not graded yet" in printed  # carol, dave, zed
    assert "--hand-points" not in printed
    _, rows = by_student(reported["out"] / "gradebook.csv")
    assert (rows["alice"]["0.1 (by hand)"], rows["alice"]["total"]) == ("2", "5")
    assert (rows["bob"]["0.1 (by hand)"], rows["bob"]["total"]) == ("0.5", "1.5")
    canvas = {r[1]: r for r in rows_of(reported["out"] / "canvas_import.csv")[2:]}
    assert canvas["1001"][5] == "5" and canvas["1002"][5] == "1.5"
    assert "Clear." in feedback_of(reported, "alice")


def test_another_points_file_that_lacks_entered_points_is_loud(reported, capsys, tmp_path):
    fill(reported, {"alice": ("2", ""), "bob": ("0.5", "")})
    other = tmp_path / "other.csv"
    other.write_text("student,exercise,max_points,points,comment\ncarol,0.1,2,1,late\n")
    before = outputs_of(reported)
    assert run(reported["folder"], "--out", reported["out"], "--source", EXAMPLE,
               "--hand-points", other) == 1
    err = capsys.readouterr().err
    assert "points.csv holds points for alice, exercise 0.1 that" in err
    assert "points.csv holds points for bob, exercise 0.1 that" in err
    assert outputs_of(reported) == before  # no gradebook without alice's and bob's points
    # our points.csv keeps its entries and takes the other file's: the next run has all three
    kept = {r["student"]: r["points"] for r in
            csv.DictReader((reported["out"] / "by_hand" / "points.csv").open())}
    assert (kept["alice"], kept["bob"], kept["carol"]) == ("2", "0.5", "1")
    assert run(reported["folder"], "--out", reported["out"], "--source", EXAMPLE) == 0
    _, rows = by_student(reported["out"] / "gradebook.csv")
    assert [rows[k]["0.1 (by hand)"] for k in ("alice", "bob", "carol")] == ["2", "0.5", "1"]
    capsys.readouterr()


def outputs_of(reported):
    """What a report writes that points not taken leave as they were."""
    out = reported["out"]
    return {p.relative_to(out).as_posix(): p.read_bytes()
            for p in [out / "gradebook.csv", out / "canvas_import.csv",
                      *(out / "feedback").iterdir()]}


def test_bad_points_are_named_and_not_taken(reported, capsys):
    path = fill(reported, {"alice": ("3", ""), "bob": ("one", ""), "carol": ("1", ""),
                           "zed": ("-1", "")}, extra=[
        {"student": "nobody", "name": "", "exercise": "0.1", "max_points": "2", "points": "1",
         "comment": ""},
        {"student": "dave", "name": "", "exercise": "0.2", "max_points": "2", "points": "1",
         "comment": ""},
        {"student": "carol", "name": "", "exercise": "0.1", "max_points": "2", "points": "2",
         "comment": ""}])
    before = outputs_of(reported)
    code = run(reported["folder"], "--roster", reported["roster"], "--out", reported["out"],
               "--source", EXAMPLE, "--hand-points", path)
    err = capsys.readouterr().err
    assert code == 1
    assert "points 3 for alice, exercise 0.1 is not between 0 and 2" in err
    assert "points 'one' for bob, exercise 0.1 is not a number" in err
    assert "unknown student 'nobody'" in err
    assert "exercise '0.2' is not graded by hand" in err
    assert "carol, exercise 0.1 again (first on line 4)" in err
    assert "points -1 for zed, exercise 0.1 is not between 0 and 2" in err
    assert "6 entries of" in err
    assert "not taken: points.csv line 2: points 3 for alice" in \
        (reported["out"] / "summary.txt").read_text()
    # a gradebook without the refused entries would look complete: none is written
    assert outputs_of(reported) == before
    assert "gradebook.csv, canvas_import.csv and the feedback pages NOT written" in err
    # the file keeps every entry as typed, to be corrected (a negative number stays one)
    kept = [(r["student"], r["points"]) for r in csv.DictReader(path.open())]
    assert ("zed", "'-1") in kept and ("bob", "one") in kept and ("nobody", "1") in kept
    # read again by default: still named, still exit status 1, still kept as typed
    assert run(reported["folder"], "--roster", reported["roster"], "--out", reported["out"],
               "--source", EXAMPLE) == 1
    assert "points 3 for alice, exercise 0.1 is not between 0 and 2" in capsys.readouterr().err
    assert [(r["student"], r["points"]) for r in csv.DictReader(path.open())] == kept


def test_points_saved_by_a_spreadsheet_with_semicolons_are_read(reported, capsys):
    path = reported["out"] / "by_hand" / "points.csv"
    text = "student;name;exercise;max_points;points;comment\nalice;A;0.1;2;1,5;ok\n"
    path.write_bytes(b"\xef\xbb\xbf" + text.encode())  # Excel's byte-order mark, a decimal comma
    assert run(reported["folder"], "--out", reported["out"], "--source", EXAMPLE,
               "--hand-points", path) == 0
    _, rows = by_student(reported["out"] / "gradebook.csv")
    assert rows["alice"]["0.1 (by hand)"] == "1.5"
    capsys.readouterr()


def test_an_unquoted_decimal_comma_in_a_comma_separated_file_is_refused(reported, capsys):
    """Walkthrough L2: `1,5` in a comma-separated file makes two fields (points 1, comment 5):
    the row is refused and named, not read as 1 with a comment; quoted, it is 1.5."""
    path = reported["out"] / "by_hand" / "points.csv"
    path.write_text("student,name,exercise,max_points,points,comment\n"
                    "alice,A,0.1,2,1,5,\n"
                    'bob,B,0.1,2,"1,5",fine\n'
                    "carol,C,0.1,2,1,good, but short\n")
    before = outputs_of(reported)
    assert run(reported["folder"], "--out", reported["out"], "--source", EXAMPLE) == 1
    err = capsys.readouterr().err
    assert "points.csv line 2: more fields than the header has columns" in err
    assert "points.csv line 4: more fields than the header has columns" in err
    assert "line 3" not in err
    assert outputs_of(reported) == before
    assert "points.csv left as it is" in err
    assert path.read_text().splitlines()[1] == "alice,A,0.1,2,1,5,"  # as typed, to correct


def test_a_notebook_of_no_chapter_is_listed_not_counted(tmp_path, capsys):
    folder, _ = make_class(tmp_path)
    with (folder / "grading_log.csv").open("a", newline="") as handle:
        csv.writer(handle, lineterminator="\n").writerow(
            ["stray/notes.ipynb", "", "not graded", "", "0.0", "0", "",
             "no chapter notebook matches its name or its exercise labels", ""])
    assert run(folder, "--out", tmp_path / "out", "--source", EXAMPLE) == 0
    assert "not graded as any chapter: stray/notes.ipynb: no chapter notebook matches" in \
        capsys.readouterr().out
    _, rows = by_student(tmp_path / "out" / "gradebook.csv")
    assert "stray" not in rows


def test_a_folder_not_graded_yet_is_named(tmp_path, capsys):
    assert run(tmp_path, "--source", EXAMPLE) == 2
    assert f"no grades.csv in {tmp_path}: grade the folder first" in capsys.readouterr().err


def test_max_points_must_agree_within_an_exercise(reported, capsys):
    path = reported["out"] / "by_hand" / "points.csv"
    rows = list(csv.DictReader(path.open()))
    rows[0]["max_points"], rows[0]["points"] = "3", "1"
    rows[1]["points"] = "1"
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    assert run(reported["folder"], "--out", reported["out"], "--source", EXAMPLE,
               "--hand-points", path) == 1
    assert "has max_points 1 here but 3 on line 2: one value per exercise" in \
        capsys.readouterr().err


# ---------------------------------------------------------------------------------------------
# End to end: the real grader on a small class, then the report

def test_end_to_end_from_grading_to_feedback(tmp_path, capsys):
    """`mha-grade grade` then `mha-grade report` on four students of the example chapter:
    full marks, a derivation only, a notebook whose second cell imports a missing package, and
    a causal_mask that squeezes (passes 0.3's visible part, fails its hidden one)."""
    folder = tmp_path / "class"
    full = fmt.load(EXAMPLE)
    notebooks = {"ann": full, "ben": student_nb("My derivation: " + HOSTILE)}
    broken = student_nb()
    broken["cells"].insert(1, {"cell_type": "code", "metadata": {}, "outputs": [],
                               "execution_count": None, "source": "import no_such_package"})
    notebooks["cid"] = broken
    squeezed = student_nb()
    mask = next(c for c in squeezed["cells"] if c["cell_type"] == "code"
                and "def causal_mask" in "".join(c["source"]))
    mask["source"] = ("def causal_mask(n):\n"
                      "    return torch.ones(n, n, dtype=torch.bool).tril().squeeze()")
    notebooks["dana"] = squeezed
    for who, nb in notebooks.items():
        (folder / who).mkdir(parents=True)
        (folder / who / NAME).write_text(json.dumps(nb))
    graded = subprocess.run([sys.executable, "-m", "mha_grade", "grade", str(folder),
                             "--source", str(EXAMPLE), "--jobs", "2", "--timeout", "120",
                             "--late-penalty", "10%/day"],
                            capture_output=True, text=True, timeout=600)
    assert graded.returncode == 0, graded.stdout + graded.stderr
    grades = list(csv.DictReader((folder / "grades.csv").open()))
    expected = {}
    for row in grades:
        who = row["notebook"].split("/")[0]
        expected[who] = expected.get(who, 0) + int(row["points"] or 0)
    assert expected == {"ann": 3, "ben": 0, "cid": 0, "dana": 1}
    # the grader logs 0.3's parts, the hidden one with its message, for the report to leave out
    log = {(r["notebook"], r["exercise"]): r
           for r in csv.DictReader((folder / "grading_log.csv").open())}
    parts = json.loads(log[(f"dana/{NAME}", "0.3")]["parts"])
    assert [(p["name"], p["hidden"], p["points"]) for p in parts] == \
        [(VISIBLE_PART, False, 1), (HIDDEN_PART, True, 0)]
    hidden_message = parts[1]["message"]
    assert "n=1" in hidden_message and hidden_message in log[(f"dana/{NAME}", "0.3")]["message"]
    out = tmp_path / "out"
    reported = subprocess.run([sys.executable, "-m", "mha_grade", "report", str(folder), "--out",
                               str(out), "--source", str(EXAMPLE)],
                              capture_output=True, text=True, timeout=300)
    assert reported.returncode == 0, reported.stdout + reported.stderr
    _, rows = by_student(out / "gradebook.csv")
    assert {who: int(rows[who]["autograded"]) for who in expected} == expected
    # the penalty the grading chose reaches the report; a folder per student: no lateness known
    assert str(late.graded_rule(folder)) == "10%/day"
    assert "--late-penalty 10%/day: no lateness is known for 4 notebook(s)" in reported.stdout
    assert {rows[who][PENALTY_COLUMN] for who in expected} == {"0"}
    html = (out / "by_hand" / "0.1.html").read_text()
    assert "My derivation: &lt;script&gt;" in html and "<script>" not in html
    cid = (out / "feedback" / file_name("cid")).read_text()
    assert "The first cell that failed" in cid and "No module named" in cid
    assert "no_such_package" in cid
    dana = (out / "feedback" / file_name("dana")).read_text()
    assert "<td>0.3</td><td>1 / 2</td>" in dana and "hidden part [0/1]" in dana
    assert HIDDEN_PART not in dana and "n=1" not in dana
    capsys.readouterr()


# ---------------------------------------------------------------------------------------------
# Hostile sizes: reading a submission after grading is linear in it (issue 35, item 2)

SECONDS = 30  # each takes 2-10 s here (on 2 shared cores); a quadratic step takes hours
SIZE = by_hand.MAX_NOTEBOOK_BYTES - 2**16  # room for the rest of the notebook


def hostile(answer_cells):
    """The example's student edition saved without cell ids, with ``answer_cells`` below the
    by-hand prompt (0.1): its answer, as far as the report can tell."""
    nb = student_nb()
    for item in nb["cells"]:
        item.pop("id", None)
    position = next(i for i, c in enumerate(nb["cells"]) if ":label: ex-00-1" in
                    "".join(c["source"]))
    nb["cells"][position + 1:position + 1] = answer_cells
    return nb


def markdown(text):
    return {"cell_type": "markdown", "metadata": {}, "source": text}


def timed(function, *args):
    start = time.perf_counter()
    result = function(*args)
    return result, time.perf_counter() - start


def test_the_report_ends_in_seconds_on_a_notebook_of_unclosed_comments(tmp_path, capsys):
    """The reproducer of issue 35, item 2, at the size limit: one markdown cell of unclosed
    ``<!--``, cell ids removed, below a by-hand prompt (a regex read it in time quadratic in
    its length: hours). The report finishes, and the page shows the answer, cut."""
    folder, roster = make_class(tmp_path)
    nb = hostile([markdown("<!--" * (SIZE // 4))])
    (folder / "alice" / NAME).write_text(json.dumps(nb))
    assert (folder / "alice" / NAME).stat().st_size <= by_hand.MAX_NOTEBOOK_BYTES
    code, seconds = timed(run, folder, "--roster", roster, "--out", tmp_path / "out",
                          "--source", EXAMPLE)
    assert code == 0, capsys.readouterr().err
    assert seconds < SECONDS
    page = (tmp_path / "out" / "by_hand" / "0.1.html").read_text()
    assert "&lt;!--&lt;!--" in page and "more characters]" in page


@pytest.mark.parametrize("text", ["<!--", "](", "{a:", ":label: ex-00-1 \t"])
def test_reading_a_markdown_cell_takes_one_pass(text):
    """Every pattern the report looks for in a markdown cell, started and never ended,
    repeated to the size limit: its words, and the exercise labels that mark prompts."""
    cell = text * (SIZE // len(text))
    _, seconds = timed(lambda: (by_hand.words(cell), by_hand.LABEL.findall(cell)))
    assert seconds < SECONDS


@pytest.mark.parametrize("text", [
    "See [the page](https://x.org/a_b) <!-- hidden\nline --> {cite:p}`v`, (sec)= done",
    "<!-- a --> b <!-- c --> d <!-- open", "[x](a(b)c) and [y](z w) more", "no markup at all"])
def test_words_are_the_ones_the_quadratic_regex_found(text):
    """The regex the report used before (quadratic), as the reference on ordinary text."""
    old = re.sub(r"\]\([^)]*\)|https?://\S+|\{[\w:-]+\}|\(\w+\)=|<!--.*?-->", " ", text,
                 flags=re.DOTALL)
    assert by_hand.words(text) == re.findall(r"[^\W_]+", old.casefold())


@pytest.mark.parametrize("path", [max(WITH_EXERCISES, key=lambda p: max(
    length for length, _ in by_hand.read_source(p).chapter.words))], ids=lambda p: p.stem[:2])
def test_recognising_the_chapters_text_is_linear_in_a_submission(path, tmp_path):
    """As many cells as the grader takes (MAX_CELLS), below the first exercise's prompt, ids
    removed, each as long as the chapter's longest markdown cell and half its words: telling
    the chapter's text from an answer compares each cell with each known one once, in one pass
    (difflib's ratio took 0.4 s a cell here: 13 minutes a notebook)."""
    source = by_hand.read_source(path)
    longest = max((c for c in json.loads(path.read_text())["cells"]
                   if c["cell_type"] == "markdown"), key=lambda c: len("".join(c["source"])))
    words = "".join(longest["source"]).split()
    nb = json.loads(handed_out(path))
    for item in nb["cells"]:
        item.pop("id", None)
    first = next(i for i, c in enumerate(nb["cells"]) if ":label: ex-" in "".join(c["source"]))
    hostile_cells = []
    for number_ in range(by_hand.MAX_CELLS - len(nb["cells"])):
        order = words[number_ % len(words):] + words[:number_ % len(words)]
        hostile_cells.append(markdown(" ".join(w if i % 2 else f"w{i}"
                                               for i, w in enumerate(order))))
    nb["cells"][first + 1:first + 1] = hostile_cells
    (tmp_path / path.name).write_text(json.dumps(nb))
    cells, read = timed(by_hand.read_cells, tmp_path / path.name)
    start = time.perf_counter()
    answers = [by_hand.answer(cells, label, source) for label in source.labels.values()]
    assert read + time.perf_counter() - start < SECONDS
    assert len(answers[0]) >= len(hostile_cells)  # none taken for the chapter's text


def test_a_notebook_of_more_cells_than_the_grader_takes_is_not_read(tmp_path):
    path = tmp_path / "many.ipynb"
    path.write_text(json.dumps({"cells": [markdown("x")] * (by_hand.MAX_CELLS + 1)}))
    with pytest.raises(ValueError, match=f"more than {by_hand.MAX_CELLS} cells"):
        by_hand.read_cells(path)


def test_the_reports_size_limits_are_the_graders():
    from mha_grade import submissions

    assert (by_hand.MAX_NOTEBOOK_BYTES, by_hand.MAX_CELLS) == \
        (submissions.MAX_NOTEBOOK_BYTES, submissions.MAX_CELLS)


# ---------------------------------------------------------------------------------------------
# By-hand pages as readable as the book: rendered, with the rubric, printed for Gradescope

def test_a_by_hand_page_renders_prompt_solution_and_answers_with_the_rubric(reported, capsys):
    hand = reported["out"] / "by_hand"
    html = (hand / "0.1.html").read_text()
    assert "<strong>Softmax ignores a shift</strong>" in html and ":label:" not in html
    assert "The chapter's solution</h2>" in html and "cancels" in html  # from the fixture
    alice = html.split("Alice Archer</h2>")[1].split("</section>")[0]
    assert '<span class="math-inline">\\frac{a}{b}</span>' in alice
    assert (hand / "mathjax" / "tex-svg-full.js").is_file() and "script-src 'self'" in html
    # the first rubric: one item of the exercise's points; the instructor's edit is kept
    assert rows_of(hand / "rubric.csv") == [["exercise", "item", "points"],
                                            ["0.1", rubric.FIRST_ITEM, "1"]]
    assert alice.count("R1</strong> (1)") == 1
    (hand / "rubric.csv").write_text("exercise,item,points\n0.1,Adds c to every score,0.5\n"
                                     "0.1,Cancels e^c,0.5\n")
    assert run(reported["folder"], "--roster", reported["roster"], "--out", reported["out"],
               "--source", EXAMPLE) == 0
    html = (hand / "0.1.html").read_text()
    bob = html.split("Bob Baker</h2>")[1].split("</section>")[0]
    assert "R1</strong> (0.5) Adds c to every score" in bob and "R2</strong> (0.5)" in bob
    assert (hand / "rubric.csv").read_text().count("\n") == 3
    capsys.readouterr()


@pytest.mark.skipif(shutil.which("chromium") is None, reason="needs Debian's chromium")
def test_pdf_prints_each_by_hand_page_a_page_per_student(reported, capsys):
    assert run(reported["folder"], "--out", reported["out"], "--source", EXAMPLE, "--pdf") == 0
    data = (reported["out"] / "by_hand" / "pdf" / "0.1.pdf").read_bytes()
    assert data.startswith(b"%PDF-")
    pages = len(re.findall(rb"/Type\s*/Page[^s]", data))
    assert pages >= len(CLASS) + 1  # the exercise, then each student from a new page
    assert "--pdf" not in capsys.readouterr().out
    # the maths is typeset in it: drawn as paths (MathJax's SVG glyphs), where the same page
    # printed without MathJax beside it shows TeX as text
    bare = reported["out"] / "bare"
    shutil.copytree(reported["out"] / "by_hand", bare, ignore=shutil.ignore_patterns("mathjax"))
    assert pdf.print_pdf(bare / "0.1.html", bare / "0.1.pdf", pdf.chromium()) is None
    typeset, as_text = path_operators(data), path_operators((bare / "0.1.pdf").read_bytes())
    assert typeset > as_text + 1000, (typeset, as_text)


def path_operators(data):
    """How many line and curve segments a PDF's content streams draw."""
    import zlib

    count = 0
    for stream in re.findall(rb"stream\r?\n(.*?)endstream", data, re.DOTALL):
        try:
            count += len(re.findall(rb"\s[cl]\n", zlib.decompress(stream)))
        except zlib.error:
            continue
    return count


def test_pdf_without_chromium_says_so_and_writes_the_rest(reported, capsys, monkeypatch):
    monkeypatch.setattr(pdf, "chromium", lambda: None)
    assert run(reported["folder"], "--out", reported["out"], "--source", EXAMPLE, "--pdf") == 0
    assert "--pdf: chromium not found" in capsys.readouterr().out
    assert not (reported["out"] / "by_hand" / "pdf").exists()
    assert (reported["out"] / "gradebook.csv").is_file()


def test_rubric_items_entered_in_points_csv_count_their_sum(reported, capsys):
    """points.csv's rubric column: the items given; with points blank their sum counts (the
    rubric's own points, put in here), typed points win, an unknown item is not taken."""
    hand = reported["out"] / "by_hand"
    (hand / "rubric.csv").write_text("exercise,item,points\n0.1,Adds c,0.5\n0.1,Cancels,1.25\n"
                                     "0.1,Says why it matters,0.25\n")
    path = hand / "points.csv"
    rows = list(csv.DictReader(path.open()))
    entries = {"alice": ("", "R1 r2"), "bob": ("0.5", "R1 R2 R3"), "carol": ("", "R2,R3"),
               "dave": ("", "R4"), "zed": ("", "R1 R1")}
    for row in rows:
        row["max_points"] = "2"
        row["points"], row["rubric"] = entries[row["student"]]
    write_csv(path, by_hand.POINTS_HEADER, rows)
    args = (reported["folder"], "--roster", reported["roster"], "--out", reported["out"],
            "--source", EXAMPLE)
    assert run(*args) == 1
    err = capsys.readouterr().err
    assert "dave, exercise 0.1: rubric 'R4': no item R4 in rubric.csv (it has R1, R2, R3)" in err
    assert "zed, exercise 0.1: rubric 'R1 R1': an item twice" in err
    for row in rows:
        if row["student"] in ("dave", "zed"):
            row["rubric"] = ""
    write_csv(path, by_hand.POINTS_HEADER, rows)
    assert run(*args) == 0
    _, book_rows = by_student(reported["out"] / "gradebook.csv")
    assert {k: book_rows[k]["0.1 (by hand)"] for k in ("alice", "bob", "carol")} == \
        {"alice": str(0.5 + 1.25), "bob": "0.5", "carol": str(1.25 + 0.25)}
    kept = {r["student"]: r["rubric"] for r in csv.DictReader(path.open())}
    assert kept["alice"] == "R1 r2" and kept["bob"] == "R1 R2 R3"
    capsys.readouterr()


def test_rubric_items_summing_past_max_points_are_named_as_the_source_of_the_points(reported,
                                                                                     capsys):
    """Points left blank, rubric items given whose sum passes max_points: the refusal names the
    rubric, since the number it quotes (the sum) is typed nowhere in points.csv. Typed points
    out of range keep the plain message."""
    hand = reported["out"] / "by_hand"
    (hand / "rubric.csv").write_text("exercise,item,points\n0.1,Adds c,0.75\n0.1,Cancels,0.5\n")
    path = hand / "points.csv"
    rows = list(csv.DictReader(path.open()))
    entries = {"alice": ("", "R1 R2"), "bob": ("3", "R1")}
    for row in rows:
        row["points"], row["rubric"] = entries.get(row["student"], ("1", ""))
    write_csv(path, by_hand.POINTS_HEADER, rows)
    assert run(reported["folder"], "--roster", reported["roster"], "--out", reported["out"],
               "--source", EXAMPLE) == 1
    err = capsys.readouterr().err
    assert ("points 1.25 (the sum of rubric 'R1 R2': its items' points in rubric.csv) for "
            "alice, exercise 0.1 is not between 0 and 1") in err
    assert "points 3 for bob, exercise 0.1 is not between 0 and 1" in err  # typed: as before


LEFT = ("your notebook uses the builtin getattr (code cell 7, line 2), which the grader cannot "
        "see past: your instructor grades this exercise by hand")


def test_an_autograded_exercise_left_to_the_instructor_is_graded_in_points_csv(tmp_path,
                                                                              capsys):
    """Issue 35: the grader leaves an exercise that forbids ops to the instructor when the
    student's code is not plain (mha_grade.compare.leave_to_instructor): its points are empty,
    its maximum kept. It is on the by-hand page and in points.csv for that student only, not
    graded until points are entered (never a silent 0), and the points entered count."""
    folder, roster = make_class(tmp_path)
    graded = {f"{who}/{NAME}": spec for who, spec in CLASS.items()}
    graded[f"bob/{NAME}"] = dict(
        CLASS["bob"], points=("", 0), status=("left to the instructor", "wrong"),
        messages=(LEFT, "wrong"),
        flags="exercise 0.2 left to the instructor: its code is not plain (the builtin getattr "
              "(code cell 7, line 2)); the check alone found correct, 1/1")
    grader_files(folder, graded)
    out = tmp_path / "out"
    assert run(folder, "--roster", roster, "--out", out, "--source", EXAMPLE) == 0
    points = out / "by_hand" / "points.csv"
    rows = list(csv.DictReader(points.open()))
    assert [(r["student"], r["exercise"], r["max_points"]) for r in rows
            if r["exercise"] == "0.2"] == [("bob", "0.2", "1")]
    page_ = (out / "by_hand" / "0.2.html").read_text()
    assert "left to you by the grader" in page_ and "getattr (code cell 7, line 2)" in page_
    # instructor 47: what the check found on its own was in the gradebook's notes only
    assert "(the check alone found: correct, 1/1)" in page_
    assert "Alice Archer" not in page_  # autograded for her
    _, gradebook = by_student(out / "gradebook.csv")
    assert gradebook["bob"]["0.2"] == "" and "by hand, not graded yet: 0.1, 0.2" in \
        gradebook["bob"]["notes"]
    assert gradebook["alice"]["0.2"] == "1"
    assert "<td>0.2</td><td>not graded yet</td><td>graded by hand</td><td>your notebook uses " \
        "the builtin getattr" in feedback_of({"out": out}, "bob")
    for row in rows:
        if (row["student"], row["exercise"]) == ("bob", "0.2"):
            row["points"] = "1"
    with points.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    assert run(folder, "--roster", roster, "--out", out, "--source", EXAMPLE) == 0
    _, gradebook = by_student(out / "gradebook.csv")
    assert (gradebook["bob"]["0.2"], gradebook["bob"]["0.3"]) == ("1", "0")
    notes = gradebook["bob"]["notes"]  # (the grader's review flag names 0.2 still)
    assert "not graded yet: 0.1, 0.2" not in notes and "not graded yet: 0.1" in notes
    # more than the exercise is worth is refused
    rows = [dict(r, max_points="5", points="5") if (r["student"], r["exercise"]) == ("bob", "0.2")
            else r for r in rows]
    with points.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    run(folder, "--roster", roster, "--out", out, "--source", EXAMPLE)
    assert "exercise 0.2 is worth 1 points (autograded, left to you), not 5" in \
        capsys.readouterr().out + (out / "summary.txt").read_text()
