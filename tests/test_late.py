"""mha_grade.late: how late a notebook was handed in, from the LMS's word only, and the class's
penalty for it (issue 39: due dates and late penalties)."""

from __future__ import annotations

import math
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from fractions import Fraction

import pytest
from exercise_notebooks import EXAMPLE
from hypothesis import given
from hypothesis import strategies as st

from mha_grade import late

NAME = EXAMPLE.name
UNKNOWN = late.Lateness(None, "Canvas marked the file late")


@pytest.mark.parametrize("text, percent, per_day, shown", [
    ("none", 0, False, "none"), ("NONE", 0, False, "none"),
    ("20%", 20, False, "20%"), ("10%/day", 10, True, "10%/day"),
    (" 12.5 %/day", Decimal("12.5"), True, "12.5%/day"), ("100%", 100, False, "100%")])
def test_a_rule_is_none_a_flat_percentage_or_a_percentage_per_day(text, percent, per_day, shown):
    rule = late.Penalty.parse(text)
    assert (rule.percent, rule.per_day, str(rule)) == (percent, per_day, shown)
    assert late.Penalty.parse(str(rule)) == rule  # written down and read back unchanged


@pytest.mark.parametrize("text", ["0%", "-5%", "101%", "10", "10%/week", "ten", "1e2%", "",
                                  "10%/day/day", "nan%"])
def test_a_bad_rule_is_refused_naming_the_argument(text):
    with pytest.raises(ValueError, match=r"^--late-penalty must be 'none'.*not "):
        late.Penalty.parse(text)


def reference_off(points: Fraction, percent: Fraction, per_day: bool, days: int | None):
    """The points taken off, by the rule as the instructors' page states it: the percentage
    (times the days, an unknown lateness counting one) of the points, at most all of them,
    rounded down to the hundredth."""
    times = (1 if days is None else days) if per_day else 1
    fraction = min(Fraction(1), percent * times / 100)
    return Fraction(math.floor(points * fraction * 100), 100)


@given(cents=st.integers(0, 10_000), percent=st.integers(1, 10_000),
       per_day=st.booleans(), days=st.one_of(st.none(), st.integers(1, 400)))
def test_the_points_taken_off_are_the_rules_share_rounded_down_to_the_hundredth(
        cents, percent, per_day, days):
    points = cents / 100
    rule = late.Penalty(Decimal(percent) / 100, per_day)  # 0.01% to 100%
    off = rule.deduction(points, late.Lateness(days, "test"))
    assert Fraction(off).limit_denominator(100) == reference_off(
        Fraction(cents, 100), Fraction(percent, 100), per_day, days)
    assert 0 <= off <= points and points - off >= 0  # never below 0, never more points


@pytest.mark.parametrize("points", [0.0, -1.0, float("nan"), float("inf")])
def test_nothing_is_taken_off_no_points_or_a_value_that_is_not_a_score(points):
    assert late.Penalty.parse("50%").deduction(points, late.Lateness(3, "test")) == 0


def test_the_instructors_page_example_rounds_down():
    """book/instructors.md: "10% of 3.55 points is 0.355, and 0.35 is taken off"."""
    assert late.Penalty.parse("10%").deduction(3.55, late.Lateness(1, "test")) == 0.35


def test_a_full_penalty_leaves_nothing_and_no_float_residue_is_left():
    """100%/day 4 days late on 3.083 points left 0.003 (the deduction was rounded down to
    3.08), and 100% of 0.1 + 0.2 points left 5.55e-17 in the gradebook."""
    four_days, rule = late.Lateness(4, "test"), late.Penalty.parse("100%/day")
    assert rule.deduction(3.083, four_days) == 3.083 and rule.after(3.083, four_days) == 0
    assert late.Penalty.parse("100%").after(0.1 + 0.2, four_days) == 0
    assert late.Penalty.parse("10%").after(0.1 + 0.2, four_days) == 0.27
    assert late.Penalty.parse("10%").after(3.0, None) == 3.0


def test_on_time_or_without_a_rule_nothing_is_taken_off():
    assert late.Penalty.parse("50%").deduction(4.0, None) == 0
    assert late.Penalty.parse("none").deduction(4.0, late.Lateness(3, "test")) == 0


def test_a_lateness_the_lms_does_not_measure_counts_one_day_and_says_so():
    rule = late.Penalty.parse("10%/day")
    assert rule.deduction(3.0, UNKNOWN) == 0.3
    assert rule.note(3.0, UNKNOWN) == (
        "handed in late (Canvas marked the file late): 10% off (10% per day, counted as one "
        "day: the LMS does not say how late), 0.3 point(s) of 3 taken off")


@pytest.mark.parametrize("after, days", [
    (timedelta(seconds=-1), None), (timedelta(0), None), (timedelta(seconds=1), 1),
    (timedelta(days=1), 1), (timedelta(days=1, seconds=1), 2), (timedelta(days=6.5), 7)])
def test_days_late_count_each_day_or_part_of_a_day_after_the_due_date(after, days):
    due = datetime(2026, 3, 1, 23, 59, tzinfo=timezone.utc)
    found = late.lateness_from_times(due + after, due, "test")
    assert (found.days if found else None) == days


def test_times_without_a_time_zone_are_refused_by_name():
    with pytest.raises(ValueError, match="--due 03=2026-03-01T23:59: .* has no time zone"):
        late.parse_dues(["03=2026-03-01T23:59"])
    with pytest.raises(ValueError, match="--due '3=x': write TIME, or NN=TIME"):
        late.parse_dues(["3=x"])
    assert late.parse_dues(["2026-03-01T23:59Z"]) == {
        "": datetime(2026, 3, 1, 23, 59, tzinfo=timezone.utc)}


@pytest.mark.parametrize("notebook, is_late", [
    (f"smithalice_late_700030_700031_{NAME}", True),
    (f"smithalice_LATE_700030_700031_{NAME}", True),
    (f"smithalice_700030_700031_{NAME}", False),
    # the student's own file name comes after Canvas's ids: it can neither add the mark ...
    (f"smithalice_700030_700031_smithalice_late_700030_700031_{NAME}", False),
    # ... nor take it away
    (f"smithalice_late_700030_700031_smithalice_700030_700031_{NAME}", True),
    # inside a folder a name is the student's, not Canvas's: no lateness known either way
    (f"alice/smithalice_700030_700031_{NAME}", None),
    (f"alice/smithalice_late_700030_700031_{NAME}", None),
    (f"alice_{NAME}", None),
])
def test_canvas_marks_late_work_in_the_part_of_the_name_it_writes(notebook, is_late):
    found = late.canvas_lateness(notebook)
    assert (found is not None) == bool(is_late)


def metadata(created, due, late_due=None, own_due=None):
    users = [{"email": "s@example.com", "id": 1, "name": "S"}]
    if own_due:
        users[0]["assignment"] = {"due_date": own_due}
    return {"id": 1, "created_at": created, "users": users,
            "assignment": {"due_date": due, "late_due_date": late_due, "title": "Chapter 3"}}


@pytest.mark.parametrize("data, days", [
    (metadata("2018-07-31T22:59:59.000000-07:00", "2018-07-31T23:00:00.000000-07:00"), None),
    (metadata("2018-08-01T06:00:01.000000+00:00", "2018-07-31T23:00:00.000000-07:00"), 1),
    (metadata("2018-08-02T23:00:01.000000-07:00", "2018-07-31T23:00:00.000000-07:00",
              "2018-08-07T23:00:00.000000-07:00"), 3),
    # a user's own, later due date (an extension) counts
    (metadata("2018-08-02T23:00:01.000000-07:00", "2018-07-31T23:00:00.000000-07:00",
              own_due="2018-08-03T23:00:00.000000-07:00"), None),
    (metadata("2018-08-02T23:00:01.000000-07:00", None), None),  # no due date: not late
])
def test_gradescope_metadata_says_how_late_against_the_due_date(data, days):
    found = late.gradescope_lateness(data)
    assert (found.days if found else None) == days


@pytest.mark.parametrize("data", [[], {"created_at": "x"},
                                  metadata("yesterday", "2018-07-31T23:00:00-07:00")])
def test_metadata_not_as_gradescope_documents_it_is_refused(data):
    with pytest.raises(ValueError, match="submission_metadata.json"):
        late.gradescope_lateness(data)


def test_grading_again_keeps_the_rule_the_folder_was_graded_with(tmp_path):
    late.keep_rule(tmp_path, late.Penalty.parse("10%/day"))
    assert str(late.rule_for_grading(None, tmp_path, again=True)) == "10%/day"
    assert str(late.rule_for_grading(None, tmp_path, again=False)) == "none"  # afresh
    with pytest.raises(ValueError, match="graded with --late-penalty 10%/day"):
        late.rule_for_grading("20%", tmp_path, again=True)
    (tmp_path / late.RULE_FILE).write_text('{"late_penalty": "-1%"}')  # not the grader's
    assert late.graded_rule(tmp_path) is None
