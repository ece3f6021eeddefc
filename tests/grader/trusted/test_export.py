"""Grades back to the LMS: `python -m grader export` writes each LMS's own import format, with
the students matched by what the download and the roster said of them.

The formats, as each LMS documents its gradebook import:
- Canvas: "Student, ID, SIS User ID, SIS Login ID, Section" then one column per assignment, as
  in its gradebook export, with a "Points Possible" row; rows matched by the Canvas ID.
- Moodle: a header row and one column per grade item; users matched by a column mapped to
  their email address, ID number or username.
- Blackboard: comma-separated with every field in quotes, users matched by "Username".
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pytest

from grader import cli, intake
from grader.trusted import gradebook
from grader.trusted.verdict import Outcome, Status
from support.class_factory import correct, release

CHAPTER = "01_broadcast"
CHAPTERS = [CHAPTER, "02_scatter"]


def _rows(path: Path) -> list[list[str]]:
    return list(csv.reader(io.StringIO(path.read_text(encoding="utf-8"))))


@pytest.fixture(scope="module")
def canvas_class(tmp_path_factory):
    """A Canvas download of chapter 01 (one correct, one unanswered) read with Canvas's gradebook
    export as the roster (a third student handed nothing in), and an OUT as grading writes it
    for them. The export reads OUT alone; a Canvas download graded for real and its export read
    back by Canvas's importer's rules: tests/grader/intake/test_lms_names.py."""
    import nbformat

    folder = tmp_path_factory.mktemp("canvas")
    (folder / "download").mkdir()
    nbformat.write(correct(CHAPTER), folder / "download" / f"smithjane_1234_9001_{CHAPTER}.ipynb")
    nbformat.write(release(CHAPTER), folder / "download" / f"leebo_LATE_2001_9002_{CHAPTER}.ipynb")
    (folder / "roster.csv").write_text(
        "Student,ID,SIS User ID,SIS Login ID,Section\n"
        "    Points Possible,,,,\n"
        '"Smith, Jane",1234,S-1,jsmith,Section A\n'
        '"Lee, Bo",2001,S-2,blee,Section A\n'
        '"Wong, Amy",3001,S-3,awong,Section B\n')
    found = intake.collect(folder / "download", folder / "scratch", CHAPTERS,
                           roster=folder / "roster.csv")
    # the scores grading gives the correct notebook and the unanswered one
    return _graded(folder, found, {"smithjane_1234": {CHAPTER: 4.0},
                                   "leebo_2001": {CHAPTER: 0.0}}, chapters=[CHAPTER])


def test_canvas_import_file_from_a_graded_canvas_download(canvas_class, capsys):
    assert cli.main(["export", "--lms", "canvas", str(canvas_class)]) == 0
    rows = _rows(canvas_class / "canvas-grades.csv")
    assert rows[0] == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", CHAPTER]
    assert rows[1] == ["Points Possible", "", "", "", "", "4"]
    assert sorted(rows[2:]) == [["Lee, Bo", "2001", "S-2", "blee", "Section A", "0"],
                                ["Smith, Jane", "1234", "S-1", "jsmith", "Section A", "4"],
                                ["Wong, Amy", "3001", "S-3", "awong", "Section B", ""]]
    assert "warning" not in capsys.readouterr().err


def test_a_student_who_handed_nothing_in_can_get_a_zero(canvas_class, tmp_path):
    assert cli.main(["export", "--lms", "canvas", str(canvas_class), "--missing", "zero",
                     "--to", str(tmp_path / "zeros.csv")]) == 0
    amy = next(r for r in _rows(tmp_path / "zeros.csv") if r[1] == "3001")
    assert amy[-1] == "0"


def _graded(tmp_path: Path, found: intake.Intake, scores: dict[str, dict[str, float]],
            chapters: list[str] = CHAPTERS) -> Path:
    """An OUT as grading writes it, for ``found``'s students with these scores (and a missing
    submission of each of ``chapters`` for the others on the roster)."""
    outcomes = [Outcome(student, chapter, score, 4.0, Status.GRADED)
                for student, per_chapter in scores.items()
                for chapter, score in per_chapter.items()]
    outcomes += [Outcome(student, chapter, 0.0, 4.0, Status.MISSING)
                 for student in found.roster or [] if student not in scores
                 for chapter in chapters]
    gradebook.write_sheets(tmp_path / "out", outcomes, [], students=found.identities)
    return tmp_path / "out"


def test_moodle_import_file_matches_users_by_email_from_the_grading_worksheet(tmp_path):
    download = tmp_path / "moodle"
    for name in ("Jane Doe_4242", "Bo Lee_4243"):
        folder = download / f"{name}_assignsubmission_file_"
        folder.mkdir(parents=True)
        (folder / f"{CHAPTER}.ipynb").write_text("{}")
    (tmp_path / "worksheet.csv").write_text(
        "Identifier,Full name,Email address,Status,Grade,Maximum grade\n"
        "Participant 4242,Jane Doe,jane@example.edu,Submitted,,4\n"
        "Participant 4243,Bo Lee,bo@example.edu,Submitted,,4\n"
        "Participant 4244,Amy Wong,amy@example.edu,No submission,,4\n")
    found = intake.collect(download, tmp_path / "scratch", CHAPTERS,
                           roster=tmp_path / "worksheet.csv")
    out = _graded(tmp_path, found, {"Jane_Doe_4242": {CHAPTER: 4.0, "02_scatter": 2.0},
                                    "Bo_Lee_4243": {CHAPTER: 0.0}})
    assert cli.main(["export", "--lms", "moodle", str(out)]) == 0
    rows = _rows(out / "moodle-grades.csv")
    assert rows[0] == ["Full name", "Email address", "ID number", "Username", "Identifier",
                       CHAPTER, "02_scatter"]
    assert sorted(rows[1:]) == [
        ["Amy Wong", "amy@example.edu", "", "", "Participant 4244", "", ""],
        ["Bo Lee", "bo@example.edu", "", "", "Participant 4243", "0", ""],
        ["Jane Doe", "jane@example.edu", "", "", "Participant 4242", "4", "2"]]


def test_moodle_rows_moodle_cannot_match_are_named(tmp_path, capsys):
    folder = tmp_path / "moodle" / "Jane Doe_4242_assignsubmission_file_"
    folder.mkdir(parents=True)
    (folder / f"{CHAPTER}.ipynb").write_text("{}")
    found = intake.collect(tmp_path / "moodle", tmp_path / "scratch", CHAPTERS)
    out = _graded(tmp_path, found, {"Jane_Doe_4242": {CHAPTER: 4.0}})
    assert cli.main(["export", "--lms", "moodle", str(out)]) == 0
    assert "Jane_Doe_4242: no email address, ID number or username" in capsys.readouterr().err


def test_blackboard_upload_file_quotes_every_field_and_matches_by_username(tmp_path):
    download = tmp_path / "blackboard"
    download.mkdir()
    attempt = f"{CHAPTER}_jdoe2_attempt_2026-10-01-09-00-00"
    (download / f"{attempt}_{CHAPTER}.ipynb").write_text("{}")
    (download / f"{attempt}.txt").write_text("Name: Jane Doe (jdoe2)\nAssignment: 01\n")
    (tmp_path / "gradecenter.csv").write_text(
        '"Last Name","First Name","Username","Student ID","Last Access","Availability"\n'
        '"Doe","Jane","jdoe2","","",""\n"Wong","Amy","awong","","",""\n')
    found = intake.collect(download, tmp_path / "scratch", CHAPTERS,
                           roster=tmp_path / "gradecenter.csv")
    out = _graded(tmp_path, found, {"jdoe2": {CHAPTER: 3.0}})
    assert cli.main(["export", "--lms", "blackboard", str(out), "--missing", "zero"]) == 0
    text = (out / "blackboard-grades.csv").read_text(encoding="utf-8")
    assert text.splitlines()[0] == (f'"Last Name","First Name","Username","{CHAPTER}",'
                                    '"02_scatter"')
    assert sorted(text.splitlines()[1:]) == ['"Doe","Jane","jdoe2","3",""',
                                             '"Wong","Amy","awong","0","0"']


def test_export_needs_a_graded_out(tmp_path, capsys):
    assert cli.main(["export", "--lms", "canvas", str(tmp_path)]) == 2
    assert "holds no results.json" in capsys.readouterr().err


def test_late_submissions_reach_moodle_as_feedback_and_are_named_for_the_others(tmp_path,
                                                                               capsys):
    """What each LMS's file can carry of a late mark (a submission through nbgrader's exchange
    after its due date): Moodle a feedback column to map at import, Canvas and Blackboard
    nothing, so each late row is named."""
    said = "late: handed in 2026-12-02 01:00:00 UTC, 1 h 1 min after the due date"
    outcomes = [Outcome("jdoe2", CHAPTER, 4.0, 4.0, Status.GRADED, late=True, intake=[said]),
                Outcome("awong", CHAPTER, 2.0, 4.0, Status.GRADED, late=False),
                Outcome("jdoe2", "02_scatter", 4.0, 4.0, Status.GRADED, late=False)]
    students = {"jdoe2": {"username": "jdoe2", "full name": "Jane Doe"},
                "awong": {"username": "awong", "full name": "Amy Wong"}}
    gradebook.write_sheets(tmp_path / "out", outcomes, [], students=students)
    assert cli.main(["export", "--lms", "moodle", str(tmp_path / "out")]) == 0
    rows = _rows(tmp_path / "out" / "moodle-grades.csv")
    assert rows[0][-3:] == [CHAPTER, "02_scatter", f"{CHAPTER} (feedback)"]
    assert sorted([row[3], *row[-3:]] for row in rows[1:]) == [["awong", "2", "", ""],
                                                               ["jdoe2", "4", "4", said]]
    capsys.readouterr()
    for lms in ("canvas", "blackboard"):
        assert cli.main(["export", "--lms", lms, str(tmp_path / "out")]) == 0
        err = capsys.readouterr().err
        assert f"jdoe2: {CHAPTER} was {said}; the {lms.title()} file carries the score only" \
            in err
        assert "awong: " + CHAPTER not in err
    with open(tmp_path / "out" / "grades.csv") as sheet:
        rows = {r["student"] + r["chapter"]: r for r in csv.DictReader(sheet)}
    assert (rows["jdoe2" + CHAPTER]["late"], rows["jdoe2" + CHAPTER]["notes"]) == ("late", said)
    assert rows["awong" + CHAPTER]["late"] == "on time"
