"""Finding a class's submissions in a folder or an LMS download (over 400 lines: who handed in
what, from LMS file names and rosters, is one concern).

``collect(source, scratch, chapters)`` gives each (student, chapter) one notebook, every file it
did not use with the reason, the layout it recognised and, with a roster, every student of the
class. ``source`` is a folder or a zip; a zip is unpacked under ``scratch`` and nowhere else.

Layouts. ``lms="auto"`` reports the one most files follow and reads each file by the naming it
has; naming a layout reads every file by that one (and ``<student>/<chapter>/`` folders):

- ``exchange``: what nbgrader's exchange received (``<login>+<chapter>+<time>+<random>/``, each
  student's own folder or not), or what ``nbgrader collect`` made of it; read by
  :mod:`grader.intake.exchange`, with each submission's time.
- ``folders``: ``<student>/<chapter>/<chapter>.ipynb`` (any folders above), or a zip of that.
- ``flat``: ``<student>_..._<chapter>.ipynb``: the student is the text before the first ``_``.
- ``canvas``: ``<lastfirst>_<userid>_<submissionid>_<file>``, ``<lastfirst>_LATE_<userid>_...`` when
  late; a file uploaded again under the same name becomes ``<file>-1``, ``-2``... The student is
  ``smithjane_1234``: Canvas's name and user id, so two Jane Smiths stay apart.
- ``moodle``: ``<Full Name>_<participantid>_assignsubmission_file_/<file>`` (a folder per
  student), or that name with the file after it. The student is ``Jane_Doe_4242``.
- ``blackboard``: ``<Assignment>_<username>_attempt_<YYYY-MM-DD-HH-MM-SS>_<file>``, with a receipt
  ``<Assignment>_<username>_attempt_<timestamp>.txt`` per attempt. The student is the username
  (read from the receipt when the username itself holds a ``_``).

A student's folder name (OUT's ``feedback/<student>/``, nbgrader's student id) is made of
``[A-Za-z0-9._-]`` whatever the LMS's name holds (see :mod:`grader.intake.names`): two students
never share one, not even when their names differ only in case or accents, and a name longer
than the disk takes is unpacked under a shorter one and read by its name in the zip.

The chapter comes from the student's file name, whatever its case, a browser's ``(1)`` or a word
added (``01_Broadcast (1).ipynb``, ``broadcast_final.ipynb``, ``06.ipynb``); a name that fits no
chapter or several is skipped as "cannot tell which chapter". When several files give one
student's chapter, the newest wins: Blackboard's attempt timestamp, then Canvas's ``-N``, then
the file's time (in the zip or the folder); the rest are listed as older attempts or duplicates.
Where nbgrader wrote each submission's time, the due dates choose (:mod:`grader.intake.deadlines`):
the newest submission on time, and late ones are marked.

Rosters (``roster=FILE``), matched to the students found by LMS id first, then by name, one row
to one student (see :func:`grader.intake.roster.match_roster`):

- one student a line, as the layout names them (``kim``, ``smithjane_1234``, ``jdoe2``) or an id
  or a full name; blank lines and ``#`` comments are ignored;
- Canvas's gradebook export: ``Student,ID,SIS User ID,SIS Login ID,...`` (``Points Possible`` and
  ``Student, Test`` rows are ignored);
- Moodle's grading worksheet ``Identifier,Full name,...`` (``Participant 4242``), or a participants
  export ``First name,Last name,ID number,Email address,...`` (matched by name);
- Blackboard's Grade Center export ``Last Name,First Name,Username,...``, as CSV or as the
  UTF-16, tab-separated ``.xls`` it downloads.

Students of the roster without a submission keep the name the layout would have given them.
Students who handed in and are on no row of the roster are named in the report and graded.
"""

from __future__ import annotations

import datetime
import hashlib
import os
import re
import tempfile
import time
import zipfile
import zlib
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from . import deadlines, exchange
from .errors import IntakeError
from .names import ascii_only, folder_key, name_digest, one_line, person_folder
from .roster import Person, match_roster, read_roster

LAYOUTS = ("folders", "exchange", "canvas", "moodle", "blackboard", "flat")

CANVAS = re.compile(r"(?P<name>[^_\s/]+)_(?P<late>LATE_)?(?P<id>\d+)_(?P<submission>\d+)_"
                    r"(?P<file>.+)")
MOODLE = re.compile(r"(?P<name>.+)_(?P<id>\d+)_assignsubmission_(?P<plugin>[a-z]+)"
                    r"(?:_(?P<file>.*))?")
BLACKBOARD = re.compile(r"(?P<assignment>.+)_(?P<user>[^_\s]+)_attempt_"
                        r"(?P<time>\d{4}(?:-\d\d){5})(?:_(?P<file>.+)|(?P<receipt>\.txt))")
PATTERNS = {
    "canvas": "<lastfirst>_<userid>_<submissionid>_<file> (Canvas)",
    "moodle": "<Full Name>_<id>_assignsubmission_file_/<file> (Moodle)",
    "blackboard": "<Assignment>_<username>_attempt_<timestamp>_<file> (Blackboard)",
    "folders": "<student>/<chapter>/<chapter>.ipynb",
    "exchange": "[<login>/]<login>+<chapter>+<time>+<random>/<chapter>.ipynb (nbgrader's exchange)",
    "flat": "<student>_..._<chapter>.ipynb",
}


@dataclass
class Submission:
    student: str
    chapter: str
    path: Path
    origin: str  # the file's name as submitted, inside the zip or folder
    # where nbgrader's exchange recorded it: when it was handed in, against the chapter's due
    # date, and the folder with its submission_secret.txt (for its feedback)
    submitted_at: datetime.datetime | None = None
    due: datetime.datetime | None = None
    late: bool | None = None  # None: no time or no due date to tell by
    folder: Path | None = None
    notes: list[str] = field(default_factory=list)  # which attempt was graded, and why


@dataclass
class Skipped:
    name: str
    why: str


@dataclass
class Intake:
    submissions: list[Submission]
    skipped: list[Skipped]
    layout: str
    roster: list[str] | None  # every student of the roster, under the name their files get
    # student -> what the LMS knows of them, from file names and the roster's row (lower-case
    # column names: "id", "student", "sis login id", "identifier", "email address", "username",
    # ...), for sending grades back (grader/trusted/export.py)
    identities: dict[str, dict[str, str]] = field(default_factory=dict)
    # students who handed in and whom no row of the roster names
    unlisted: list[str] = field(default_factory=list)

    def report(self) -> str:
        """What was found and every file that was not used, for the instructor."""
        students = {s.student for s in self.submissions}
        lines = [f"{len(self.submissions)} submissions from {len(students)} students "
                 f"({self.layout} layout), {len(self.skipped)} file(s) not used"]
        lines += [f"  not used: {_printable(s.name)}: {s.why}" for s in self.skipped]
        if self.roster is not None:
            absent = [s for s in self.roster if s not in students]
            lines.append(f"{len(absent)} of {len(self.roster)} students on the roster submitted "
                         f"nothing" + (": " + ", ".join(absent) if absent else ""))
        if self.unlisted:
            lines.append(unlisted_warning(self.unlisted))
        return "\n".join(lines)


def unlisted_warning(students: list[str]) -> str:
    return (f"{len(students)} student{'s' if len(students) > 1 else ''} not on the roster "
            f"handed in: {', '.join(students)} (graded; their rows in grades.csv say so). A "
            "misspelt roster line, a guest, or submissions filed under a wrong name (on a hub, "
            "the server's user instead of the login: docs/hub.md, \"Who handed in\")?")


def _printable(name: str) -> str:
    """A file's name as the terminal shows it: a control character (a line break, an escape
    sequence that would recolour or move the cursor) as its code, ``\\x1b``."""
    return "".join(c if one_line(c) == c else ascii(c)[1:-1] for c in name)


@dataclass
class _Reading:
    """What a file's path says: whose it is, and which chapter or how to tell."""
    student: str = ""
    file: str = ""                    # the student's own file name, to find the chapter in
    chapter: str | None = None        # when the layout says it (folders, flat)
    why: str = ""                     # a reason to skip the file, already known
    preferred: bool = True            # folders: named after the chapter folder it is in
    when: tuple = ("", 0, 0)          # the LMS's order: (attempt timestamp, -N, submission id)
    ids: tuple = ()
    names: tuple = ()                 # the names the LMS gives the student, as it wrote them
    who: str = ""                     # the one student ``student`` was made for, for ``_apart``
    identity: dict = field(default_factory=dict)  # what the file's name says of the student
    at: datetime.datetime | None = None  # when nbgrader recorded it as handed in
    folder: Path | None = None        # the exchange submission it is part of
    record: bool = False              # nbgrader's record of a submission: read, not reported
    notes: list = field(default_factory=list)  # what its time rests on, where that is news


@dataclass
class _Candidate:
    student: str
    chapter: str
    path: Path
    origin: str
    order: tuple
    at: datetime.datetime | None = None
    folder: Path | None = None
    notes: list[str] = field(default_factory=list)


def collect(source: Path, scratch: Path, chapters: list[str], *, lms: str = "auto",
            roster: Path | None = None, due: dict[str, datetime.datetime] | None = None,
            take: str = "on-time") -> Intake:
    """Every (student, chapter) notebook in ``source`` once; see the module docstring. ``due``:
    each chapter's due date; ``take``: which of a student's timed submissions to grade
    (:func:`grader.intake.deadlines.choose`)."""
    if lms != "auto" and lms not in LAYOUTS:
        raise IntakeError(f"unknown LMS layout {lms!r}: use one of auto, {', '.join(LAYOUTS)}")
    members = read_roster(Path(roster)) if roster is not None else None  # before a long unzip
    skipped: list[Skipped] = []
    root, originals = _unpack(Path(source), Path(scratch), skipped)
    files = _listing(root, skipped, originals)
    layout = _recognise(files, chapters) if lms == "auto" else lms
    readers = _READERS[layout]
    if lms == "auto" and layout != "exchange":  # a download merged from several: each file
        readers = tuple(dict.fromkeys(readers + sum(_READERS.values(), ())))  # as it says
    # (in the exchange, a notebook outside a submission's folder is no one's hand-in: named)
    readings = [(rel, path, next(filter(None, (read(rel, path, chapters) for read in readers)),
                                 None)) for rel, path in files]
    _apart([reading for _, _, reading in readings if reading and reading.student])
    candidates: list[_Candidate] = []
    people: dict[str, Person] = defaultdict(Person)
    for rel, path, reading in readings:
        if reading and reading.student:
            people[reading.student].ids.update((reading.student, *reading.ids))
            people[reading.student].names.update(reading.names)
            people[reading.student].identity.update(reading.identity)
        if reading and reading.record:
            continue
        why = _why_unusable(rel, reading, layout)
        chapter = reading.chapter if reading else None
        if not why and chapter is None:
            chapter, why = _chapter_of(reading.file, chapters)
        if why:
            skipped.append(Skipped(rel.as_posix(), why))
            continue
        order = (reading.preferred, reading.when, path.stat().st_mtime, _copy_number(rel.name))
        candidates.append(_Candidate(reading.student, chapter, path, rel.as_posix(), order,
                                     reading.at, reading.folder, reading.notes))
    submissions = _newest(candidates, skipped, due or {}, take)
    identities = {student: dict(person.identity) for student, person in people.items()}
    students = None if members is None else match_roster(members, people, layout, identities)
    unlisted = [] if students is None else \
        sorted({s.student for s in submissions} - set(students))
    return Intake(submissions, sorted(skipped, key=lambda s: s.name), layout, students,
                  identities, unlisted)


def _apart(readings: list[_Reading]) -> None:
    """Give students whose folder names differ only in case (or a name that is another's
    folder name with its digest) each their own: the name and 6 characters of the SHA-256 of
    who they are. A disk that ignores case (macOS, Windows) would otherwise put them in one
    folder."""
    made_for: dict[str, set[str]] = defaultdict(set)
    for reading in readings:
        made_for[reading.student.casefold()].add(reading.who or reading.student)
    for reading in readings:
        if len(made_for[reading.student.casefold()]) > 1:
            reading.student = f"{reading.student}_{name_digest(reading.who or reading.student)}"


def _why_unusable(rel: PurePosixPath, reading: _Reading | None, layout: str) -> str:
    if reading and reading.why:
        return reading.why
    if not rel.name.lower().endswith(".ipynb"):
        if ".ipynb" in rel.name.lower():
            return "not a notebook by its name: rename it to end in .ipynb if it is one"
        if rel.suffix.lower() in (".zip", ".tar", ".gz", ".7z", ".rar"):
            return "an archive inside the download is not opened: unpack it by hand if it holds "\
                   "the notebook"
        return "not a notebook"
    if reading is None:
        return f"its name does not follow {PATTERNS[layout]}"
    if not reading.student:
        return f"no student name in it: expected {PATTERNS['folders']} or {PATTERNS['flat']}"
    return ""


# --- unpacking and listing ----------------------------------------------------------------------

def _unpack(source: Path, scratch: Path,
            skipped: list[Skipped]) -> tuple[Path, dict[str, str]]:
    """The folder to read: ``source`` itself, or where its zip was unpacked under ``scratch``;
    and the names in the zip of the files unpacked under shorter ones (path under the folder ->
    name in the zip)."""
    if source.is_dir():
        return source, {}
    if not source.is_file():
        raise IntakeError(f"SUBMISSIONS {source} does not exist: give the folder of submissions "
                          "or the zip downloaded from the LMS")
    if not zipfile.is_zipfile(source):
        raise IntakeError(f"SUBMISSIONS {source} is neither a folder nor a zip file: give the "
                          "folder of submissions or the zip downloaded from the LMS (if it is "
                          "that zip, the download is incomplete: download it again)")
    scratch.mkdir(parents=True, exist_ok=True)
    target = Path(tempfile.mkdtemp(prefix="unzipped-", dir=scratch))
    originals: dict[str, str] = {}
    try:
        with zipfile.ZipFile(source) as archive:
            unpacked = 0
            for member in archive.infolist():
                unpacked += _extract_alone(archive, member, target, skipped, originals,
                                           room=MAX_UNPACKED_BYTES - unpacked)
    except (zipfile.BadZipFile, zlib.error, EOFError, NotImplementedError, RuntimeError) as exc:
        raise IntakeError(f"SUBMISSIONS {source} is a damaged or unsupported zip ({exc}): download "
                          "it again from the LMS, or unzip it with another tool and give the "
                          "folder") from exc
    return target, originals


# A file name the disk takes (ext4's and most others' limit, in bytes). Moodle's folder per
# student holds the full name: 200 characters of a non-Latin script are 600 bytes.
LONGEST_NAME = 255


def _on_disk(part: str) -> str:
    if len(part.encode("utf-8", "surrogateescape")) <= LONGEST_NAME:
        return part
    return "long-name-" + hashlib.sha256(part.encode("utf-8", "surrogateescape")).hexdigest()[:16]


# A member larger than this is not unpacked: the course's largest notebook, with every output
# and picture, is 0.6 MB. And what a whole download may unpack to, so that a crafted zip cannot
# fill the disk that grading writes to.
MAX_FILE_BYTES = 50 * 2**20
MAX_UNPACKED_BYTES = 16 * 2**30
_CHUNK = 2**20
_S_IFMT, _S_IFLNK = 0o170000, 0o120000


class _Unusable(Exception):
    """A member of the zip that is not unpacked, and why (it goes to the report)."""


def _extract_alone(archive: zipfile.ZipFile, member: zipfile.ZipInfo, target: Path,
                   skipped: list[Skipped], originals: dict[str, str], room: int) -> int:
    """Unpack one member on its own: whatever is wrong with it (a name that clashes with
    another's, a link, a path out of the folder, its size, damaged data) skips it, named with
    the reason, and the rest of the class is read. The bytes it took on disk."""
    try:
        return _extract(archive, member, target, originals, room)
    except _Unusable as why:
        skipped.append(Skipped(member.filename, str(why)))
    except (zipfile.BadZipFile, zlib.error, EOFError) as exc:
        skipped.append(Skipped(member.filename, f"damaged in the zip ({exc}): download the zip "
                               "again, or ask the student for the file"))
    except OSError as exc:
        skipped.append(Skipped(member.filename, f"could not be unpacked ({exc.strerror or exc})"))
    return 0


def _extract(archive: zipfile.ZipFile, member: zipfile.ZipInfo, target: Path,
             originals: dict[str, str], room: int) -> int:
    name = member.filename.replace("\\", "/")
    parts = PurePosixPath(name).parts
    if name.startswith("/") or ".." in parts or re.match(r"[A-Za-z]:", name):
        raise _Unusable("would escape the folder it is unpacked into (an absolute path or ..)")
    if member.is_dir() or not parts:
        return 0
    if (member.external_attr >> 16) & _S_IFMT == _S_IFLNK:
        raise _Unusable("a link, not a file: links in a download are not followed")
    if member.file_size > MAX_FILE_BYTES:
        raise _Unusable(_too_large(member.file_size))
    if member.file_size > room:
        raise _Unusable(f"the download unpacks to more than {MAX_UNPACKED_BYTES // 2**30} GB: "
                        "grade it in parts (a zip per chapter or per section)")
    on_disk = [_on_disk(part) for part in parts]
    dest = target.joinpath(*on_disk)
    clash = next((up for up in reversed(dest.parents) if up.is_relative_to(target)
                  and up != target and up.is_file()), None)
    if clash is not None:
        raise _Unusable(f"its folder {clash.relative_to(target).as_posix()} is also a file in "
                        "the zip: the file is used")
    if dest.is_dir():
        raise _Unusable("a folder of the same name is in the zip: the folder is used")
    if dest.exists():
        raise _Unusable("a second entry of the same name in the zip: the first one is used")
    if on_disk != list(parts):  # read by the name in the zip, kept on disk under a shorter one
        originals["/".join(on_disk)] = "/".join(parts)
    dest.parent.mkdir(parents=True, exist_ok=True)
    written = _copy_at_most(archive, member, dest, min(MAX_FILE_BYTES, room))
    stamp = time.mktime((*member.date_time, 0, 0, -1))  # the newest attempt may be told by it
    os.utime(dest, (stamp, stamp))
    return written


def _copy_at_most(archive: zipfile.ZipFile, member: zipfile.ZipInfo, dest: Path,
                  limit: int) -> int:
    """Copy the member to ``dest``, never more than ``limit`` bytes whatever its header says."""
    written = 0
    try:
        with archive.open(member) as data, open(dest, "wb") as out:
            while chunk := data.read(_CHUNK):
                written += len(chunk)
                if written > limit:
                    raise _Unusable(_too_large(written))
                out.write(chunk)
    except BaseException:
        dest.unlink(missing_ok=True)
        raise
    return written


def _too_large(size: int) -> str:
    return (f"{size / 2**20:.0f} MB or more, larger than the {MAX_FILE_BYTES // 2**20} MB a "
            "notebook may be: ask the student to clear its outputs (Edit > Clear Outputs of "
            "All Cells) and hand it in again")


def _listing(root: Path, skipped: list[Skipped],
             originals: dict[str, str]) -> list[tuple[PurePosixPath, Path]]:
    """Every file under ``root`` but the operating systems' and Jupyter's own, each by its name
    in the download (``originals``: the names of those kept under shorter ones)."""
    files = []
    inside = root.resolve()
    for path in sorted(root.rglob("*")):
        on_disk = path.relative_to(root).as_posix()
        rel = PurePosixPath(originals.get(on_disk, on_disk))
        if path.is_dir() or rel.as_posix() == exchange.RECEIVED:  # make collect's record
            continue
        if "__MACOSX" in rel.parts or rel.name.startswith("._") or rel.name == ".DS_Store":
            why = "macOS's own file, not a submission"
        elif ".ipynb_checkpoints" in rel.parts:
            why = "Jupyter's checkpoint copy, not the submission"
        elif not path.resolve().is_relative_to(inside):
            why = "a link to outside the submissions folder"
        elif not path.is_file():
            why = "not a file (a pipe, a device, a socket or a link to nothing)"
        elif (size := path.stat().st_size) > MAX_FILE_BYTES:
            why = _too_large(size)
        else:
            files.append((rel, path))
            continue
        skipped.append(Skipped(rel.as_posix(), why))
    return files


def _recognise(files: list[tuple[PurePosixPath, Path]], chapters: list[str]) -> str:
    """The LMS whose names most files have; else folders or flat."""
    shapes = {
        "blackboard": lambda rel: BLACKBOARD.fullmatch(rel.name),
        "moodle": lambda rel: any(MOODLE.fullmatch(p) for p in rel.parts),
        "canvas": lambda rel: CANVAS.fullmatch(rel.name),
    }
    if any(exchange.ENTRY.fullmatch(part) for rel, _ in files for part in rel.parts[:-1]):
        return "exchange"
    counts = {lms: sum(1 for rel, _ in files if shape(rel)) for lms, shape in shapes.items()}
    best = max(counts, key=counts.get)  # ties: Blackboard, then Moodle (the stricter names)
    if counts[best]:
        return best
    if any(_read_folders(rel, path, chapters) for rel, path in files):
        return "folders"
    return "flat"


# --- reading a file's path, one layout each ------------------------------------------------------

def _read_canvas(rel: PurePosixPath, path: Path, chapters: list[str]) -> _Reading | None:
    match = CANVAS.fullmatch(rel.name)
    if not match:
        return None
    file, again = match["file"], 0
    numbered = re.fullmatch(r"(?P<stem>.+)-(?P<n>\d+)(?P<ext>\.[^.]+)", file)
    if numbered:  # Canvas's name for a file uploaded again
        file, again = numbered["stem"] + numbered["ext"], int(numbered["n"])
    return _Reading(student=person_folder(match["name"], match["id"]), file=file,
                    when=("", again, int(match["submission"])), ids=(match["id"],),
                    names=(match["name"],), who=f"canvas {match['id']}",
                    identity={"id": match["id"], "student": match["name"]})


def _read_moodle(rel: PurePosixPath, path: Path, chapters: list[str]) -> _Reading | None:
    for index, part in enumerate(rel.parts):
        match = MOODLE.fullmatch(part)
        if match and (match["file"] or index < len(rel.parts) - 1):
            return _Reading(student=person_folder(match["name"], match["id"]),
                            file=match["file"] or rel.name, ids=(match["id"],),
                            names=(match["name"],), who=f"moodle {match['id']}",
                            identity={"identifier": f"Participant {match['id']}",
                                      "full name": match["name"]})
    return None


def _read_blackboard(rel: PurePosixPath, path: Path, chapters: list[str]) -> _Reading | None:
    match = BLACKBOARD.fullmatch(rel.name)
    if not match:
        return None
    user, names = match["user"], ()
    prefix = rel.name[: match.end("time")]
    receipt = _receipt_name(path.with_name(prefix + ".txt"))
    if receipt and prefix.endswith(f"_{receipt[1]}_attempt_{match['time']}"):
        user, names = receipt[1], (receipt[0],)  # a username with "_" in it
    reading = _Reading(student=folder_key(user), file=match["file"] or "", ids=(user,), names=names,
                       when=(match["time"], 0, 0), who=f"blackboard {user}",
                       identity={"username": user, **({"full name": receipt[0]}
                                                      if receipt else {})})
    if match["receipt"]:
        reading.why = "Blackboard's receipt for this attempt, not a notebook"
    return reading


def _receipt_name(receipt: Path) -> tuple[str, str] | None:
    """(full name, username) from a Blackboard receipt's ``Name: Jane Doe (jdoe2)`` line."""
    try:
        text = receipt.read_text(errors="replace")
    except OSError:
        return None
    match = re.search(r"^Name:\s*(.+?)\s*\(([^()\s]+)\)\s*$", text, re.MULTILINE)
    return (match[1], match[2]) if match else None


def _read_exchange(rel: PurePosixPath, path: Path, chapters: list[str]) -> _Reading | None:
    entry = exchange.read(rel, path, chapters)
    if entry is None:
        return None
    reading = _Reading(student=folder_key(entry.student), chapter=entry.chapter, file=rel.name,
                       ids=(entry.student,), names=(entry.student,),
                       who=f"login {entry.student}", folder=entry.folder,
                       record=rel.name in exchange.RECORDS, why=entry.why,
                       identity={"username": entry.student})
    if entry.chapter is not None:
        reading.preferred = _chapter_of(rel.name, chapters)[0] == entry.chapter
    stamp = entry.folder / exchange.TIMESTAMP
    root = path.parents[len(rel.parts) - 1]
    received = _received(root).get(entry.folder.relative_to(root).as_posix())
    if (stamp.is_file() or received) and not reading.record:
        _timed(reading, exchange.submitted_at(stamp, received))
    return reading


def _timed(reading: _Reading, handed: exchange.Handed) -> None:
    reading.at, reading.notes = handed.at, handed.notes
    if handed.at is not None:
        reading.when = (handed.at.isoformat(), 0, 0)


# make collect's record, read once a run of intake: (root, the record's mtime) -> its times
_RECORDS: dict[tuple, dict] = {}


def _received(root: Path) -> dict[str, datetime.datetime]:
    try:
        key = (root, (root / exchange.RECEIVED).stat().st_mtime_ns)
    except OSError:
        return {}
    if key not in _RECORDS:
        _RECORDS.clear()
        _RECORDS[key] = exchange.received_times(root)
    return _RECORDS[key]


def _read_folders(rel: PurePosixPath, path: Path, chapters: list[str]) -> _Reading | None:
    if len(rel.parts) < 3:
        return None
    chapter = next((c for c in chapters if c.lower() == rel.parts[-2].lower()), None)
    if chapter is None:
        return None
    student = rel.parts[-3]
    reading = _Reading(student=folder_key(student), chapter=chapter, file=rel.name,
                       preferred=_chapter_of(rel.name, chapters)[0] == chapter,
                       ids=(student,), names=(student,), who=f"folder {student}",
                       record=rel.name in exchange.RECORDS)
    stamp = exchange.collected_time(path)
    if stamp is not None and not reading.record:  # nbgrader collect's layout
        _timed(reading, exchange.submitted_at(stamp))
        reading.folder = path.parent
    return reading


def _read_flat(rel: PurePosixPath, path: Path, chapters: list[str]) -> _Reading | None:
    if not rel.name.lower().endswith(".ipynb"):
        return None
    found = _find_chapter(_tokens(rel.name), chapters)
    if not isinstance(found, tuple):
        return _Reading(why=found or "cannot tell which chapter from its name")
    chapter, start = found
    if start > 0:
        student = rel.name.split("_")[0]
    else:
        student = rel.parts[-2] if len(rel.parts) > 1 else ""
    return _Reading(student=folder_key(student) if student.strip() else "", chapter=chapter,
                    ids=(student,), names=(student,), who=f"folder {student}")


_READERS = {  # the stricter names first
    "exchange": (_read_exchange, _read_folders),
    "blackboard": (_read_blackboard, _read_folders),
    "moodle": (_read_moodle, _read_folders),
    "canvas": (_read_canvas, _read_folders),
    "folders": (_read_folders, _read_flat),
    "flat": (_read_folders, _read_flat),
}


# --- which chapter a file name means --------------------------------------------------------------

def _tokens(name: str) -> list[str]:
    stem = re.sub(r"\.ipynb$", "", name, flags=re.IGNORECASE)
    stem = re.sub(r"\s*\(\d+\)$", "", stem)  # a browser's second copy: "name (1)"
    return [t for t in re.split(r"[^a-z0-9]+", ascii_only(stem).lower()) if t]


def _number(token: str) -> int | None:
    return int(token) if token.isdigit() and len(token) <= 2 else None


def _find_chapter(tokens: list[str], chapters: list[str]) -> tuple[str, int] | str:
    """(chapter, where its name starts in ``tokens``), or why none can be told ("" for none)."""
    hits = []
    for chapter in chapters:
        number, *words = chapter.lower().split("_")
        for start in range(len(tokens) - len(words) + 1):
            if tokens[start:start + len(words)] == words:
                numbered = start > 0 and _number(tokens[start - 1]) == int(number)
                hits.append((chapter, start - numbered, start + len(words)))
    # "reduce" inside "all_reduce" is not a second chapter
    hits = [h for h in hits if not any(o[0] != h[0] and o[1] <= h[1] and h[2] <= o[2]
                                       for o in hits)]
    named = sorted({h[0] for h in hits})
    if len(named) > 1:
        return f"cannot tell which chapter: its name fits {' and '.join(named)}"
    if not named:
        return ""
    chapter, begin, _ = next(h for h in hits if h[0] == named[0])
    other = _number(tokens[begin - 1]) if begin > 0 else None
    numbers = {int(c.split("_")[0]): c for c in chapters}
    if other is not None and other in numbers and numbers[other] != chapter:
        return (f"cannot tell which chapter: its number says {numbers[other]}, "
                f"its name {chapter}")
    return chapter, begin


def _chapter_of(name: str, chapters: list[str]) -> tuple[str | None, str]:
    """(chapter, "") for a student's file name, or (None, why not)."""
    tokens = _tokens(name)
    found = _find_chapter(tokens, chapters)
    if isinstance(found, tuple):
        return found[0], ""
    if found:
        return None, found
    numbers = {int(c.split("_")[0]): c for c in chapters}
    if tokens and _number(tokens[0]) in numbers:  # "06.ipynb", "6_mine.ipynb"
        return numbers[_number(tokens[0])], ""
    return None, "cannot tell which chapter from its name"


# --- one notebook per student and chapter -------------------------------------------------------

def _copy_number(name: str) -> int:
    match = re.search(r"\((\d+)\)\.[^.]*$", name)
    return int(match[1]) if match else 0


def _newest(candidates: list[_Candidate], skipped: list[Skipped],
            due: dict[str, datetime.datetime], take: str) -> list[Submission]:
    """One submission per (student, chapter): by the due date where nbgrader recorded the
    times (:func:`grader.intake.deadlines.choose`), else the newest by intake's order."""
    groups: dict[tuple[str, str], list[_Candidate]] = defaultdict(list)
    for candidate in candidates:
        groups[(candidate.student, candidate.chapter)].append(candidate)
    chosen = []
    for (student, chapter), group in sorted(groups.items()):
        ordered = sorted(group, key=lambda c: c.order, reverse=True)
        named = [c for c in ordered if c.order[0] == ordered[0].order[0]]  # after the chapter
        choice = deadlines.choose([c.at for c in named], due.get(chapter), take)
        winner = named[choice.index]
        chosen.append(Submission(student, chapter, winner.path, winner.origin, winner.at,
                                 due.get(chapter), choice.late, winner.folder,
                                 winner.notes + choice.notes))
        for other in ordered:
            if other is winner:
                continue
            if _digest(other.path) == _digest(winner.path):
                why = f"duplicate of {winner.origin}"
            elif other.order[0] < winner.order[0]:
                why = f"not named after {chapter} (graded: {winner.origin})"
            elif other.at is not None and winner.at is not None and other.at > winner.at:
                why = (f"later attempt of {student}/{chapter}, handed in after the due date "
                       f"(graded: {winner.origin}, on time)")
            else:
                why = f"older attempt of {student}/{chapter} (graded: {winner.origin})"
            skipped.append(Skipped(other.origin, why))
    return chosen


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


