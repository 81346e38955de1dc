"""mha_grade.copies: who handed a notebook in, and which of one student's copies of a chapter
counts, the same rule when grading a class, in the report and on Gradescope (issue 35 item 7,
issue 39 H1 and M1)."""

from __future__ import annotations

import json
import os
import time

import pytest
from exercise_notebooks import EXAMPLE, fmt

from mha_grade import assignments, copies, gradescope, submissions
from mha_grade.compare import Outcome

NAME = EXAMPLE.name
STEM = EXAMPLE.stem


@pytest.mark.parametrize("notebook, exports, key", [
    (f"alice/{NAME}", [], "alice"),
    (f"alice/sub/{NAME}", [], "alice"),
    # a Canvas download: the user id, whatever the submission id (M1: it was part of the key)
    (f"smithalice_700030_700031_{NAME}", [], "canvas-700030"),
    (f"smithalice_700030_700032_{STEM}-1.ipynb", [], "canvas-700030"),
    (f"smithalice_LATE_700030_700033_{NAME}", [], "canvas-700030"),
    (f"alice_{NAME}", [], "alice"),
    # Gradescope's export, as SUBMISSIONS or one per assignment: each submission_NNN its own
    (f"submission_11/{NAME}", [""], "submission_11"),
    (f"ch00/submission_11/{NAME}", ["ch00", "ch03"], "ch00/submission_11"),
    (f"ch00/submission_11/sub/{NAME}", ["ch00"], "ch00/submission_11"),
    # a student's own folder named so is no submission of its own: no export there
    (f"alice/submission_1/{NAME}", [], "alice"),
])
def test_a_notebooks_owner_comes_from_its_place(notebook, exports, key):
    assert copies.owner_of(notebook, STEM, exports).key == key


def test_handed_in_follows_canvas_submission_ids_then_file_times(tmp_path):
    older, newer = tmp_path / "older.ipynb", tmp_path / "newer.ipynb"
    for number, path in enumerate([older, newer]):
        path.write_text("{}")
        os.utime(path, (1.7e9 + number, 1.7e9 + number))
    assert copies.handed_in("a/older.ipynb", older) < copies.handed_in("a/newer.ipynb", newer)
    # Canvas's ids win over the files' times (an unzipped download may set any time)
    assert copies.handed_in(f"x_1_10_{NAME}", older) > copies.handed_in(f"x_1_9_{NAME}", newer)
    # the same time: the name decides, so two copies are never tied
    assert copies.handed_in("a/b.ipynb", None) != copies.handed_in("a/c.ipynb", None)


@pytest.mark.parametrize("rule, points, expected, why", [
    ("latest", {"a": 3, "b": 1, "c": 2}, "c", "handed in last"),
    ("best", {"a": 3, "b": 1, "c": 2}, "a", "the most points"),
    ("best", {"a": 3, "b": 3, "c": 2}, "b", "the most points, handed in last of those"),
    ("best", {"a": None, "b": 1, "c": None}, "b", "the most points"),  # a and c not graded
])
def test_counted_is_the_latest_or_the_best(rule, points, expected, why):
    order = {"a": 1, "b": 2, "c": 3}
    assert copies.counted(list(order), rule, order.get, points.get) == (expected, why)


def test_an_unknown_rule_is_refused_by_name():
    with pytest.raises(ValueError, match="must be one of latest, best, not 'newest'"):
        copies.counted(["a"], "newest", str)


# ---------------------------------------------------------------------------------------------
# Grading a class: the copies of one owner, and only theirs, cost one grading

def write(folder, names, solved=True):
    """Notebooks of the example chapter, handed in in the order given, one second apart."""
    nb = json.dumps(fmt.load(EXAMPLE) if solved else {"cells": []})
    for number, name in enumerate(names):
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(nb)
        os.utime(folder / name, (1.7e9 + number, 1.7e9 + number))


def graded(folder, rule="latest"):
    found = submissions.find_submissions(folder, [assignments.load_assignment(EXAMPLE)],
                                         rule=rule)
    return {f.relative: f.problem for f in found if f.path is not None}, \
        {f.relative: f.problem for f in found if f.path is None}


def test_a_canvas_download_grades_each_students_last_submission_once(tmp_path):
    """Issue 39 H1 and M1, in one flat folder: alice's later upload (Canvas named it "-1")
    is graded, her earlier one (named exactly as the chapter, modified last on disk) is not,
    and says so; bob's one submission is graded as it is."""
    later = f"smithalice_1001_700031_{STEM}-1.ipynb"
    earlier = f"smithalice_1001_700030_{NAME}"
    write(tmp_path, [later, earlier, f"bakerbob_1002_700029_{NAME}"])
    kept, ignored = graded(tmp_path)
    assert set(kept) == {later, f"bakerbob_1002_700029_{NAME}"}
    assert kept[later].startswith("duplicate: chapter 00 handed in 2 times by canvas-1001: "
                                  "this copy (handed in last, by Canvas's submission "
                                  "order) is graded")
    assert set(ignored) == {earlier}
    assert ignored[earlier].startswith(copies.IGNORED)
    assert f"{later} (handed in last, by Canvas's submission order) is graded" in \
        ignored[earlier]


def test_a_gradescope_export_per_assignment_grades_every_submission(tmp_path):
    """ch00/submission_11 and ch00/submission_12 are two students (the export's metadata
    says it is an export), not one student "ch00" with two copies."""
    write(tmp_path, [f"ch00/submission_11/{NAME}", f"ch00/submission_12/{NAME}"])
    (tmp_path / "ch00" / "submission_metadata.yml").write_text("{}\n")
    kept, ignored = graded(tmp_path)
    assert len(kept) == 2 and not any(kept.values())
    assert list(ignored) == ["ch00/submission_metadata.yml"]  # not a notebook


def test_a_look_alike_folder_never_displaces_a_students_notebook(tmp_path):
    """Issue 35, item 5: a 0-point copy handed in last in ALICE/ or ' alice/' is another
    owner's: alice's own notebook is graded all the same (the report then stops on the
    look-alikes, tests/test_report.py)."""
    write(tmp_path, [f"alice/{STEM}-1.ipynb"])
    write(tmp_path, [f"ALICE/{NAME}", f" alice/{NAME}"], solved=False)
    kept, ignored = graded(tmp_path)
    assert set(kept) == {f"alice/{STEM}-1.ipynb", f"ALICE/{NAME}", f" alice/{NAME}"}
    assert not ignored and not any(kept.values())


def test_five_copies_cost_one_grading_and_best_grades_all(tmp_path):
    names = [f"ann/{n}_{NAME}" for n in "abcde"]
    write(tmp_path, names)
    kept, ignored = graded(tmp_path)
    assert list(kept) == [names[-1]] and sorted(ignored) == names[:-1]
    kept, ignored = graded(tmp_path, "best")
    assert sorted(kept) == names and not ignored


def test_best_grades_only_the_latest_few_and_every_note_stays_short(tmp_path):
    """An outside attack handed in 3,000 copies under --copies best: every one was graded, and
    each note listed all the others (finding them alone took 316 s)."""
    names = [f"ann/{STEM}-{n:04d}.ipynb" for n in range(300)]
    write(tmp_path, names)
    for rule in ("latest", "best"):
        start = time.monotonic()
        kept, ignored = graded(tmp_path, rule)
        assert time.monotonic() - start < 10
        latest = names[-submissions.MAX_COPIES_GRADED:] if rule == "best" else names[-1:]
        assert sorted(kept) == latest and len(ignored) == 300 - len(latest)
        assert all(len(note) < 1000 for note in [*kept.values(), *ignored.values()])
        assert all("and 29" in note for note in kept.values())  # 5 named, 294 or 299 more


def test_a_folder_of_many_files_gives_a_bounded_number_of_rows(tmp_path):
    """An outside attack: 70,000 empty files under a 3,826-character path made a 272 MB
    grading log that the report refused for the whole class. A folder's entries that are not
    notebooks get rows up to a bound, then one row; its notebook is still graded."""
    deep = tmp_path / "mallory" / "/".join(["d" * 200] * 5)
    deep.mkdir(parents=True)
    for i in range(1000):
        (deep / f"x{i:04d}.txt").touch()
    write(tmp_path, [f"mallory/zz/{NAME}", f"alice/{NAME}"])
    kept, ignored = graded(tmp_path)
    assert set(kept) == {f"mallory/zz/{NAME}", f"alice/{NAME}"}
    assert len(ignored) == submissions.MAX_SKIPPED_PER_STUDENT + 1
    assert "1000 entries under mallory are not notebooks" in ignored["mallory/..."]


# ---------------------------------------------------------------------------------------------
# Gradescope: the same rule for one student's submission

def found_in(folder):
    return submissions.find_submissions(folder, [assignments.load_assignment(EXAMPLE)],
                                        rule=None)


def test_gradescope_grades_the_copy_handed_in_last_not_the_one_named_as_the_chapter(tmp_path):
    """Issue 39 H1: a draft named as the chapter and a newer "Ch0 final (2).ipynb" (found by
    its exercise labels): the newer one is graded."""
    write(tmp_path, [NAME, "Ch0 final (2).ipynb"])
    chapter = [assignments.load_assignment(EXAMPLE)]
    kept, ignored = gradescope.one_per_chapter(found_in(tmp_path), chapter)
    assert [k.relative for k in kept] == ["Ch0 final (2).ipynb"]
    assert [(i.relative, "Ch0 final (2).ipynb is graded, because it was handed in last" in why)
            for i, why in ignored] == [(NAME, True)]


def test_copies_handed_in_at_the_same_time_say_the_name_chose_in_both_modes(tmp_path):
    """Instructor 48: a blank old_00_... and the solved 00_... of one upload share a time; the
    name picks one, and the notes say so instead of "handed in last"."""
    write(tmp_path, [f"alice/{NAME}", f"alice/old_{NAME}"])
    for path in (tmp_path / "alice").iterdir():
        os.utime(path, (1.7e9, 1.7e9))
    kept, _ = graded(tmp_path)
    assert list(kept) == [f"alice/old_{NAME}"]
    assert "handed in at the same time as another copy, so chosen by its name" in \
        kept[f"alice/old_{NAME}"] and "check it is the one meant" in kept[f"alice/old_{NAME}"]
    chapter = [assignments.load_assignment(EXAMPLE)]
    _, ignored = gradescope.one_per_chapter(found_in(tmp_path / "alice"), chapter)
    assert ["handed in at the same time as another copy" in why for _, why in ignored] == [True]


def test_gradescope_best_grades_every_copy_and_keeps_the_most_points(tmp_path):
    write(tmp_path, [NAME, "later.ipynb"])
    chapter = [assignments.load_assignment(EXAMPLE)]
    found = found_in(tmp_path)
    kept, ignored = gradescope.one_per_chapter(found, chapter, "best")
    assert len(kept) == 2 and not ignored
    outcomes = []
    for item, points in zip(kept, (3, 1), strict=True):  # the earlier one scored more
        outcome = Outcome(item.relative, chapter[0])
        outcome.points = {"0.2": 1, "0.3": points - 1}
        outcomes.append(outcome)
    counted, worse = gradescope.best_copies(outcomes, found)
    assert [o.notebook for o in counted] == [NAME]
    assert [i.relative for i, _ in worse] == ["later.ipynb"]
    assert f"{NAME} counts: the most points (1 points here)" in worse[0][1]


def test_grading_refuses_an_unknown_rule_by_name(tmp_path):
    with pytest.raises(ValueError, match="rule must be one of latest, best, not 'newest'"):
        graded(tmp_path, "newest")


def test_the_graders_own_files_in_the_class_folder_are_not_submissions(tmp_path):
    """Graded into SUBMISSIONS itself (the default --out): the rule and the kept time limits
    are the grader's, never rows of "not a notebook"."""
    (tmp_path / "alice").mkdir()
    (tmp_path / "alice" / "notes.txt").write_text("x")
    copies.keep_rule(tmp_path, "best")
    (tmp_path / "time_limits.json").write_text("{}")
    found = submissions.find_submissions(tmp_path, [], out=tmp_path)
    assert [f.relative for f in found] == ["alice/notes.txt"]
