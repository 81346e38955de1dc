"""Feedback for each student: one HTML page with every chapter's points and the checks' words.

Per chapter: the notebook counted, what went wrong with it as a whole (a time limit, a
duplicate), the first cell that raised (the grader's ``first_error``: when a setup cell fails,
every later check says "name 'mha' is not defined", and this says why), then each exercise's
points and message; by-hand exercises say "graded by hand" with the instructor's points and
comment once entered. Names and messages come from submissions and are escaped; a page's file
name is made from the student's key (letters, digits and dashes, plus a hash: safe and unique).
The grader's flags are for the instructor and are not shown.
"""

from __future__ import annotations

import re

from mha_grade.by_hand import esc, page
from mha_grade.gradebook import Gradebook, Student, feedback_file, fmt_points

DEFINED = re.compile(r"is not defined|has no attribute|cannot import|No module named")


file_name = feedback_file  # the name of a student's page in feedback/


def feedback_page(book: Gradebook, student: Student) -> str:
    total = sum(book.chapter_points(student, c) for c in book.chapters)
    most = sum(book.chapter_max(c) for c in book.chapters)
    body = [f"<h1>Feedback for {esc(student.name)}</h1>",
            f"<p><strong>Total: {fmt_points(total)} / {fmt_points(most)} points</strong>"
            " (by-hand exercises count once graded).</p>"]
    if not student.notebooks:
        body.append("<p>No notebook was handed in.</p>")
    for chapter in book.chapters:
        nb = student.notebooks.get(chapter.number)
        body.append(f"<h2>Chapter {esc(chapter.name)}: "
                    f"{fmt_points(book.chapter_points(student, chapter))} / "
                    f"{fmt_points(book.chapter_max(chapter))}</h2>")
        if nb is None:
            body.append("<p>Nothing handed in for this chapter.</p>")
            continue
        body.append(f"<p>Notebook graded: <code>{esc(nb.name)}</code></p>")
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
            if chapter.max_points[exercise] is None:
                points, comment = student.hand.get(exercise, (None, ""))
                shown = (f"{fmt_points(points)} / {fmt_points(book.hand_max[exercise])}"
                         if points is not None else "not graded yet")
                rows.append((exercise, shown, "graded by hand", comment))
            elif result is None:
                rows.append((exercise, f"0 / {fmt_points(chapter.max_points[exercise])}",
                             "not graded", ""))
            else:
                rows.append((exercise, f"{fmt_points(result.points or 0)} / "
                                       f"{fmt_points(chapter.max_points[exercise])}",
                             result.status, result.message))
        body.append("<table><tr><th>Exercise</th><th>Points</th><th>Result</th>"
                    "<th>Message</th></tr>" + "".join(
                        f"<tr><td>{esc(e)}</td><td>{esc(p)}</td><td>{esc(s)}</td>"
                        f"<td>{esc(m)}</td></tr>" for e, p, s, m in rows) + "</table>")
    return page(f"Feedback: {student.name}", "\n".join(body))
