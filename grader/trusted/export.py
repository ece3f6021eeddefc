"""Grades back to the LMS: the file each LMS imports into its gradebook, one column per chapter,
from a grading run's OUT (``python -m grader export --lms canvas|moodle|blackboard OUT``).

Students are matched by what the LMS knows of them, as intake kept it (``results.json``'s
``students``: from the download's file names and the roster's rows, ``--roster`` when grading):

- **Canvas** (Grades > Import): ``Student, ID, SIS User ID, SIS Login ID, Section``, then a
  column per assignment, and a ``Points Possible`` row, the columns of Canvas's own gradebook
  export. Canvas matches a row by its ``ID`` (the user id in a Canvas download's file names)
  or its SIS ids; a column whose name is no assignment becomes a new one.
- **Moodle** (Gradebook setup > Import > CSV file): a header row and a column per grade item;
  at import, "Map from" one identifying column to the user field it holds: ``Email address``,
  ``ID number`` or ``Username``. A download's folders give the participant number and the full
  name only, which Moodle's gradebook import cannot match: grade with ``--roster`` set to the
  assignment's grading worksheet or the course's participants export, which hold the email.
- **Blackboard** (Grade Center > Work Offline > Upload): every field in quotes, the students
  identified by ``Username``; a column without a Column ID (``|1234``) becomes a new column.

A student of the roster who handed nothing in gets an empty cell (the LMS leaves the grade
as it is) or, with ``--missing zero``, a 0.

Late submissions (handed in through nbgrader's exchange after the due date, ``grades.csv``'s
``late``): the scores are the grader's, with no penalty. What each file can carry of it:

- **Moodle**'s CSV import takes a grade item's feedback from a column: a chapter with a late
  submission gets a column ``<chapter> (feedback)``, to map to "Feedback for <chapter>" at
  import, saying when it was handed in; apply the penalty in Moodle.
- **Canvas**'s gradebook import reads scores only (Canvas tells late from its own submissions),
  and **Blackboard**'s Work Offline upload reads grades and text columns, none of them tied to a
  grade: ``export`` names every late row on stderr, to mark or penalize in the LMS by hand.

Names are the students' own on most LMSs, and instructors open these files in a spreadsheet
before the upload. So every name (and section) is written as :func:`grader.intake.names.display`
makes it: one line, with a ``'`` before it where a spreadsheet would read it as a formula. The
columns the LMS matches students by (Canvas's ``ID``, ``SIS User ID``, ``SIS Login ID``; Moodle's
``Email address``, ``ID number``, ``Username``; Blackboard's ``Username``) are written exactly as
the LMS gave them, since a changed one matches no one: one that a spreadsheet would evaluate, or
that holds a line break, is named on stderr instead. Scores are numbers, never negative.
Each LMS's own reader, besides:

- Canvas (``GradebookImporter``) takes a row whose first cell holds ``Points Possible`` for the
  points row: a student's name that holds it is written ``Points-Possible``.
- Moodle reads with PHP's ``fgetcsv``, for which a backslash before a quote escapes it: a
  name's backslash before a quote, or at its end, is followed by a space, or the row would run
  into the next.
- Blackboard reads one record a line, every field in quotes.
"""

from __future__ import annotations

import csv
import re
from pathlib import Path

from ..intake.names import display, evaluated, one_line
from .gradebook import read_results
from .verdict import Status

LMSS = ("canvas", "moodle", "blackboard")


def _split_name(full: str) -> tuple[str, str]:
    """(last, first) of "Smith, Jane" or "Jane Smith"."""
    if "," in full:
        last, first = (part.strip() for part in full.split(",", 1))
        return last, first
    words = full.split()
    return (words[-1], " ".join(words[:-1])) if len(words) > 1 else (full, "")


def _canvas(student: str, who: dict[str, str]) -> tuple[list[str], str | None]:
    canvas_id = who.get("id") or (student.rsplit("_", 1)[-1] if re.search(r"_\d+$", student)
                                  else "")
    name = who.get("student", student).replace("Points Possible", "Points-Possible")
    cells = [name, canvas_id, who.get("sis user id", ""), who.get("sis login id", ""),
             who.get("section", "")]
    missing = None if any(cells[1:4]) else (
        f"{student}: no Canvas ID or SIS id (not graded from a Canvas download or roster): "
        "Canvas will not match this row")
    return cells, missing


def _moodle(student: str, who: dict[str, str]) -> tuple[list[str], str | None]:
    full = who.get("full name") or " ".join(
        filter(None, (who.get("first name"), who.get("last name")))) or student
    cells = [_unescaped(full), who.get("email address", who.get("email", "")),
             who.get("id number", ""), who.get("username", ""),
             _unescaped(who.get("identifier", ""))]
    missing = None if any(cells[1:4]) else (
        f"{student}: no email address, ID number or username: grade with --roster set to the "
        "assignment's grading worksheet or the participants export, or Moodle cannot match "
        "this row")
    return cells, missing


def _unescaped(text: str) -> str:
    """``text`` for PHP's fgetcsv, which reads a backslash before a quote (the field's closing
    one included) as an escape: such a backslash gets a space after it."""
    return re.sub(r'\\(?="|$)', r"\\ ", text)


def _blackboard(student: str, who: dict[str, str]) -> tuple[list[str], str | None]:
    last, first = who.get("last name", ""), who.get("first name", "")
    if not (last or first) and who.get("full name"):
        last, first = _split_name(who["full name"])
    username = who.get("username") or who.get("sis login id") or student
    return [last, first, username], None


# lms -> (the columns that say who a row is, those of them the LMS matches students by, the
# cells of a student's row)
_FORMATS = {
    "canvas": (["Student", "ID", "SIS User ID", "SIS Login ID", "Section"],
               {"ID", "SIS User ID", "SIS Login ID"}, _canvas),
    "moodle": (["Full name", "Email address", "ID number", "Username", "Identifier"],
               {"Email address", "ID number", "Username"}, _moodle),
    "blackboard": (["Last Name", "First Name", "Username"], {"Username"}, _blackboard),
}


def _written(student: str, lms: str, columns: list[str], keys: set[str],
             cells: list[str]) -> tuple[list[str], list[str]]:
    """The cells as written (names for a person to read, ids as the LMS wrote them), and what
    the instructor must know of the ids."""
    written, problems = [], []
    for column, cell in zip(columns, cells):
        if column not in keys:
            written.append(display(cell))
            continue
        written.append(cell)
        if evaluated(cell) or one_line(cell) != cell:
            problems.append(
                f"{student}: {column} {cell!r} would be read as a formula, or as two rows, by a "
                f"spreadsheet; it is kept as the LMS wrote it, since {lms.title()} matches "
                "students by it: upload the file without opening it in a spreadsheet (or open "
                "it there with every column as text, and do not save it)")
    return written, problems


def export(out: Path, lms: str, missing: str = "empty",
           to: Path | None = None) -> tuple[Path, list[str]]:
    """Write the import file for ``lms`` from ``out``'s results; return its path and what the
    instructor must know (one line each): the rows the LMS may not match, and the ids kept as
    the LMS wrote them that a spreadsheet would read as formulas."""
    if lms not in _FORMATS:
        raise ValueError(f"unknown LMS {lms!r}: use one of {', '.join(LMSS)}")
    results = read_results(out)
    chapters = sorted({o.chapter for o in results.outcomes})
    points = {o.chapter: o.max_score for o in results.outcomes}
    scores: dict[str, dict[str, str]] = {}
    late: dict[str, dict[str, str]] = {}
    for outcome in results.outcomes:
        handed_in = outcome.status != Status.MISSING
        score = f"{outcome.score:g}" if handed_in else ("0" if missing == "zero" else "")
        scores.setdefault(outcome.student, {})[outcome.chapter] = score
        if outcome.late:
            said = next((n for n in outcome.intake if n.startswith("late")), "late")
            late.setdefault(outcome.student, {})[outcome.chapter] = said
    columns, keys, identify = _FORMATS[lms]
    to = to or out / f"{lms}-grades.csv"
    unmatched = []
    # Moodle: a feedback column for each chapter with a late submission (see above)
    remarks = sorted({c for row in late.values() for c in row}) if lms == "moodle" else []
    if lms != "moodle":
        unmatched += [f"{student}: {chapter} was {said}; the {lms.title()} file carries the "
                      "score only: mark it late (or apply your penalty) in the LMS"
                      for student, row in sorted(late.items())
                      for chapter, said in sorted(row.items())]
    with open(to, "w", newline="", encoding="utf-8") as sheet:
        writer = csv.writer(sheet, quoting=csv.QUOTE_ALL if lms == "blackboard"
                            else csv.QUOTE_MINIMAL)
        writer.writerow(columns + chapters + [f"{c} (feedback)" for c in remarks])
        if lms == "canvas":
            writer.writerow(["Points Possible"] + [""] * (len(columns) - 1)
                            + [f"{points[c]:g}" for c in chapters])
        for student in sorted(scores):
            cells, problem = identify(student, results.students.get(student, {}))
            cells, problems = _written(student, lms, columns, keys, cells)
            unmatched += [problem] if problem else []
            unmatched += problems
            writer.writerow(cells + [scores[student].get(c, "") for c in chapters]
                            + [display(late.get(student, {}).get(c, "")) for c in remarks])
    return to, unmatched
