"""Names from an LMS are the students' own: a Canvas, a Moodle and a Blackboard download whose
students carry formulas, markup, commas, quotes, line breaks, other scripts, right-to-left marks,
very long names and names that differ only in case or accents, each graded once (three
submissions each; the others are on the roster only), and every file the grader writes checked:
no cell a spreadsheet would evaluate, every student once, the LMS's ids as it wrote them, each
export read back by the rules its LMS's importer follows, and no name as markup in the feedback
pages or in Formgrader's page of a submission.

The importers' rules, from their sources:
- Canvas, ``app/models/gradebook_importer.rb``: RFC 4180 CSV (Ruby's), comma or semicolon as the
  first three lines tell, a header ``Student``, ``ID``, ``SIS User ID``, ``SIS Login ID``,
  ``Section``; a row whose first cell holds ``Points Possible`` is the points row; a student is
  found by ID, then SIS User ID, then SIS Login ID.
- Moodle, ``lib/csvlib.class.php`` and ``grade/import/csv/classes/load_data.php``: BOM and
  surrounding space removed, line ends made ``\\n``, rows read with PHP's ``fgetcsv`` (a
  backslash escapes the next character inside quotes), every row as many fields as the header,
  a user found by the mapped column's value exactly.
- Blackboard (Grade Center, "Work Offline"): a header, then one record a line, every field in
  quotes, a student found by ``Username``.
"""

from __future__ import annotations

import csv
import io
import re
import unicodedata
import zipfile
from dataclasses import dataclass
from pathlib import Path

import nbformat
import pytest

from grader import cli
from grader.trusted import export
from support.class_factory import correct, release
from support.grading import graded_class

CHAPTER = "01_broadcast"
FORMULA = '=HYPERLINK("http:x";"click")'
MARKUP = "<img src=x onerror=alert(1)>"
LONG = "王" * 45  # a Moodle folder of two of these is 279 bytes: more than a file name may have
RTL = "\u200f"  # right-to-left mark
SAFE_FOLDER = re.compile(r"[A-Za-z0-9._-]{1,80}")


def evaluates(cell: str) -> bool:
    """Whether a spreadsheet may read ``cell`` as a formula (OWASP's list, full-width forms,
    after spaces and invisible marks, which LibreOffice may trim)."""
    if cell[:1] in ("\t", "\r", "\n"):
        return True
    start = cell.lstrip(" \u200b\u200e\u200f\ufeff")[:1]
    return start != "" and start in "=+-@＝＋－＠"


@dataclass
class Download:
    """An LMS download, its roster, and what the LMS must read back from the export."""

    files: dict[str, object]  # name in the zip -> notebook or text
    roster: list[list[str]]  # the LMS's export, header first
    roster_file: str
    quoting: int
    key: str  # the column the LMS finds a student by
    expected: dict[str, dict[str, str]]  # key -> the columns it must read
    kept: set[str]  # ids a spreadsheet would evaluate, kept as the LMS wrote them


def _receipt(name: str, user: str) -> str:
    return f"Name: {name} ({user})\nAssignment: Chapter 1\n"


ATTEMPT = "Chapter 1_{user}_attempt_2026-10-01-10-00-00"

DOWNLOADS = {
    "canvas": Download(
        files={f"hyperlinkhttpxclick_1001_9001_{CHAPTER}.ipynb": correct(CHAPTER),
               f"imgsrcxonerroralert1lee_1002_9002_{CHAPTER}.ipynb": release(CHAPTER),
               f"pointspossible_1003_9003_{CHAPTER}.ipynb": release(CHAPTER)},
        roster=[["Student", "ID", "SIS User ID", "SIS Login ID", "Section"],
                ["    Points Possible", "", "", "", ""],
                [FORMULA, "1001", "S-1", "-hyperlink", "@Section A"],
                [f"{MARKUP}, Lee", "1002", "S-2", "ilee", "Section A"],
                ["Points Possible", "1003", "S-3", "ppossible", "Section A"],
                ["López, René", "1004", "S-4", "rlopez", "Section A"],
                ["Lopez, Rene", "1005", "S-5", "rlopez2", "Section A"],
                ['Nguyen, Bo "Bobby"\nTran', "1006", "S-6", "bnguyen", "Section A"],
                [f"محمد{RTL}, علي", "1007", "S-7", "mali", "Section A"],
                ["Wolfeschlegelsteinhausenbergerdorff" * 4 + ", Hubert", "1008", "S-8",
                 "hwolfe", "Section A"],
                ["Student, Test", "99", "", "", "Section A"]],
        roster_file="gradebook.csv", quoting=csv.QUOTE_MINIMAL, key="ID",
        expected={
            "1001": {"Student": "'" + FORMULA, "SIS Login ID": "-hyperlink",
                     "Section": "'@Section A", CHAPTER: "4"},
            "1002": {"Student": f"{MARKUP}, Lee", CHAPTER: "0"},
            "1003": {"Student": "Points-Possible", CHAPTER: "0"},
            "1004": {"Student": "López, René", CHAPTER: ""},
            "1005": {"Student": "Lopez, Rene", CHAPTER: ""},
            "1006": {"Student": 'Nguyen, Bo "Bobby" Tran', CHAPTER: ""},
            "1007": {"Student": f"محمد{RTL}, علي", CHAPTER: ""},
            "1008": {"Student": "Wolfeschlegelsteinhausenbergerdorff" * 4 + ", Hubert",
                     CHAPTER: ""}},
        kept={"-hyperlink"}),
    "moodle": Download(
        files={f"{FORMULA}_4242_assignsubmission_file_/{CHAPTER}.ipynb": correct(CHAPTER),
               f"José Álvarez_4250_assignsubmission_file_/{CHAPTER}.ipynb": release(CHAPTER),
               f"{LONG} {LONG}_4260_assignsubmission_file_/{CHAPTER}.ipynb": release(CHAPTER)},
        # the participants export: no participant number, so every row is matched by name
        roster=[["First name", "Last name", "ID number", "Email address"],
                [FORMULA, "", "S-1", "-kim@example.edu"],
                ["José", "Álvarez", "S-2", "jose@example.edu"],
                ["Jose", "Alvarez", "S-3", "Jose@example.edu"],
                [LONG, LONG, "S-4", "wang@example.edu"],
                ['Bo "Bobby"', "Nguyen,\nTran", "S-5", "bo@example.edu"],
                [f"{RTL}محمد", "علي", "S-6", "ali@example.edu"],
                ["Ann", 'O"Brien\\', "S-7", "ann@example.edu"],
                [MARKUP, "Lee", "S-8", "+lee@example.edu"]],
        roster_file="participants.csv", quoting=csv.QUOTE_MINIMAL, key="Email address",
        expected={
            "-kim@example.edu": {"Full name": "'" + FORMULA, "Identifier": "Participant 4242",
                                 CHAPTER: "4"},
            "jose@example.edu": {"Full name": "José Álvarez", CHAPTER: "0"},
            "Jose@example.edu": {"Full name": "Jose Alvarez", CHAPTER: ""},
            "wang@example.edu": {"Full name": f"{LONG} {LONG}", "ID number": "S-4",
                                 CHAPTER: "0"},
            "bo@example.edu": {"Full name": 'Bo "Bobby" Nguyen, Tran', CHAPTER: ""},
            "ali@example.edu": {"Full name": f"{RTL}محمد علي", CHAPTER: ""},
            # PHP's fgetcsv keeps the backslash, and the space that keeps it from escaping
            "ann@example.edu": {"Full name": 'Ann O"Brien\\ ', CHAPTER: ""},
            "+lee@example.edu": {"Full name": f"{MARKUP} Lee", CHAPTER: ""}},
        kept={"-kim@example.edu", "+lee@example.edu"}),
    "blackboard": Download(
        files={f"{ATTEMPT.format(user='jdoe')}_{CHAPTER}.ipynb": correct(CHAPTER),
               f"{ATTEMPT.format(user='jdoe')}.txt": _receipt(FORMULA, "jdoe"),
               f"{ATTEMPT.format(user='JDoe')}_{CHAPTER}.ipynb": release(CHAPTER),
               f"{ATTEMPT.format(user='JDoe')}.txt": _receipt("Jane Doe", "JDoe"),
               f"{ATTEMPT.format(user='zhang.wei')}_{CHAPTER}.ipynb": release(CHAPTER),
               f"{ATTEMPT.format(user='zhang.wei')}.txt": _receipt("张伟", "zhang.wei")},
        roster=[["Last Name", "First Name", "Username", "Student ID"],
                [FORMULA, "Jane", "jdoe", ""],
                ["Doe", "Jane", "JDoe", ""],
                ["张", "伟", "zhang.wei", ""],
                ["O'Brien, Jr.", "Ann\nMarie", "aobrien", ""],
                ["+cmd|' /C calc'!A0", "Evil", "evil", ""],
                [f"{RTL}علي", "محمد", "mali", ""]],
        roster_file="gradecenter.csv", quoting=csv.QUOTE_ALL, key="Username",
        expected={
            "jdoe": {"Last Name": "'" + FORMULA, "First Name": "Jane", CHAPTER: "4"},
            "JDoe": {"Last Name": "Doe", "First Name": "Jane", CHAPTER: "0"},
            "zhang.wei": {"Last Name": "张", "First Name": "伟", CHAPTER: "0"},
            "aobrien": {"Last Name": "O'Brien, Jr.", "First Name": "Ann Marie", CHAPTER: ""},
            "evil": {"Last Name": "'+cmd|' /C calc'!A0", "First Name": "Evil", CHAPTER: ""},
            "mali": {"Last Name": f"{RTL}علي", "First Name": "محمد", CHAPTER: ""}},
        kept=set()),
}


@dataclass
class Graded:
    lms: str
    download: Download
    out: Path
    db: Path
    written: Path  # the export
    problems: list[str]  # what the export said on stderr


@pytest.fixture(scope="module", params=sorted(DOWNLOADS))
def graded(request, tmp_path_factory) -> Graded:
    """The LMS's download graded with its roster (``make grade --lms LMS --roster FILE``), then
    its import file written (``export --lms LMS``)."""
    lms, download = request.param, DOWNLOADS[request.param]
    folder = tmp_path_factory.mktemp(lms)
    with zipfile.ZipFile(folder / "download.zip", "w") as archive:
        for name, content in download.files.items():
            archive.writestr(name, content if isinstance(content, str)
                             else nbformat.writes(content))
    with open(folder / download.roster_file, "w", newline="", encoding="utf-8") as roster:
        csv.writer(roster, quoting=download.quoting).writerows(download.roster)
    done = graded_class(folder / "download.zip", folder / "out", jobs=1,
                        db=folder / "gradebook.db", roster=folder / download.roster_file,
                        lms=lms).batch
    assert done.gradebook_error is None and done.kernel_error is None
    written, problems = export.export(folder / "out", lms)
    return Graded(lms, download, folder / "out", folder / "gradebook.db", written, problems)


# --- each LMS's importer, as its source reads a file --------------------------------------------

def _canvas_reads(path: Path, key: str) -> dict[str, dict[str, str]]:
    text = path.read_bytes().decode("utf-8")
    first_lines = text.split("\n")[:3]

    def fields(separator: str) -> int:  # as identify_delimiter: the same count on every line
        try:
            counts = {len(next(csv.reader([line], delimiter=separator, strict=True)))
                      for line in first_lines}
        except csv.Error:
            return 0
        return counts.pop() if len(counts) == 1 else 0

    assert fields(",") >= fields(";"), "Canvas would read this file as semicolon-separated"
    header, *rows = csv.reader(io.StringIO(text, newline=""), strict=True)
    assert "Student" in header[0] and "ID" in header[1]
    assert header[2:5] == ["SIS User ID", "SIS Login ID", "Section"]
    points = [row for row in rows if "Points Possible" in row[0]]
    assert len(points) == 1, "Canvas takes every row that names Points Possible for the points"
    students = {}
    for row in rows:
        if "Points Possible" not in row[0]:
            found = row[1] or row[2] or row[3]  # ID, then SIS User ID, then SIS Login ID
            assert found not in students, f"two rows for {found}"
            students[found] = dict(zip(header, row))
    return students


def _fgetcsv(text: str) -> list[list[str]]:
    """Rows as PHP's fgetcsv reads them (comma, enclosure ``"``, escape ``\\``): inside quotes a
    backslash and the character after it are kept as they are (a quote after it does not end
    the field); after the closing quote, the rest up to the comma is kept."""
    rows, i, n = [], 0, len(text)
    while i < n:
        row = []
        while True:
            field = []
            j = i
            while j < n and text[j] in " \t":
                j += 1
            if j < n and text[j] == '"':
                i = j + 1
                while i < n:
                    if text[i] == "\\":
                        field.append(text[i:i + 2])
                        i += 2
                    elif text[i] == '"' and text[i + 1:i + 2] == '"':
                        field.append('"')
                        i += 2
                    elif text[i] == '"':
                        i += 1
                        break
                    else:
                        field.append(text[i])
                        i += 1
            while i < n and text[i] not in ",\n":
                field.append(text[i])
                i += 1
            row.append("".join(field))
            i += 1
            if i > n or text[i - 1] == "\n":
                break
        rows.append(row)
    return rows


def _by_key(header: list[str], rows: list[list[str]], key: str) -> dict[str, dict[str, str]]:
    """Each row as {column: cell}, by its ``key`` column, which no two rows may share."""
    students = {}
    for row in rows:
        cells = dict(zip(header, row))
        assert cells[key] not in students, f"two rows for {cells[key]}"
        students[cells[key]] = cells
    return students


def _moodle_reads(path: Path, key: str) -> dict[str, dict[str, str]]:
    text = path.read_bytes().decode("utf-8").removeprefix("\ufeff")  # Encoding: UTF-8
    text = re.sub(r"\r\n?", "\n", text).strip()
    header, *rows = _fgetcsv(text)
    assert all(len(row) == len(header) for row in rows), "Moodle: csvweirdcolumns"
    return _by_key(header, rows, key)


def _blackboard_reads(path: Path, key: str) -> dict[str, dict[str, str]]:
    lines = re.split(r"\r\n|\r|\n", path.read_bytes().decode("utf-8").rstrip("\r\n"))
    quoted = re.compile(r'"(?:[^"]|"")*"(?:,"(?:[^"]|"")*")*')
    assert all(quoted.fullmatch(line) for line in lines), "a field out of quotes, or a record "\
        "over two lines"
    header, *rows = (next(csv.reader([line], strict=True)) for line in lines)
    assert header[:3] == ["Last Name", "First Name", "Username"]
    return _by_key(header, rows, key)


READERS = {"canvas": _canvas_reads, "moodle": _moodle_reads, "blackboard": _blackboard_reads}


# --- the checks ---------------------------------------------------------------------------------

@pytest.mark.slow
def test_the_export_reads_back_by_its_lms_rules_every_student_once_with_their_lms_ids(graded):
    found = READERS[graded.lms](graded.written, graded.download.key)
    assert set(found) == set(graded.download.expected)
    assert {key: {column: found[key][column] for column in columns}
            for key, columns in graded.download.expected.items()} == graded.download.expected


@pytest.mark.slow
def test_no_csv_the_grader_writes_has_a_cell_a_spreadsheet_evaluates(graded):
    kept = []
    for sheet in (graded.out / "grades.csv", graded.written):
        for row in csv.reader(io.StringIO(sheet.read_text(encoding="utf-8"), newline="")):
            assert all("\n" not in cell and "\r" not in cell for cell in row)
            kept += [cell for cell in row if evaluates(cell)]
    # only the ids the LMS matches students by, as it wrote them, each named on stderr
    assert set(kept) == graded.download.kept
    for cell in graded.download.kept:
        assert any(repr(cell) in problem and "kept as the LMS wrote it" in problem
                   for problem in graded.problems)


@pytest.mark.slow
def test_every_student_once_in_grades_csv_under_a_folder_name_of_their_own(graded):
    with open(graded.out / "grades.csv", encoding="utf-8", newline="") as sheet:
        rows = list(csv.DictReader(sheet))
    students = [row["student"] for row in rows]
    assert len(students) == len(set(students)) == len(graded.download.expected)
    submitted = {row["student"] for row in rows if row["status"] != "missing"}
    assert len(submitted) == sum(1 for name in graded.download.files if name.endswith(".ipynb"))
    for place in (graded.out / "feedback", graded.out / "submitted", graded.out / "autograded",
                  graded.db.parent / "submitted", graded.db.parent / "autograded"):
        folders = [p.name for p in place.iterdir()]
        assert sorted(folders) == sorted(submitted)
        assert len({f.casefold() for f in folders}) == len(folders)  # a disk ignoring case too
        assert all(SAFE_FOLDER.fullmatch(f) for f in folders)


@pytest.mark.slow
def test_no_name_is_markup_in_the_feedback_or_in_formgrader(graded):
    from nbconvert import HTMLExporter
    from nbgrader.api import Gradebook
    from nbgrader.server_extensions.formgrader import handlers
    from traitlets.config import Config

    pages = list((graded.out / "feedback").rglob("*.html"))
    assert pages
    for page in pages:
        html = page.read_text(encoding="utf-8")
        assert not re.search(r"<[^>]*\sonerror\s*=", html) and FORMULA not in html
    # Formgrader's page of a submission, as its SubmissionHandler renders it: nbconvert's
    # formgrade template, which writes the gradebook's names without escaping them
    config = Config()
    config.HTMLExporter.template_name = "formgrade"
    config.HTMLExporter.extra_template_basedirs = [handlers.template_path]
    with Gradebook(f"sqlite:///{graded.db}") as gb:
        students = [(s.id, s.first_name, s.last_name) for s in gb.students]
    assert len(students) == len(pages)
    for student, first, last in students:
        for name in (first, last):
            assert "<" not in name and ">" not in name and not evaluates(name)
            assert all(unicodedata.category(c) not in ("Cc", "Zl", "Zp") for c in name)
        notebook = graded.db.parent / "autograded" / student / CHAPTER / f"{CHAPTER}.ipynb"
        html, _ = HTMLExporter(config=config).from_filename(str(notebook), resources={
            "assignment_id": CHAPTER, "notebook_id": CHAPTER, "submission_id": "1",
            "index": 0, "total": 1, "base_url": "", "student": student, "last_name": last,
            "first_name": first, "notebook_path": str(notebook)})
        assert not re.search(r"<[^>]*\sonerror\s*=", html)


@pytest.mark.slow
def test_export_names_each_id_it_kept_on_stderr(graded, capsys):
    assert cli.main(["export", "--lms", graded.lms, str(graded.out), "--to",
                     str(graded.out / "again.csv")]) == 0
    err = capsys.readouterr().err
    assert all(f"warning: {graded.lms}" not in err and repr(cell) in err
               for cell in graded.download.kept)
    assert (graded.out / "again.csv").read_bytes() == graded.written.read_bytes()
