"""Finding a class's submissions: every student once, under a name the instructor recognises,
from the zips Canvas, Moodle and Blackboard really make, and every file not used said out loud
(over 400 lines: one test a behaviour, for three LMSs, two other layouts and five rosters)."""

from __future__ import annotations

import os
import re
import zipfile
from pathlib import Path

import nbformat
import pytest

from grader import intake
from support.bad_downloads import BAD_MEMBERS, bad_members_zip

ROOT = Path(__file__).resolve().parents[3]
CHAPTERS = sorted(p.name for p in (ROOT / "solutions").iterdir() if p.is_dir())
EARLY, LATE = (2026, 10, 1, 9, 0, 0), (2026, 10, 2, 9, 0, 0)


def notebook(text: str) -> str:
    """A notebook whose content tells it apart from the others."""
    return nbformat.writes(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(text)]))


def make_zip(path: Path, entries: dict[str, str | tuple[str, tuple]]) -> Path:
    """A zip of ``name -> content`` or ``name -> (content, date_time)``."""
    with zipfile.ZipFile(path, "w") as archive:
        for name, value in entries.items():
            content, when = value if isinstance(value, tuple) else (value, EARLY)
            archive.writestr(zipfile.ZipInfo(name, date_time=when), content)
    return path


def collect(tmp_path: Path, source: Path, **options) -> intake.Intake:
    return intake.collect(source, tmp_path / "scratch", CHAPTERS, **options)


def graded(result: intake.Intake) -> dict[str, str]:
    """student/chapter -> the file graded for it."""
    return {f"{s.student}/{s.chapter}": s.origin for s in result.submissions}


def students(result: intake.Intake) -> list[str]:
    """student/chapter of every submission, repeats included."""
    return sorted(f"{s.student}/{s.chapter}" for s in result.submissions)


def read_as(result: intake.Intake, layout: str) -> list[str]:
    """The students of ``result``, which must have been read as a download of ``layout``."""
    assert result.layout == layout
    return students(result)


def newest_wins(result: intake.Intake, student: str, newest: str, older: str) -> None:
    """``newest`` is graded for ``student``, and ``older`` listed as an older attempt."""
    assert graded(result)[student] == newest
    assert reasons(result)[older].startswith(f"older attempt of {student}")


def downloaded(name: str, files: dict):
    """A fixture: ``files`` zipped as an LMS's download ``name``.zip, and collected."""

    @pytest.fixture
    def collected(tmp_path):
        return collect(tmp_path, make_zip(tmp_path / f"{name}.zip", files))

    return collected


def reasons(result: intake.Intake) -> dict[str, str]:
    return {s.name: s.why for s in result.skipped}


# --- Canvas ---------------------------------------------------------------------------------------

CANVAS = {
    # Canvas numbers a student's submission, not each file, and its zip's times can't be
    # trusted: "-1" alone says which came later
    "smithjane_1234_9001_01_broadcast.ipynb": (notebook("first upload"), LATE),
    "smithjane_1234_9001_01_broadcast-1.ipynb": (notebook("uploaded again"), EARLY),
    "smithjane_1235_9003_01_broadcast.ipynb": notebook("the other Jane Smith"),
    "leebo_LATE_2001_9004_01_broadcast.ipynb": notebook("late"),
    "wongamy_3001_9005_01_Broadcast (1).ipynb": notebook("re-cased, a browser's copy"),
    "kimjo_4001_9006_broadcast_final.ipynb": notebook("renamed"),
    "kimjo_4001_9007_notes.pdf": "%PDF-1.4",
    "parkli_5001_9008_homework.ipynb": notebook("no chapter in the name"),
    "../escape.ipynb": notebook("outside"),
}


canvas = downloaded("canvas", CANVAS)


def test_canvas_download_grades_every_student_once_under_name_and_user_id(canvas):
    assert read_as(canvas, "canvas") == [
        "kimjo_4001/01_broadcast", "leebo_2001/01_broadcast", "smithjane_1234/01_broadcast",
        "smithjane_1235/01_broadcast", "wongamy_3001/01_broadcast"]


def test_canvas_resubmission_wins_over_the_first_upload(canvas):
    newest_wins(canvas, "smithjane_1234/01_broadcast", "smithjane_1234_9001_01_broadcast-1.ipynb",
                "smithjane_1234_9001_01_broadcast.ipynb")


def test_canvas_late_file_is_graded_and_keeps_its_late_mark(canvas):
    assert graded(canvas)["leebo_2001/01_broadcast"] == "leebo_LATE_2001_9004_01_broadcast.ipynb"


def test_canvas_files_not_used_are_each_listed_with_the_reason(canvas):
    assert reasons(canvas) == {
        "../escape.ipynb": "would escape the folder it is unpacked into (an absolute path or ..)",
        "kimjo_4001_9007_notes.pdf": "not a notebook",
        "parkli_5001_9008_homework.ipynb": "cannot tell which chapter from its name",
        "smithjane_1234_9001_01_broadcast.ipynb": (
            "older attempt of smithjane_1234/01_broadcast "
            "(graded: smithjane_1234_9001_01_broadcast-1.ipynb)"),
    }


def test_archive_inside_the_download_is_listed_as_not_opened(tmp_path):
    source = make_zip(tmp_path / "canvas.zip", {"kimjo_4001_9006_work.zip": "PK"})
    assert reasons(collect(tmp_path, source)) == {
        "kimjo_4001_9006_work.zip": "an archive inside the download is not opened: unpack it by "
                                    "hand if it holds the notebook"}


def test_zip_members_outside_the_scratch_folder_are_never_written(tmp_path):
    absolute = str(tmp_path / "absolute.ipynb")
    source = make_zip(tmp_path / "canvas.zip", {"../escape.ipynb": notebook("x"),
                                                absolute: notebook("y")})
    result = collect(tmp_path, source)
    assert list(tmp_path.rglob("*.ipynb")) == []
    assert set(reasons(result)) == {"../escape.ipynb", absolute}


def test_second_zip_entry_of_the_same_name_is_listed_not_written_over_the_first(tmp_path):
    source = tmp_path / "canvas.zip"
    with pytest.warns(UserWarning, match="Duplicate name"), zipfile.ZipFile(source, "w") as archive:
        archive.writestr("leebo_2001_9004_01_broadcast.ipynb", notebook("first"))
        archive.writestr("leebo_2001_9004_01_broadcast.ipynb", notebook("second"))
    result = collect(tmp_path, source)
    assert "first" in result.submissions[0].path.read_text()
    assert reasons(result) == {"leebo_2001_9004_01_broadcast.ipynb": "a second entry of the same "
                               "name in the zip: the first one is used"}


def test_each_bad_member_of_a_download_is_named_and_the_rest_of_the_class_read(tmp_path):
    source = bad_members_zip(tmp_path / "canvas.zip", {
        "kimjo_4001_9006_01_broadcast.ipynb": notebook("kim"),
        "leebo_2001_9004_01_broadcast.ipynb": notebook("lee")})
    result = collect(tmp_path, source)
    assert graded(result) == {"kimjo_4001/01_broadcast": "kimjo_4001_9006_01_broadcast.ipynb",
                              "leebo_2001/01_broadcast": "leebo_2001_9004_01_broadcast.ipynb"}
    why = reasons(result)
    for member, reason in BAD_MEMBERS.items():
        assert reason in why.get(member, ""), (member, why)
    unpacked = [p for p in (tmp_path / "scratch").rglob("*") if p.is_file()]
    assert sum(p.stat().st_size for p in unpacked) < 2**20, "nothing large or linked written"
    assert not any(p.is_symlink() for p in (tmp_path / "scratch").rglob("*"))


def test_a_pipe_or_an_oversize_file_in_a_class_folder_is_named_not_read(tmp_path):
    folder = tmp_path / "class" / "kim" / "01_broadcast"
    folder.mkdir(parents=True)
    (folder / "01_broadcast.ipynb").write_text(notebook("kim"))
    pipe = tmp_path / "class" / "lee" / "01_broadcast" / "01_broadcast.ipynb"
    pipe.parent.mkdir(parents=True)
    os.mkfifo(pipe)  # reading it would wait for a writer forever
    big = tmp_path / "class" / "amy" / "01_broadcast" / "01_broadcast.ipynb"
    big.parent.mkdir(parents=True)
    with open(big, "wb") as out:
        out.truncate(intake.downloads.MAX_FILE_BYTES + 1)
    result = collect(tmp_path, tmp_path / "class")
    assert graded(result) == {"kim/01_broadcast": "kim/01_broadcast/01_broadcast.ipynb"}
    why = reasons(result)
    assert why["lee/01_broadcast/01_broadcast.ipynb"].startswith("not a file (a pipe")
    assert "larger than the 50 MB" in why["amy/01_broadcast/01_broadcast.ipynb"]


# --- Moodle ---------------------------------------------------------------------------------------

MOODLE = {
    "Jane Doe_4242_assignsubmission_file_/01_broadcast.ipynb": notebook("Jane Doe 4242"),
    "Jane Doe_4243_assignsubmission_file_/01_broadcast.ipynb": notebook("Jane Doe 4243"),
    # the browser's copy "(1)" is the older file here, and unpacked last: the time in the zip
    # decides
    "José Álvarez_4250_assignsubmission_file_/01_broadcast.ipynb": (notebook("late"), LATE),
    "José Álvarez_4250_assignsubmission_file_/01_broadcast (1).ipynb": (notebook("early"), EARLY),
    "Mary Ann Smith_4260_assignsubmission_onlinetext_/onlinetext.html": "<p>see my file</p>",
    "Li Wei_4270_assignsubmission_file_01_broadcast.ipynb": notebook("without folders"),
}


moodle = downloaded("moodle", MOODLE)


def test_moodle_download_grades_each_participant_once_under_full_name_and_id(moodle):
    assert read_as(moodle, "moodle") == [
        "Jane_Doe_4242/01_broadcast", "Jane_Doe_4243/01_broadcast",
        "Jose_Alvarez_4250/01_broadcast", "Li_Wei_4270/01_broadcast"]


def test_newer_file_in_the_zip_wins_over_an_older_browser_copy(moodle):
    folder = "José Álvarez_4250_assignsubmission_file_/"
    newest_wins(moodle, "Jose_Alvarez_4250/01_broadcast", folder + "01_broadcast.ipynb",
                folder + "01_broadcast (1).ipynb")


def test_moodle_online_text_is_listed_as_not_a_notebook(moodle):
    assert reasons(moodle) == {
        "José Álvarez_4250_assignsubmission_file_/01_broadcast (1).ipynb": (
            "older attempt of Jose_Alvarez_4250/01_broadcast (graded: José Álvarez_4250_"
            "assignsubmission_file_/01_broadcast.ipynb)"),
        "Mary Ann Smith_4260_assignsubmission_onlinetext_/onlinetext.html": "not a notebook",
    }


def test_the_same_file_twice_is_listed_as_a_duplicate(tmp_path):
    same = notebook("same")
    source = make_zip(tmp_path / "moodle.zip", {
        "Jane Doe_4242_assignsubmission_file_/01_broadcast.ipynb": (same, EARLY),
        "Jane Doe_4242_assignsubmission_file_/01_broadcast (1).ipynb": (same, LATE)})
    result = collect(tmp_path, source)
    assert reasons(result) == {"Jane Doe_4242_assignsubmission_file_/01_broadcast.ipynb":
                               "duplicate of Jane Doe_4242_assignsubmission_file_/"
                               "01_broadcast (1).ipynb"}


# --- Blackboard -----------------------------------------------------------------------------------

def receipt(name: str, user: str, file: str) -> str:
    return (f"Name: {name} ({user})\nAssignment: Chapter 1\nDate Submitted: Friday, October 2, "
            f"2026 9:00:00 AM CEST\nCurrent Grade: Needs Grading\n\nFiles:\n"
            f"\tOriginal filename: {file}\n")


BLACKBOARD = {
    # the older attempt was put in the zip later: the attempt's timestamp still decides
    "Chapter 1_jdoe2_attempt_2026-10-01-10-00-00_01_broadcast.ipynb": (notebook("try 1"), LATE),
    "Chapter 1_jdoe2_attempt_2026-10-01-10-00-00.txt": receipt("Jane Doe", "jdoe2", "x"),
    "Chapter 1_jdoe2_attempt_2026-10-02-09-00-00_01_broadcast.ipynb": (notebook("try 2"), EARLY),
    "Chapter 1_jdoe2_attempt_2026-10-02-09-00-00.txt": receipt("Jane Doe", "jdoe2", "x"),
    "Chapter 1_asmith_attempt_2026-10-01-11-00-00_01_broadcast.ipynb": notebook("asmith"),
    "Chapter 1_asmith_attempt_2026-10-01-11-00-00.txt": receipt("Ann Smith", "asmith", "x"),
    "Chapter 1_li_wei_attempt_2026-10-03-08-00-00_01 broadcast.ipynb": notebook("li_wei, late"),
    "Chapter 1_li_wei_attempt_2026-10-03-08-00-00.txt": receipt("Li Wei", "li_wei", "x"),
}


blackboard = downloaded("blackboard", BLACKBOARD)


def test_blackboard_download_names_students_by_username_not_by_assignment(blackboard):
    assert read_as(blackboard, "blackboard") == [
        "asmith/01_broadcast", "jdoe2/01_broadcast", "li_wei/01_broadcast"]


def test_blackboard_newest_attempt_wins_by_its_timestamp(blackboard):
    newest_wins(blackboard, "jdoe2/01_broadcast",
                "Chapter 1_jdoe2_attempt_2026-10-02-09-00-00_01_broadcast.ipynb",
                "Chapter 1_jdoe2_attempt_2026-10-01-10-00-00_01_broadcast.ipynb")


def test_blackboard_receipts_are_listed_as_receipts(blackboard):
    receipts = {name: why for name, why in reasons(blackboard).items() if name.endswith(".txt")}
    assert len(receipts) == 4
    assert set(receipts.values()) == {"Blackboard's receipt for this attempt, not a notebook"}


def test_blackboard_username_with_an_underscore_is_read_from_the_receipt(tmp_path):
    source = make_zip(tmp_path / "blackboard.zip", {
        "Chapter 1_li_wei_attempt_2026-10-03-08-00-00_01_broadcast.ipynb": notebook("x"),
        "Chapter 1_li_wei_attempt_2026-10-03-08-00-00.txt": receipt("Li Wei", "li_wei", "x")})
    assert list(graded(collect(tmp_path, source))) == ["li_wei/01_broadcast"]


# --- today's layouts, the flag, the chapter from a file name ------------------------------------

def test_folder_of_student_and_chapter_folders_is_understood(tmp_path):
    notebook_path = tmp_path / "class" / "kim" / "01_broadcast" / "01_broadcast.ipynb"
    notebook_path.parent.mkdir(parents=True)
    notebook_path.write_text(notebook("kim"))
    result = collect(tmp_path, tmp_path / "class")
    assert (result.layout, graded(result)) == (
        "folders", {"kim/01_broadcast": "kim/01_broadcast/01_broadcast.ipynb"})
    assert result.submissions[0].path == notebook_path


def test_zip_of_student_and_chapter_folders_is_understood(tmp_path):
    source = make_zip(tmp_path / "class.zip", {
        "submissions/bob/02_scatter/02_scatter.ipynb": notebook("bob"),
        "submissions/bob/02_scatter/.ipynb_checkpoints/02_scatter-checkpoint.ipynb": "{}",
        "__MACOSX/submissions/bob/02_scatter/._02_scatter.ipynb": "mac"})
    result = collect(tmp_path, source)
    assert (result.layout, list(graded(result))) == ("folders", ["bob/02_scatter"])
    assert len(result.skipped) == 2


def test_notebook_named_after_its_chapter_folder_wins_over_a_newer_scratch_file(tmp_path):
    source = make_zip(tmp_path / "class.zip", {
        "kim/01_broadcast/01_broadcast.ipynb": (notebook("answers"), EARLY),
        "kim/01_broadcast/Untitled.ipynb": (notebook("scratch"), LATE)})
    result = collect(tmp_path, source)
    assert graded(result) == {"kim/01_broadcast": "kim/01_broadcast/01_broadcast.ipynb"}
    assert reasons(result) == {"kim/01_broadcast/Untitled.ipynb": "not named after 01_broadcast "
                               "(graded: kim/01_broadcast/01_broadcast.ipynb)"}


def test_link_out_of_the_submissions_folder_is_not_followed(tmp_path):
    outside = tmp_path / "secret.ipynb"
    outside.write_text(notebook("not a student's"))
    (tmp_path / "class" / "kim" / "01_broadcast").mkdir(parents=True)
    (tmp_path / "class" / "kim" / "01_broadcast" / "01_broadcast.ipynb").symlink_to(outside)
    result = collect(tmp_path, tmp_path / "class")
    assert result.submissions == []
    assert reasons(result) == {"kim/01_broadcast/01_broadcast.ipynb":
                               "a link to outside the submissions folder"}


def test_flat_names_take_the_student_before_the_chapter(tmp_path):
    source = make_zip(tmp_path / "flat.zip", {"alice_01_broadcast.ipynb": notebook("alice"),
                                              "bob_02_scatter_final.ipynb": notebook("bob")})
    result = collect(tmp_path, source)
    assert (result.layout, sorted(graded(result))) == (
        "flat", ["alice/01_broadcast", "bob/02_scatter"])


def test_files_named_by_different_lms_in_one_zip_are_each_read_by_their_own_name(tmp_path):
    source = make_zip(tmp_path / "merged.zip", {
        "Chapter 1_jdoe2_attempt_2026-10-01-10-00-00_01_broadcast.ipynb": notebook("bb"),
        "Jane Doe_4242_assignsubmission_file_/01_broadcast.ipynb": notebook("moodle"),
        "smithjohn_12345_67890_01_broadcast-1.ipynb": notebook("canvas"),
        "kim/01_broadcast/01_broadcast.ipynb": notebook("folders"),
        "lee_01_broadcast_final.ipynb": notebook("flat")})
    assert sorted(graded(collect(tmp_path, source))) == [
        "Jane_Doe_4242/01_broadcast", "jdoe2/01_broadcast", "kim/01_broadcast",
        "lee/01_broadcast", "smithjohn_12345/01_broadcast"]


def test_lms_flag_overrides_what_the_names_look_like(tmp_path):
    source = make_zip(tmp_path / "moodle.zip", {
        "Jane Doe_4242_assignsubmission_file_/01_broadcast.ipynb": notebook("x")})
    result = collect(tmp_path, source, lms="canvas")
    assert result.layout == "canvas" and result.submissions == []
    assert "does not follow <lastfirst>_<userid>" in result.skipped[0].why


def test_unknown_lms_name_is_refused_with_the_choices(tmp_path):
    with pytest.raises(intake.IntakeError,
                       match="auto, folders, exchange, canvas, moodle, blackboard, flat"):
        collect(tmp_path, tmp_path, lms="sakai")


@pytest.mark.parametrize("file, chapter", [
    ("01_Broadcast.ipynb", "01_broadcast"),
    ("01_broadcast (2).ipynb", "01_broadcast"),
    ("broadcast.ipynb", "01_broadcast"),
    ("01_broadcast_final.ipynb", "01_broadcast"),
    ("All-Reduce.ipynb", "06_all_reduce"),
    ("reduce scatter v2.ipynb", "07_reduce_scatter"),
    ("06.ipynb", "06_all_reduce"),
])
def test_renamed_file_counts_for_the_one_chapter_its_name_fits(tmp_path, file, chapter):
    source = make_zip(tmp_path / "canvas.zip", {f"kimjo_4001_9006_{file}": notebook("x")})
    assert list(graded(collect(tmp_path, source))) == [f"kimjo_4001/{chapter}"]


@pytest.mark.parametrize("file", ["gather_and_scatter.ipynb", "02_broadcast.ipynb",
                                  "homework.ipynb"])
def test_file_whose_name_fits_no_one_chapter_is_skipped(tmp_path, file):
    source = make_zip(tmp_path / "canvas.zip", {f"kimjo_4001_9006_{file}": notebook("x")})
    result = collect(tmp_path, source)
    assert result.submissions == []
    assert result.skipped[0].why.startswith("cannot tell which chapter")


# --- SUBMISSIONS that cannot be read ------------------------------------------------------------

def test_missing_submissions_path_says_what_to_give(tmp_path):
    with pytest.raises(intake.IntakeError, match="does not exist: give the folder"):
        collect(tmp_path, tmp_path / "nowhere.zip")


def test_file_that_is_no_zip_says_what_to_give(tmp_path):
    (tmp_path / "grades.csv").write_text("student,score\n")
    with pytest.raises(intake.IntakeError, match="neither a folder nor a zip file"):
        collect(tmp_path, tmp_path / "grades.csv")


def test_damaged_zip_says_to_download_it_again(tmp_path):
    source = make_zip(tmp_path / "canvas.zip", {"alice_1_2_01_broadcast.ipynb": notebook("a")})
    data = source.read_bytes()
    # its table of contents (a member's damaged data is that member's alone: skipped, named)
    source.write_bytes(data.replace(b"PK\x01\x02", b"XX\x01\x02"))
    with pytest.raises(intake.IntakeError, match="damaged or unsupported zip .* download it again"):
        collect(tmp_path, source)


# --- rosters --------------------------------------------------------------------------------------

def with_roster(tmp_path: Path, source: Path, name: str, text: str,
                encoding: str | None = None) -> intake.Intake:
    """``source`` collected with the roster ``name`` that holds ``text``."""
    roster = tmp_path / name
    roster.write_text(text, encoding=encoding)
    return collect(tmp_path, source, roster=roster)


def missing(result: intake.Intake) -> set[str]:
    return set(result.roster) - {s.student for s in result.submissions}


def class_folder(folder: Path, *students: str) -> Path:
    """``folder`` holding chapter 01 handed in by each of ``students``, a folder each."""
    for student in students:
        path = folder / student / "01_broadcast" / "01_broadcast.ipynb"
        path.parent.mkdir(parents=True)
        path.write_text(notebook(student))
    return folder


# Each LMS's own roster export, as downloaded: (its submissions, the file, its text, its
# encoding, the roster read from it, who on it handed nothing in)
ROSTERS = {
    "canvas gradebook: names the non-submitter as Canvas would": (
        CANVAS, "gradebook.csv",
        "Student,ID,SIS User ID,SIS Login ID,Section,Chapter 1 (77)\n"
        "    Points Possible,,,,,10\n"
        '"Smith, Jane",1234,s1,jsmith,A,\n"Smith, Jane",1235,s2,jsmith2,A,\n'
        '"Lee, Bo",2001,s3,blee,A,\n"Nguyen, An",7777,s4,anguyen,A,\n'
        '"Student, Test",99,,,A,\n', None,
        ["smithjane_1234", "smithjane_1235", "leebo_2001", "nguyenan_7777"], {"nguyenan_7777"}),
    "moodle grading worksheet: matches by participant id": (
        MOODLE, "worksheet.csv",
        "Identifier,Full name,Email address,Status\n"
        "Participant 4242,Jane Doe,jd@example.org,Submitted\n"
        "Participant 4243,Jane Doe,jd2@example.org,Submitted\n"
        "Participant 4299,Ola Nordmann,ola@example.org,No submission\n", None,
        ["Jane_Doe_4242", "Jane_Doe_4243", "Ola_Nordmann_4299"], {"Ola_Nordmann_4299"}),
    "moodle participants export: matches by name": (
        MOODLE, "participants.csv",
        "First name,Last name,ID number,Email address\n"
        "José,Álvarez,S-17,jose@example.org\nLi,Wei,S-18,li@example.org\n"
        "Ola,Nordmann,S-19,ola@example.org\n", None,
        ["Jose_Alvarez_4250", "Li_Wei_4270", "Ola_Nordmann"], {"Ola_Nordmann"}),
    # what Blackboard calls .xls: UTF-16 text with tabs
    "blackboard grade center download: matches by username": (
        BLACKBOARD, "gc_download.xls",
        '"Last Name"\t"First Name"\t"Username"\t"Student ID"\n'
        '"Doe"\t"Jane"\tjdoe2\t1001\n"Wei"\t"Li"\tli_wei\t1002\n'
        '"Nordmann"\t"Ola"\tonordmann\t1003\n', "utf-16",
        ["jdoe2", "li_wei", "onordmann"], {"onordmann"}),
}


@pytest.mark.parametrize("export", sorted(ROSTERS))
def test_an_lms_roster_export_names_every_student_and_who_handed_nothing_in(tmp_path, export):
    files, name, text, encoding, roster, not_in = ROSTERS[export]
    result = with_roster(tmp_path, make_zip(tmp_path / "download.zip", files), name, text,
                         encoding)
    assert result.roster == roster
    assert missing(result) == not_in


def test_roster_of_one_student_a_line_lists_the_non_submitter(tmp_path):
    result = with_roster(tmp_path, class_folder(tmp_path / "class", "kim", "lee"), "roster.txt",
                         "# chapter 1 group\nkim\nlee\n\npark\n")
    assert (result.roster, missing(result)) == (["kim", "lee", "park"], {"park"})


def test_one_column_roster_with_a_header_does_not_count_the_header(tmp_path):
    result = with_roster(tmp_path, make_zip(tmp_path / "bb.zip", BLACKBOARD), "roster.csv",
                         "Username\njdoe2\nonordmann\n")
    assert result.roster == ["jdoe2", "onordmann"]


def test_without_a_roster_there_is_no_class_list(canvas):
    assert canvas.roster is None


def test_roster_that_is_a_spreadsheet_says_to_save_it_as_csv(tmp_path):
    roster = make_zip(tmp_path / "roster.xlsx", {"xl/workbook.xml": "<workbook/>"})
    with pytest.raises(intake.IntakeError, match="not a text file .* save it as CSV"):
        collect(tmp_path, make_zip(tmp_path / "canvas.zip", CANVAS), roster=roster)


def test_roster_with_unknown_columns_says_which_exports_are_read(tmp_path):
    roster = tmp_path / "roster.csv"
    roster.write_text("name,grade\nkim,3\n")
    with pytest.raises(intake.IntakeError, match="names no column read here: export it"):
        collect(tmp_path, make_zip(tmp_path / "canvas.zip", CANVAS), roster=roster)


def test_missing_roster_says_what_to_give(tmp_path):
    with pytest.raises(intake.IntakeError, match="cannot read the roster .* one student a line"):
        collect(tmp_path, make_zip(tmp_path / "canvas.zip", CANVAS),
                roster=tmp_path / "roster.txt")


# --- names the students chose -------------------------------------------------------------------

SAFE_FOLDER = r"[A-Za-z0-9._-]{1,80}"


def content(submission: intake.Submission) -> str:
    """What a notebook made by :func:`notebook` says."""
    return nbformat.reads(submission.path.read_text(), as_version=4).cells[0].source


def test_names_that_differ_only_in_case_or_accents_get_folders_of_their_own(tmp_path):
    names = ["Kim", "kim", "José", "Jose", "张伟", "王芳", "Jane Doe"]
    source = make_zip(tmp_path / "class.zip", {f"{name}/01_broadcast/01_broadcast.ipynb":
                                               notebook(name) for name in names})
    result = collect(tmp_path, source)
    folders = [s.student for s in result.submissions]
    assert len(folders) == len({f.casefold() for f in folders}) == len(names)
    assert all(re.fullmatch(SAFE_FOLDER, f) for f in folders)
    folder = {content(s): s.student for s in result.submissions}
    # a name that is its own folder name keeps it; the others get their name's digest
    assert (folder["Jose"], folder["Jane Doe"]) == ("Jose", "Jane_Doe")
    assert re.fullmatch(r"Jose_[0-9a-f]{6}", folder["José"])
    assert re.fullmatch(r"student_[0-9a-f]{6}", folder["张伟"])


def test_a_students_folder_is_the_same_whoever_else_is_in_the_class(tmp_path):
    alone = collect(tmp_path, make_zip(tmp_path / "a.zip", {
        "José/01_broadcast/01_broadcast.ipynb": notebook("x")}))
    together = collect(tmp_path, make_zip(tmp_path / "b.zip", {
        "José/01_broadcast/01_broadcast.ipynb": notebook("x"),
        "Jose/01_broadcast/01_broadcast.ipynb": notebook("y")}))
    assert alone.submissions[0].student in {s.student for s in together.submissions}


def test_usernames_that_differ_only_in_case_are_two_students(tmp_path):
    source = make_zip(tmp_path / "bb.zip", {
        "Chapter 1_jdoe_attempt_2026-10-01-10-00-00_01_broadcast.ipynb": notebook("jdoe"),
        "Chapter 1_JDoe_attempt_2026-10-01-10-00-00_01_broadcast.ipynb": notebook("JDoe")})
    folder = {content(s): s.student for s in collect(tmp_path, source).submissions}
    assert re.fullmatch(r"jdoe_[0-9a-f]{6}", folder["jdoe"])
    assert re.fullmatch(r"JDoe_[0-9a-f]{6}", folder["JDoe"])


def test_a_name_too_long_for_the_disk_is_unpacked_and_read_by_its_name_in_the_zip(tmp_path):
    name = "王" * 60 + " " + "王" * 40  # 303 bytes: more than a file name may have
    folder = f"{name}_4260_assignsubmission_file_"
    result = collect(tmp_path, make_zip(tmp_path / "moodle.zip", {
        f"{folder}/01_broadcast.ipynb": notebook("long")}))
    assert graded(result) == {"4260/01_broadcast": f"{folder}/01_broadcast.ipynb"}
    assert result.identities["4260"]["full name"] == name
    assert content(result.submissions[0]) == "long"


def test_a_very_long_latin_name_is_cut_in_the_folder_name(tmp_path):
    name = "Maximiliana " * 20
    result = collect(tmp_path, make_zip(tmp_path / "moodle.zip", {
        f"{name.strip()}_4261_assignsubmission_file_/01_broadcast.ipynb": notebook("x")}))
    (student,) = {s.student for s in result.submissions}
    assert re.fullmatch(SAFE_FOLDER, student) and student.endswith("_4261")


def test_a_formula_in_a_moodle_name_leaves_a_plain_folder_name(tmp_path):
    result = collect(tmp_path, make_zip(tmp_path / "moodle.zip", {
        '=HYPERLINK("http:x";"click")_4242_assignsubmission_file_/01_broadcast.ipynb':
            notebook("x")}))
    assert list(graded(result)) == ["HYPERLINK_http_x_click_4242/01_broadcast"]
    assert result.identities["HYPERLINK_http_x_click_4242"]["full name"] == (
        '=HYPERLINK("http:x";"click")')


def test_files_not_used_are_listed_without_their_control_characters(tmp_path):
    source = make_zip(tmp_path / "class.zip", {"notes\x1b[2J\nmore.txt": "x"})
    report = collect(tmp_path, source).report()
    assert "notes\\x1b[2J\\nmore.txt: not a notebook" in report
    assert "\x1b" not in report


def test_roster_name_in_another_script_is_never_matched_to_another_students_files(tmp_path):
    result = with_roster(tmp_path, class_folder(tmp_path / "class", "张伟", "Kim"),
                         "participants.csv",
                         "First name,Last name,Email address\n"
                         "芳,王,wang@example.org\n伟,张,zhang@example.org\nKim,,kim@example.org\n",
                         encoding="utf-8")
    zhang = next(s.student for s in result.submissions if content(s) == "张伟")
    assert result.identities[zhang]["email address"] == "zhang@example.org"
    assert len(result.roster) == 3 and len(missing(result)) == 1
    (wang,) = missing(result)
    assert result.identities[wang]["email address"] == "wang@example.org"


def test_roster_row_takes_the_submission_of_its_one_student_only(tmp_path):
    # René handed nothing in; Rene did: René's row must not take Rene's submission
    path = tmp_path / "class" / "Rene Lopez" / "01_broadcast" / "01_broadcast.ipynb"
    path.parent.mkdir(parents=True)
    path.write_text(notebook("Rene"))
    result = with_roster(tmp_path, tmp_path / "class", "participants.csv",
                         "First name,Last name,Email address\n"
                         "René,López,rene1@example.org\nRene,Lopez,rene2@example.org\n",
                         encoding="utf-8")
    assert result.identities["Rene_Lopez"]["email address"] == "rene2@example.org"
    (rene_accented,) = missing(result)
    assert rene_accented != "Rene_Lopez"
    assert result.identities[rene_accented]["email address"] == "rene1@example.org"


def test_roster_name_with_quotes_commas_and_a_line_break_is_one_student(tmp_path):
    result = with_roster(tmp_path, make_zip(tmp_path / "canvas.zip", CANVAS), "gradebook.csv",
                         'Student,ID,SIS User ID,SIS Login ID,Section\n'
                         '"Nguyen, ""Bo""\nTran",2001,S-2,btran,A\n'
                         '"#fan, Al",2002,S-3,afan,A\n'
                         'Points Possible,2003,S-4,pposs,A\n')
    assert result.roster == ["leebo_2001", "fanal_2002", "pointspossible_2003"]
    assert result.identities["leebo_2001"]["student"] == 'Nguyen, "Bo"\nTran'


def test_roster_rows_whose_usernames_differ_only_in_case_are_two_students(tmp_path):
    source = make_zip(tmp_path / "bb.zip", {
        "Chapter 1_jdoe_attempt_2026-10-01-10-00-00_01_broadcast.ipynb": notebook("jdoe")})
    result = with_roster(tmp_path, source, "gradecenter.csv",
                         '"Last Name","First Name","Username"\n'
                         '"Doe","Jane","JDoe"\n"Doe","Jane","jdoe"\n')
    assert result.identities["jdoe"]["username"] == "jdoe"
    (other,) = missing(result)
    assert result.identities[other]["username"] == "JDoe"
