"""``mha-grade report``: the gradebook, feedback per student and the by-hand exercises' pages.

    mha-grade report SUBMISSIONS [--grades FOLDER] [--out FOLDER] [--roster roster.csv]
                     [--hand-points points.csv] [--hand-max 1] [--hand-max 3.2=2]
                     [--canvas-column 03="Chapter 3 (12345)"] [--blank-missing]
                     [--show-hidden] [--copies latest|best] [--match KEY=LOGIN ...]
                     [--late-penalty none|P%|P%/day] [--due [NN=]TIME] [--handed-in times.csv]
                     [--pdf] [--source NOTEBOOK ...]

Reads ``grades.csv`` and ``grading_log.csv`` (written by ``mha-grade grade`` into SUBMISSIONS,
or ``--grades``) and the submitted notebooks (read as JSON, never run), and writes into ``--out``
(default: ``SUBMISSIONS_report`` beside SUBMISSIONS, so that grading again does not meet it):

- ``gradebook.csv``: one row per student, a column per exercise and per chapter, totals, notes;
- ``canvas_import.csv``: Canvas's gradebook import format, one column per chapter;
- ``feedback/<student>.html``: each student's points and messages (a hidden part's points
  only, unless ``--show-hidden``: its message names the hidden cases);
- ``by_hand/<N.K>.html``: every student's answer to a by-hand exercise (outputs as saved in
  the notebook), ``by_hand/<N.K>-written.html``: the answers in words that an autograded
  exercise asks for (optional to grade: ``N.K written`` in points.csv), and
  ``by_hand/points.csv`` to fill in: every run reads it (``--hand-points`` reads another file
  instead, whose entries then go into it) and keeps what it holds; answers and prompts are
  rendered, maths typeset by the MathJax copied into ``by_hand/mathjax/``, the rubric of
  ``by_hand/rubric.csv`` beside each answer (mha_grade.by_hand, rendering, rubric); points
  read from another folder's points.csv count their rubric items with that folder's rubric.csv,
  copied here when there is none;
- ``by_hand/pdf/<N.K>.pdf`` with ``--pdf``: each page printed by headless chromium, a page per
  student, for Gradescope's manual grading (mha_grade.pdf); without chromium, a note;
- ``summary.txt``: who handed in nothing, who is not on the roster, what is left to grade.

A student's copies of one chapter: by the rule the grading used (copies_rule.json; else the
one handed in last; ``--copies best``: the one with the most points), as mha_grade.copies
says. A submission the roster cannot place without a guess (``gradebook.Ambiguous``: two
folders that differ in case, two submissions matching one student, one matching several) stops
the report before it writes anything, naming each; ``--match KEY=LOGIN`` (or ``KEY=``: nobody
on the roster) settles it.

Late work: the penalty the grading chose (late_rule.json; ``--late-penalty`` to apply another),
on the lateness the LMS gives (Canvas's ``_late`` names; ``--due`` with ``--handed-in``, the
LMS's times), as mha_grade.late says.

Exit status: 0, or 1 when entries of the points file were not taken (each is named) or when
points entered in ``by_hand/points.csv`` are missing from the ``--hand-points`` file read instead:
then gradebook.csv, canvas_import.csv and the feedback pages are not written (the by-hand pages,
points.csv and summary.txt are); 2 for wrong arguments or input, or submissions to resolve.
"""

from __future__ import annotations

import argparse
import csv
import os
import sys
from pathlib import Path

from mha_grade import by_hand, copies, feedback, gradebook, late, pdf
from mha_grade._shared import ROOT, chapter_notebooks, create, terminal, uncell


def parse_hand_max(values: list[str]) -> tuple[float, dict[str, float]]:
    default, per = 1.0, {}
    for value in values:
        name, _, points = value.rpartition("=")
        try:
            number = float(points)
        except ValueError:
            raise ValueError(f"--hand-max {value!r}: not a number of points") from None
        if not number > 0:
            raise ValueError(f"--hand-max {value!r}: points must be positive")
        if name:
            per[name] = number
        else:
            default = number
    return default, per


def write_csv(path: Path, rows: list[list[object]]) -> None:
    with create(path) as handle:
        csv.writer(handle, lineterminator="\n").writerows(rows)


def folder(path: Path) -> Path:
    """``path`` as a folder of ours: made if missing, refused if it is a symbolic link."""
    if path.is_symlink():
        raise ValueError(f"{path} is a symbolic link: not written through")
    path.mkdir(parents=True, exist_ok=True)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="mha-grade report",
        description="Gradebook, Canvas import, feedback per student and by-hand pages from "
                    "grades.csv and grading_log.csv.")
    parser.add_argument("submissions", type=Path, help="the folder that was graded")
    parser.add_argument("--grades", type=Path, default=None,
                        help="folder holding grades.csv and grading_log.csv (default: "
                             "SUBMISSIONS, or the --out given to the grader)")
    parser.add_argument("--out", type=Path, default=None,
                        help="output folder (default: SUBMISSIONS_report beside SUBMISSIONS)")
    parser.add_argument("--roster", type=Path, default=None,
                        help="CSV of the class: Canvas's gradebook export, or columns name, "
                             "id, login, section")
    parser.add_argument("--hand-points", type=Path, default=None,
                        help="read the by-hand points from this file instead of the "
                             "report's own by_hand/points.csv (read by default)")
    parser.add_argument("--hand-max", action="append", default=[], metavar="[N.K=]POINTS",
                        help="points of a by-hand exercise (default 1; points.csv's "
                             "max_points column wins)")
    parser.add_argument("--canvas-column", action="append", default=[], metavar="NN=HEADER",
                        help="the Canvas column of chapter NN, e.g. '03=Chapter 3 (12345)' "
                             "(default: the roster's column named after the chapter, else a "
                             "new assignment named after it)")
    parser.add_argument("--blank-missing", action="store_true",
                        help="leave a chapter a student handed in nothing for blank in "
                             "canvas_import.csv (default 0, which replaces Canvas's "
                             "'missing')")
    parser.add_argument("--show-hidden", action="store_true",
                        help="show the messages of the checks' hidden parts on the feedback "
                             "pages (they name the hidden cases: after the due date); by "
                             "default a page shows a hidden part's points only")
    parser.add_argument("--copies", choices=copies.RULES, default=None,
                        help="a student's copies of one chapter: the one handed in last counts "
                             "(latest), or the one with the most points (best: only among the "
                             "copies graded, so grade with --copies best too). Default: the "
                             "rule the grading used, else latest")
    parser.add_argument("--late-penalty", default=None, metavar="RULE",
                        help=late.HELP + ". Default: the rule the grading wrote down, else none")
    parser.add_argument("--due", action="append", default=[], metavar="[NN=]TIME",
                        help="the due date (ISO 8601 with its time zone, 2026-03-01T23:59+01:00)"
                             " of every chapter, or NN=TIME of chapter NN: with --handed-in")
    parser.add_argument("--handed-in", type=Path, default=None, metavar="CSV",
                        help="the LMS's times of the notebooks (columns notebook, as the "
                             "grader names it, and handed_in, ISO 8601 with its time zone): "
                             "with --due, how late each was")
    parser.add_argument("--match", action="append", default=[], metavar="KEY=LOGIN",
                        help="the roster's student a submission is (KEY as the report names "
                             "it; LOGIN a roster login, id or SIS id), or KEY= for nobody on "
                             "the roster: settles what the report stops on as ambiguous")
    parser.add_argument("--pdf", action="store_true",
                        help="also print each by-hand page to by_hand/pdf/<N.K>.pdf (a page "
                             "per student, for Gradescope's manual grading) with headless "
                             "chromium; without chromium the report says so and goes on")
    parser.add_argument("--source", type=Path, action="append", default=None,
                        help="instructor notebook(s) (default: every chapter in notebooks/)")
    args = parser.parse_args(argv)
    try:
        return run(args)
    except ValueError as error:
        # an Ambiguous message's names were escaped already: its line breaks are its own
        lines = str(error).split("\n") if isinstance(error, gradebook.Ambiguous) else [str(error)]
        print("mha-grade report: " + "\n".join(map(terminal, lines)), file=sys.stderr)
        return 2


def listed(title: str, items: list[str]) -> list[str]:
    """A summary's list: its title and count, then an item a line."""
    return [f"{title} ({len(items)}):"] + [f"  {terminal(item)}" for item in items]


def who(student: gradebook.Student) -> str:
    """A student as the summary names them: the name, and the login (or key) to find them."""
    login = student.login or student.key
    return f"{student.name} ({login})" if student.name and login != student.name else \
        student.name or login


def print_pdfs(hand: Path, answers: dict) -> list[str]:
    """Each by-hand page as by_hand/pdf/<page>.pdf; notes saying what was not printed."""
    browser = pdf.chromium()
    if browser is None:
        return ["--pdf: chromium not found (Debian: apt-get install chromium): no PDF written; "
                "the HTML pages are"]
    target = folder(hand / "pdf")
    notes = []
    for exercise in answers:
        name = by_hand.page_file(exercise)
        # a class's page: seconds per answer on a loaded machine (60 answers: 15 s here)
        problem = pdf.print_pdf(hand / name, target / name.replace(".html", ".pdf"), browser,
                                pdf.SECONDS + 2 * len(answers[exercise][1]))
        if problem:
            notes.append(f"--pdf: {name}: {problem}: no PDF of it")
    return notes


def late_work(args: argparse.Namespace, grades: Path, notebooks: list[gradebook.Notebook]
              ) -> tuple[late.Penalty, dict[str, late.Lateness], list[str]]:
    """The class's late penalty, how late each notebook was (mha_grade.late), and notes."""
    penalty, kept = late.chosen_rule(args.late_penalty, grades)
    notes = [f"--late-penalty {penalty} applied, though the grading chose {kept} "
             f"({late.RULE_FILE})"] if kept is not None and penalty != kept else []
    if bool(args.due) != bool(args.handed_in):
        raise ValueError("--due and --handed-in go together: the due date, and the LMS's "
                         "times to compare with it")
    times = late.read_handed_in(gradebook.read_csv(args.handed_in)) if args.handed_in else {}
    found, unknown = late.lateness_of(notebooks, penalty, late.parse_dues(args.due), times)
    return penalty, found, notes + unknown


def places(args: argparse.Namespace) -> tuple[Path, Path, Path]:
    """(the grades' folder, the output folder, the default output folder), with a warning when
    the output is inside SUBMISSIONS."""
    submissions = args.submissions
    if not submissions.is_dir():
        raise ValueError(f"{submissions} is not a folder")
    grades = args.grades or submissions
    default_out = submissions.resolve().parent / f"{submissions.resolve().name}_report"
    out = args.out or default_out
    if out.resolve().is_relative_to(submissions.resolve()):
        print(f"warning: {out} is inside SUBMISSIONS: grading that folder again lists "
              "these files as not notebooks", file=sys.stderr)
    return grades, out, default_out


def copies_rule(args: argparse.Namespace, grades: Path) -> str:
    """The copies rule: --copies, else the grading's, else latest (with a warning when best
    is asked of a grading that kept the latest copies only)."""
    graded_by = copies.graded_rule(grades)
    rule = args.copies or graded_by or copies.DEFAULT_RULE
    if rule == "best" and graded_by == "latest":
        print("warning: --copies best, but the grading kept only each student's latest copy "
              "(--copies latest): grade with --copies best to compare copies", file=sys.stderr)
    return rule


def roster_and_columns(args: argparse.Namespace
                       ) -> tuple[list | None, list[str], dict[str, str]]:
    """(the roster or None, its notes, each chapter's Canvas column: the roster's, then
    --canvas-column)."""
    roster, notes, canvas_columns = None, [], {}
    if args.roster is not None:
        roster, notes, found = gradebook.read_roster(args.roster)
        canvas_columns = {k: v for k, v in found.items()}
    for value in args.canvas_column:
        chapter, sep, header = value.partition("=")
        if not sep or not header:
            raise ValueError(f"--canvas-column {value!r}: write NN=HEADER")
        canvas_columns[chapter] = header
    return roster, notes, canvas_columns


def matches(args: argparse.Namespace) -> dict[str, str]:
    """--match KEY=LOGIN: submission key -> roster login ("" for nobody on the roster)."""
    chosen = {}
    for value in args.match:
        key, sep, token = value.rpartition("=")
        if not sep or not key:
            raise ValueError(f"--match {value!r}: write KEY=LOGIN, or KEY= for nobody")
        chosen[key] = token
    return chosen


def run(args: argparse.Namespace) -> int:
    """The report: read the grades and the notebooks, build the gradebook, take the by-hand
    points, write the outputs and the summary; the exit status."""
    submissions = args.submissions
    grades, out, default_out = places(args)
    default_max, hand_max = parse_hand_max(args.hand_max)
    sources = {}
    for path in args.source or chapter_notebooks(ROOT):
        source = by_hand.read_source(path)
        sources[path.stem[:2]] = source
    names = {number: source.name for number, source in sources.items()}
    notebooks = gradebook.load_results(grades)
    rule = copies_rule(args, grades)
    roster, notes, canvas_columns = roster_and_columns(args)
    chosen = matches(args)
    gradescope, metadata_notes = gradebook.gradescope_names(submissions)
    files = by_hand.submission_files(submissions)
    penalty, lateness, late_notes = late_work(args, grades, notebooks)
    book = gradebook.build(notebooks, names, roster=roster, gradescope=gradescope,
                           hand_max=hand_max, default_hand_max=default_max, rule=rule,
                           handed_in={name: copies.handed_in(name, path)
                                      for name, path in files.items()},
                           chosen=chosen,
                           exports=gradebook.gradescope_exports(submissions)[0],
                           penalty=penalty, lateness=lateness)
    book.notes[:0] = notes + metadata_notes + late_notes
    for chapter in book.chapters:  # the answers in words that autograded exercises ask for
        source = sources.get(chapter.number)
        for exercise in chapter.exercises:
            if source and exercise in source.written and chapter.max_points[exercise] is not None:
                name = by_hand.written_name(exercise)
                book.add_written(name, chapter.number, hand_max.get(name, default_max))
    points = out / "by_hand" / "points.csv"
    # the report's own points.csv is the instructor's: read by default, so that running the
    # report again (after a regrade) never drops the points entered there
    own = os.path.lexists(points)
    entered_before = default_out / "by_hand" / "points.csv"
    if not own and args.hand_points is None and out.resolve() != default_out \
            and entered_before.is_file():
        # a report into another folder (--show-hidden for after the due date, say) starts from
        # the points entered in the default one, not from nothing
        args.hand_points = entered_before
    read_from = args.hand_points or (points if own else None)
    # the items an entry names ("R1 R3") are those of the rubric it was entered against: the
    # one beside the points file read (a new --out folder has no rubric.csv yet)
    rubric_from = rubric_folder(read_from, out / "by_hand")
    errors = by_hand.read_points(read_from, book, by_hand.read_rubric(rubric_from)) \
        if read_from else []
    book.count_written()
    entered = sum(1 for s in book.students for p, _ in s.hand.values() if p is not None)
    existing = gradebook.read_csv(points) if own else []
    unused = []
    if args.hand_points and own and args.hand_points.resolve() != points.resolve():
        # another file read: the points entered in ours that it has not are named, and kept
        taken = {(s.key, e) for s in book.students for e, (p, _) in s.hand.items()
                 if p is not None}
        unused = [r for r in existing if uncell(r.get("points") or "").strip()
                  and (uncell(r.get("student") or ""),
                       (r.get("exercise") or "").strip()) not in taken]
    if args.hand_points:  # its rows win over ours (points_rows keeps the last of a key)
        existing = existing + gradebook.read_csv(args.hand_points)

    folder(out)
    # points not taken would make totals that look right and are not: no gradebook then
    complete = not (errors or unused)
    canvas, canvas_notes = gradebook.canvas_rows(book, canvas_columns, args.blank_missing)
    if complete:
        write_gradebook(out, book, canvas, args.show_hidden)
    hand = folder(out / "by_hand")
    rubric_notes = carry_rubric(rubric_from, hand)
    answers = by_hand.collect(book, files, sources)
    hand_notes = by_hand.write_pages(hand, answers, sources, dict(book.hand_max))
    if args.pdf:
        hand_notes += print_pdfs(hand, answers)
    # a row with more fields than the header (an unquoted 1,5) cannot be rewritten as typed
    shifted = any(row.get(None) for row in existing)
    if not shifted:
        by_hand.write_points(points, by_hand.points_rows(book, existing))

    lines = summary(book, out, complete, len(answers), points, read_from, entered, errors,
                    shifted, unused, canvas_notes + rubric_notes + hand_notes)
    with create(out / "summary.txt") as handle:  # what this prints, kept with the outputs
        handle.write("\n".join(lines) + "\n")
    tell(lines, errors, read_from)
    return 1 if errors or unused else 0


def rubric_folder(read_from: Path | None, hand: Path) -> Path:
    """The folder whose rubric.csv the entries of ``read_from`` are counted with: the points
    file's own folder when it holds a rubric.csv (another report's by_hand/), else ``hand``."""
    if read_from is not None and (read_from.parent / "rubric.csv").is_file():
        return read_from.parent
    return hand


def carry_rubric(rubric_from: Path, hand: Path) -> list[str]:
    """The rubric the points were read with, copied into ``hand`` when it has none (as the
    points are into its points.csv: its next run counts their items with the same rubric);
    a note when ``hand`` holds another one."""
    source, ours = rubric_from / "rubric.csv", hand / "rubric.csv"
    if rubric_from.resolve() == hand.resolve():
        return []
    text = source.read_text(encoding="utf-8", errors="replace")
    if not os.path.lexists(ours):
        with create(ours) as handle:
            handle.write(text)
        return [f"rubric.csv copied from {source}, with the points read beside it"]
    if ours.read_text(encoding="utf-8", errors="replace") != text:
        return [f"the rubric items in the points were counted with {source}; {ours} differs, "
                f"and a run that reads {hand / 'points.csv'} counts them with it"]
    return []


def write_gradebook(out: Path, book: gradebook.Gradebook, canvas: list, show_hidden: bool
                    ) -> None:
    """gradebook.csv, canvas_import.csv and a feedback page per student."""
    header, rows = gradebook.gradebook_rows(book)
    write_csv(out / "gradebook.csv", [[gradebook.cell(v) for v in row]
                                      for row in [header, *rows]])
    write_csv(out / "canvas_import.csv", canvas)
    pages = folder(out / "feedback")
    for student in book.students:
        with create(pages / feedback.file_name(student.key)) as handle:
            handle.write(feedback.feedback_page(book, student, show_hidden))


def summary(book: gradebook.Gradebook, out: Path, complete: bool, pages: int, points: Path,
            read_from: Path | None, entered: int, errors: list[str], shifted: bool,
            unused: list[dict], more_notes: list[str]) -> list[str]:
    """The summary's lines: what was written, who handed in nothing or is not on the roster,
    what is left to grade, notes, the points not taken (summary.txt keeps them)."""
    nothing = book.handed_in_nothing()
    unknown = book.not_on_roster()
    ungraded_hand = sum(1 for s in book.students for c in book.chapters
                        for e in book.hand_graded(s, c) if book.points(s, c, e) is None)
    lines = [f"{len(book.students)} student(s), {len(book.chapters)} chapter(s): wrote "
             f"gradebook.csv, canvas_import.csv, {len(book.students)} feedback page(s) and "
             f"{pages} by-hand page(s) in {out}" if complete else
             f"WARNING: {len(book.students)} student(s), {len(book.chapters)} chapter(s): "
             f"gradebook.csv, canvas_import.csv and the feedback pages NOT written (points "
             f"not taken, below; an older copy of each in {out} is not this run's); wrote "
             f"{pages} by-hand page(s)"]
    # one a line: a roster's names hold commas ("Reyes, Hana"), and a list is read and counted
    if nothing:
        lines += listed("handed in nothing", [who(s) for s in nothing])
    if unknown:
        lines += listed("not on the roster", [s.key for s in unknown])
    for nb in book.ungraded:
        lines.append(f"not graded as any chapter: {terminal(nb.name)}: {terminal(nb.problem)}")
    if book.ignored:  # why is in grading_log.csv, and the gradebook's notes
        for why in sorted({gradebook.left_out_because(nb) for nb in book.ignored}):
            lines += listed(why.replace("a copy", "copies").replace("the graded one",
                                                                    "a graded one"),
                            [nb.name for nb in book.ignored
                             if gradebook.left_out_because(nb) == why])
    if read_from:
        lines.append(f"by-hand points: {entered} entered, read from {terminal(str(read_from))}")
    if ungraded_hand:
        lines.append(f"{ungraded_hand} by-hand answer(s) not graded yet: fill in {points} and "
                     "run the report again")
    lines += [f"WARNING: {line}" for line in written_partly_graded(book)]
    lines += [f"note: {terminal(note)}" for note in book.notes + more_notes]
    lines += [f"not taken: {error}" for error in errors]
    if shifted:
        lines.append(f"WARNING: {points} left as it is (no new rows): correct the rows with "
                     "more fields than the header, then run again")
    lines += [f"WARNING: {points} holds points for {terminal(uncell(r.get('student') or ''))}, "
              f"exercise {terminal(r.get('exercise') or '')} that {terminal(str(read_from))} "
              "has not: not in the gradebook" for r in unused]
    return lines


def written_partly_graded(book: gradebook.Gradebook) -> list[str]:
    """A line for each written answer graded for some students and not others: once one has
    points it counts for the whole class (the chapter's maximum rises for every student), which
    an instructor rewarding one good answer does not expect."""
    lines = []
    for exercise, number_ in book.written.items():
        chapter = next(c for c in book.chapters if c.number == number_)
        if exercise not in chapter.exercises:
            continue  # no points entered: it counts for nobody
        handed_in = [s for s in book.students if number_ in s.notebooks]
        missing = [s for s in handed_in if book.points(s, chapter, exercise) is None]
        if missing:
            lines.append(
                f"{exercise}: points entered for {len(handed_in) - len(missing)} of "
                f"{len(handed_in)} notebook(s), so it now counts "
                f"{gradebook.fmt_points(book.hand_max[exercise])} point(s) in chapter "
                f"{number_}'s maximum for every student; enter points (0 for none) for the "
                f"other {len(missing)}, or clear its points to leave it uncounted")
    return lines


def tell(lines: list[str], errors: list[str], read_from: Path | None) -> None:
    """Print the summary: warnings and the points not taken on stderr, the rest on stdout."""
    print("\n".join(line for line in lines
                    if not line.startswith(("not taken: ", "WARNING: "))))
    for line in lines:
        if line.startswith("WARNING: "):
            print(line, file=sys.stderr)
    for error in errors:
        print(f"not taken: {error}", file=sys.stderr)
    if errors:
        print(f"{len(errors)} entr{'y' if len(errors) == 1 else 'ies'} of "
              f"{read_from} not taken (above); the others are in the outputs",
              file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
