"""Feedback for each student: one HTML page with every chapter's points and the checks' words.

Per chapter: the notebook counted, what went wrong with it as a whole (a time limit, a
duplicate), the first cell that raised (the grader's ``first_error``: when a setup cell fails,
every later check says "name 'mha' is not defined", and this says why), then each exercise's
points and message; by-hand exercises say "graded by hand" with the instructor's points and
comment once entered. A chapter handed in late (as the LMS says) shows its points after the
class's late penalty, and a line saying how late and what was taken off (mha_grade.late).
Names and messages come from submissions and are escaped; a page's file name is made from the
student's key (letters, digits and dashes, plus a hash: safe and unique).
The grader's flags are for the instructor and are not shown.

Hidden parts of checks: by default a page shows each hidden part's points, not its message
(which names the hidden cases and what the hidden seed drew), and says so; ``show_hidden``
(``mha-grade report --show-hidden``, once the due date has passed) shows the messages too, as
Gradescope's ``after_due_date`` does.
"""

from __future__ import annotations

import re

from mha_grade.by_hand import esc, page
from mha_grade.gradebook import Gradebook, Result, Student, feedback_file, fmt_points

DEFINED = re.compile(r"is not defined|has no attribute|cannot import|No module named")
HIDDEN_LABEL = "hidden part"  # how a check's message names a hidden part (mha.exercises)
WITHHELD = "message shown after the due date"


def student_message(result: Result, show_hidden: bool = False) -> tuple[str, bool]:
    """The message a student sees, and whether a hidden part's message was left out. With the
    grader's ``parts``, the visible parts' messages and every hidden part's points; without
    them (a log written before they were), no message at all if it may name a hidden part."""
    if show_hidden:
        return result.message, False
    if result.parts is not None and any(p["hidden"] for p in result.parts):
        lines, count = [], sum(1 for p in result.parts if p["hidden"])
        number = 0
        for part in result.parts:
            points = f"[{fmt_points(part['points'])}/{fmt_points(part['max_points'])}]"
            if part["hidden"]:
                number += 1
                label = HIDDEN_LABEL + (f" {number}" if count > 1 else "")
                lines.append(f"{label} {points}: {WITHHELD}")
            else:
                lines.append(f"part '{part['name']}' {points}: {part['message']}")
        return "; ".join(lines), True
    if HIDDEN_LABEL in result.message:
        return f"this check has hidden parts: its {WITHHELD}", True
    return result.message, False


file_name = feedback_file  # the name of a student's page in feedback/


def feedback_page(book: Gradebook, student: Student, show_hidden: bool = False) -> str:
    total = sum(book.chapter_total(student, c) for c in book.chapters)
    most = sum(book.chapter_max(c) for c in book.chapters)
    body = [f"<h1>Feedback for {esc(student.name)}</h1>",
            f"<p><strong>Total: {fmt_points(total)} / {fmt_points(most)} points</strong>"
            " (by-hand exercises count once graded).</p>"]
    withheld = hidden = False
    if not student.notebooks:
        body.append("<p>No notebook was handed in.</p>")
    for chapter in book.chapters:
        nb = student.notebooks.get(chapter.number)
        body.append(f"<h2>Chapter {esc(chapter.name)}: "
                    f"{fmt_points(book.chapter_total(student, chapter))} / "
                    f"{fmt_points(book.chapter_max(chapter))}</h2>")
        if nb is None:
            body.append("<p>Nothing handed in for this chapter.</p>")
            continue
        body.append(f"<p>Notebook graded: <code>{esc(nb.name)}</code></p>")
        lateness = book.lateness(student, chapter)
        if lateness is not None:  # the LMS's word, and the class's rule (mha_grade.late)
            said = book.penalty.note(book.chapter_points(student, chapter), lateness)
            body.append(f"<p class=\"blank\">Late: {esc(said)}.</p>")
        for other in student.others:
            if other.chapter == chapter.number:
                body.append(f"<p class=\"note\">Also handed in, not counted: "
                            f"<code>{esc(other.name)}</code></p>")
        if nb.problem:
            body.append(f"<p class=\"blank\">About this notebook: {esc(nb.problem)}</p>")
        if nb.first_error:
            later = any(DEFINED.search(r.message) for r in nb.results.values())
            body.append(
                "<p class=\"blank\">The first cell that failed when your notebook ran from top "
                f"to bottom: <code>{esc(nb.first_error)}</code>."
                + (" Later cells that use what it should have defined fail too (\"is not "
                   "defined\" below): fix that cell first, then run the whole notebook again."
                   if later else "") + "</p>")
        rows = []
        for exercise in chapter.exercises:
            result = nb.results.get(exercise)
            if exercise in book.hand_graded(student, chapter):
                points, comment = student.hand.get(exercise, (None, ""))
                shown = (f"{fmt_points(points)} / {fmt_points(book.hand_max[exercise])}"
                         if points is not None else "not graded yet")
                # left to the instructor by the grader: the grader's reason, then theirs
                why = result.message if result is not None and result.max_points is not None \
                    else ""
                rows.append((exercise, shown, "graded by hand",
                             "; ".join(filter(None, [why, comment]))))
            elif result is None:
                rows.append((exercise, f"0 / {fmt_points(chapter.max_points[exercise])}",
                             "not graded", ""))
            else:
                message, left_out = student_message(result, show_hidden)
                withheld |= left_out
                hidden |= HIDDEN_LABEL in result.message or bool(
                    result.parts and any(p["hidden"] for p in result.parts))
                rows.append((exercise, f"{fmt_points(result.points or 0)} / "
                                       f"{fmt_points(chapter.max_points[exercise])}",
                             result.status, message))
        body.append("<table><tr><th>Exercise</th><th>Points</th><th>Result</th>"
                    "<th>Message</th></tr>" + "".join(
                        f"<tr><td>{esc(e)}</td><td>{esc(p)}</td><td>{esc(s)}</td>"
                        f"<td>{esc(m)}</td></tr>" for e, p, s, m in rows) + "</table>")
    if withheld:
        body.insert(2, "<p class=\"note\">Some checks have hidden parts: cases your notebook "
                       "does not run, graded with inputs drawn when grading. Their points are "
                       "counted and shown here; their messages are shown after the due "
                       "date.</p>")
    elif show_hidden and hidden:
        body.insert(2, "<p class=\"note\">This page shows the messages of the checks' hidden "
                       "parts too (cases your notebook does not run).</p>")
    return page(f"Feedback: {student.name}", "\n".join(body))
