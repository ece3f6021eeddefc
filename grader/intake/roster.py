"""The class's roster: the LMS's export (or one student a line), matched to the students whose
files were found, by LMS id first, then by name; one roster row to one student, so that two
students are never merged (two names that read alike are matched by id only)."""

from __future__ import annotations

import csv
import io
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from .errors import IntakeError
from .names import comparable_name, folder_key, name_digest, name_forms, person_folder


@dataclass
class Person:
    ids: set = field(default_factory=set)  # as the LMS wrote them
    names: set = field(default_factory=set)
    identity: dict = field(default_factory=dict)


@dataclass
class Member:
    """One student of the roster, as the LMS's export describes them."""
    ids: tuple = ()
    names: tuple = ()  # as the LMS wrote them
    keys: dict = field(default_factory=dict)  # layout -> the name their files would get
    fallback: str = ""
    row: dict = field(default_factory=dict)  # the roster's row, lower-case column names


ID_COLUMNS = ("id", "sis user id", "sis login id", "login id", "username", "student id",
              "id number", "email address", "email")
NAME_COLUMNS = ("student", "full name", "first name", "last name", "identifier", "username")


def read_roster(path: Path) -> list[Member]:
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
        return [Member(ids=(line.strip(),), names=(line.strip(),), fallback=folder_key(line))
                for line in lines]
    # from the header on, as CSV: a quoted name may hold a line break, or start with "#"
    before = text.splitlines(keepends=True)
    start = next(i for i, line in enumerate(before)
                 if line.strip() and not line.lstrip().startswith("#"))
    return _read_csv(path, "".join(before[start:]), delimiter)


def _read_csv(path: Path, text: str, delimiter: str) -> list[Member]:
    rows = csv.DictReader(io.StringIO(text, newline=""), delimiter=delimiter)
    rows.fieldnames = [(f or "").strip().strip('"').lower() for f in rows.fieldnames]
    if not set(rows.fieldnames) & set(ID_COLUMNS + NAME_COLUMNS):
        raise IntakeError(
            f"the roster {path} starts with {text.splitlines()[0].strip()!r}, which names no "
            "column read here: export it from the LMS (Canvas: Student,ID,...; Moodle: "
            "Identifier,Full name or First name,Last name; Blackboard: Last Name,First Name,"
            "Username), or write one student a line")
    members = []
    for row in rows:
        cell = {k: (v or "").strip() for k, v in row.items() if k and isinstance(v, str)}
        if cell.get("student") == "Student, Test" or (
                cell.get("student", "").startswith("Points Possible") and not cell.get("id")):
            continue  # Canvas's built-in test student, and its points row (which has no ID)
        member = _member(cell)
        if member.ids or member.names:
            members.append(member)
    return members


def _member(cell: dict[str, str]) -> Member:
    participant = re.sub(r"\D", "", cell.get("identifier", ""))  # "Participant 4242"
    first, last = cell.get("first name", ""), cell.get("last name", "")
    full = cell.get("full name") or f"{first} {last}".strip()
    student = cell.get("student", "")  # Canvas: "Smith, Jane"
    ids = tuple(cell[c] for c in ID_COLUMNS if cell.get(c)) + ((participant,) if participant
                                                               else ())
    keys = {}
    if student and cell.get("id"):
        keys["canvas"] = person_folder(comparable_name(student), cell["id"])
    if full:
        keys["moodle"] = person_folder(full, participant) if participant else folder_key(full)
    login = cell.get("username") or cell.get("sis login id") or ""
    if login:
        keys["blackboard"] = folder_key(login)
    fallback = login or full or student or (ids[0] if ids else "")
    return Member(ids=ids, names=tuple(filter(None, (student or full,))), keys=keys,
                   fallback=folder_key(fallback) if fallback else "",
                   row={k: v for k, v in cell.items() if v})


def match_roster(members: list[Member], people: dict[str, Person], layout: str,
                  identities: dict[str, dict[str, str]]) -> list[str]:
    """Each roster student under the name their files have, or would have had; what the
    roster's row says of them goes into ``identities``.

    A row and a student are matched only when each is the other's one fit, first by id as the
    LMS wrote it, then by id regardless of case, then by name with accents, then without them:
    "René" on the roster never takes the submission of "Rene", whom the roster names too, and
    "JDoe"'s row never takes "jdoe"'s. A row matched to no one keeps the name its files would
    have had, made distinct from every other student's."""
    members = list({(m.ids, m.names, tuple(sorted(m.row.items()))): m
                    for m in members}.values())  # the same row twice is one student
    found: dict[int, str] = {}
    _pair(members, people, found, lambda m: m.ids, lambda p: p.ids)
    _pair(members, people, found, lambda m: {i.casefold() for i in m.ids},
          lambda p: {i.casefold() for i in p.ids})
    for accents in (True, False):
        def forms(names, accents=accents):
            return {f for name in names for f in name_forms(name, accents=accents)}
        _pair(members, people, found, lambda m: forms(m.names), lambda p: forms(p.names))
    students = []
    taken = {s.casefold(): f"files {s}" for s in people}
    for n, member in enumerate(members):
        student = found.get(n)
        if student is None:
            student = member.keys.get(layout) or member.fallback
            who = "roster " + "|".join(member.ids + member.names)
            if student and taken.setdefault(student.casefold(), who) != who:
                student = f"{student}_{name_digest(who)}"  # another student's name already
                taken[student.casefold()] = who
        if student:
            identities.setdefault(student, {}).update(member.row)
            students.append(student)
    return list(dict.fromkeys(students))


def _pair(members: list[Member], people: dict[str, Person], found: dict[int, str],
          of_member, of_person) -> None:
    """Match the rows and students not matched yet that share a key (``of_member``,
    ``of_person``: a row's keys, a student's), where each is the other's only fit."""
    matched = set(found.values())
    by_key: dict[str, set[str]] = defaultdict(set)
    for student, person in people.items():
        if student not in matched:
            for key in of_person(person):
                by_key[key].add(student)
    fits = {n: set().union(*(by_key.get(key, set()) for key in of_member(member)))
            for n, member in enumerate(members) if n not in found}
    claimed = Counter(student for students in fits.values() for student in students)
    for n, students in fits.items():
        if len(students) == 1 and claimed[next(iter(students))] == 1:
            found[n] = students.pop()
