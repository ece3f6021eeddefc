"""The class's roster: the LMS's export (or one student a line), matched to the students whose
files were found, by LMS id first, then by name."""

from __future__ import annotations

import csv
import re
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from .errors import IntakeError
from .names import _name_forms, _norm, _person, _safe


@dataclass
class _Person:
    ids: set = field(default_factory=set)
    names: set = field(default_factory=set)
    identity: dict = field(default_factory=dict)


@dataclass
class _Member:
    """One student of the roster, as the LMS's export describes them."""
    ids: tuple = ()
    names: tuple = ()
    keys: dict = field(default_factory=dict)  # layout -> the name their files would get
    fallback: str = ""
    row: dict = field(default_factory=dict)  # the roster's row, lower-case column names


ID_COLUMNS = ("id", "sis user id", "sis login id", "login id", "username", "student id",
              "id number", "email address", "email")
NAME_COLUMNS = ("student", "full name", "first name", "last name", "identifier", "username")


def _read_roster(path: Path) -> list[_Member]:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise IntakeError(f"cannot read the roster {path} ({exc.strerror}): give a text file "
                          "with one student a line, or the LMS's CSV export") from exc
    if data[:2] in (b"\xff\xfe", b"\xfe\xff"):
        text = data.decode("utf-16")  # Blackboard's Grade Center download
    elif b"\x00" in data:
        raise IntakeError(f"the roster {path} is not a text file (a spreadsheet?): save it as "
                          "CSV, or write one student a line")
    else:
        try:
            text = data.decode("utf-8-sig")
        except UnicodeDecodeError:
            text = data.decode("cp1252", errors="replace")
    lines = [line for line in text.splitlines()
             if line.strip() and not line.lstrip().startswith("#")]
    if not lines:
        raise IntakeError(f"the roster {path} names no student: write one student a line, or "
                          "give the LMS's CSV export")
    delimiter = max(",\t;", key=lines[0].count)
    if delimiter not in lines[0]:
        if lines[0].strip().strip('"').lower() in ID_COLUMNS + NAME_COLUMNS:
            lines = lines[1:]  # a one-column export: "Username", then one a line
        return [_Member(ids=(line.strip(),), names=_name_forms(line),
                        fallback=_safe(line)) for line in lines]
    return _read_csv(path, lines, delimiter)


def _read_csv(path: Path, lines: list[str], delimiter: str) -> list[_Member]:
    rows = csv.DictReader(lines, delimiter=delimiter)
    rows.fieldnames = [(f or "").strip().strip('"').lower() for f in rows.fieldnames]
    if not set(rows.fieldnames) & set(ID_COLUMNS + NAME_COLUMNS):
        raise IntakeError(
            f"the roster {path} starts with {lines[0].strip()!r}, which names no column read "
            "here: export it from the LMS (Canvas: Student,ID,...; Moodle: Identifier,Full name "
            "or First name,Last name; Blackboard: Last Name,First Name,Username), or write one "
            "student a line")
    members = []
    for row in rows:
        cell = {k: (v or "").strip() for k, v in row.items() if k}
        if cell.get("student", "").startswith("Points Possible") or \
                cell.get("student") == "Student, Test":
            continue  # Canvas's points row and its built-in test student
        member = _member(cell)
        if member.ids or member.names:
            members.append(member)
    return members


def _member(cell: dict[str, str]) -> _Member:
    participant = re.sub(r"\D", "", cell.get("identifier", ""))  # "Participant 4242"
    first, last = cell.get("first name", ""), cell.get("last name", "")
    full = cell.get("full name") or f"{first} {last}".strip()
    student = cell.get("student", "")  # Canvas: "Smith, Jane"
    names = _name_forms(student or full)
    ids = tuple(cell[c] for c in ID_COLUMNS if cell.get(c)) + ((participant,) if participant
                                                               else ())
    keys = {}
    if student and cell.get("id"):
        keys["canvas"] = _person(_norm(student), cell["id"])
    if full:
        keys["moodle"] = _person(full, participant)
    login = cell.get("username") or cell.get("sis login id") or ""
    if login:
        keys["blackboard"] = _safe(login)
    fallback = _safe(login or full or student or (ids[0] if ids else ""))
    return _Member(ids=ids, names=names, keys=keys, fallback=fallback,
                   row={k: v for k, v in cell.items() if v})


def _match_roster(members: list[_Member], people: dict[str, _Person], layout: str,
                  identities: dict[str, dict[str, str]]) -> list[str]:
    """Each roster student under the name their files have, or would have had; what the
    roster's row says of them goes into ``identities``."""
    by_id = {i: student for student, person in people.items() for i in person.ids}
    by_name: dict[str, set[str]] = defaultdict(set)
    for student, person in people.items():
        for name in person.names:
            by_name[name].add(student)
    students = []
    for member in members:
        found = next((by_id[i.lower()] for i in member.ids if i.lower() in by_id), None)
        if found is None:
            fits = set().union(*(by_name.get(n, set()) for n in member.names))
            found = fits.pop() if len(fits) == 1 else None  # two Jane Does: by id only
        student = found or member.keys.get(layout) or member.fallback
        if student:
            identities.setdefault(student, {}).update(member.row)
        students.append(student)
    return list(dict.fromkeys(s for s in students if s))
