"""What nbgrader's exchange received: submissions as ``nbgrader submit`` (a student's Assignments
panel) files them, and as ``nbgrader collect`` lays them out, each with the time nbgrader wrote
in its ``timestamp.txt``.

Layouts read (``grader.intake.downloads`` finds the files and asks :func:`read` of each):

- the exchange's inbound: ``<login>+<chapter>+<time>+<random>/<chapter>.ipynb``, beside
  ``timestamp.txt`` and ``submission_secret.txt`` (what ``fetch_feedback`` needs to find the
  feedback of that submission), every submission of every student;
- the same, one folder per student: ``<login>/<login>+<chapter>+...``, as a hub lays out the
  inbound when it gives each student's server a folder of its own, named after her hub login
  (hub/jupyterhub_config.py). The folder says who she is, whatever her submission's name
  claims: a name that is not the folder's is not graded, and the report says so;
- ``nbgrader collect``'s ``<student>/<chapter>/<chapter>.ipynb`` with its ``timestamp.txt`` (the
  newest submission of each student only).

``make collect`` copies the exchange's inbound into ``collected/`` (:func:`copy_inbound`): the
place for what was handed in, apart from the grader's own OUT. It also records, in
``collected/received.json``, when each submission was last changed in the exchange: the newest
status-change time (ctime) of its folder and files, which the kernel (or the NFS server) sets
and no student can. That record is the submission's time; ``timestamp.txt`` is the student's
own server's word, named in the notes where it disagrees (by more than ``AGREE``). A
submission changed in the exchange after it was collected is not collected again (what was
collected is graded) and ``make collect`` names it. Without the record (grading the exchange
itself, or ``nbgrader collect``'s copy) the times are the students' word alone.

A ``timestamp.txt`` that cannot be read is that submission's problem, never the class's: it is
graded by the record's time, or untimed (no late mark), and its notes say so.

In containers every student is the same user (uid 1000), so nbgrader's own check of who
submitted (the file's owner) tells nothing; the folder of one's own is what a hub can vouch
for. A shared inbound without it trusts each submission's name.
"""

from __future__ import annotations

import datetime
import json
import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from .errors import IntakeError

# nbgrader's name for a submission: <student>+<assignment>+<timestamp>[+<random>]; a login
# may hold "+" itself (alice+ml@uni.edu), and so may the time (a zone written "+03"): the
# chapter, a name of the course's, says where the login ends
ENTRY = re.compile(r"(?P<claimed>[^/]+?)\+(?P<chapter>[^+/]+)\+(?P<time>[^/]+)")
TIMESTAMP = "timestamp.txt"
# make collect's record of when each submission was last changed in the exchange
RECEIVED = "received.json"
# how far timestamp.txt may be from the record before the notes say so: nbgrader writes it,
# then copies the notebook, within a second but on a server under load; the clocks of one
# server, or of an NTP-synced cluster and its NFS server, agree to far less
AGREE = datetime.timedelta(seconds=10)
SECRET = "submission_secret.txt"
# what nbgrader keeps beside a submitted notebook: read here, never graded
RECORDS = (TIMESTAMP, SECRET)
# folders that are the exchange's inbound itself, never a student's own
INBOUND = "inbound"


@dataclass
class Entry:
    """What an exchange submission's path says."""

    student: str  # the login it belongs to: its own folder's, else the name it claims
    chapter: str | None
    claimed: str  # the name nbgrader wrote into the submission's folder name
    folder: Path  # the submission's folder (timestamp.txt, submission_secret.txt)
    owner: str = ""  # the folder of the student's own (a hub's per-student inbound)
    why: str = ""  # not to be graded, and why


def read(rel: PurePosixPath, path: Path, chapters: list[str]) -> Entry | None:
    """The exchange submission ``rel`` (a path under SUBMISSIONS) belongs to, or None when it is
    not inside one."""
    for depth in range(len(rel.parts) - 2, -1, -1):
        parsed = parse_name(rel.parts[depth], chapters)
        if parsed is None:
            continue
        claimed, chapter, said = parsed
        folder = path.parents[len(rel.parts) - 2 - depth]
        owner = rel.parts[depth - 1] if depth > 0 and rel.parts[depth - 1] != INBOUND else ""
        entry = Entry(student=owner or claimed, chapter=chapter, claimed=claimed, folder=folder,
                      owner=owner)
        if owner and claimed != owner:
            entry.why = (f"claims to be {claimed}'s, but was handed in from {owner}'s server "
                         f"(the hub's login): not graded. Ask {owner} why")
        elif chapter is None:
            entry.why = f"handed in as {said!r}, which is no chapter of the course"
        return entry
    return None


def parse_name(name: str, chapters: list[str]) -> tuple[str, str | None, str] | None:
    """(login, chapter or None, the assignment as named) of a submission folder's name, or
    None when it is not one: the login is everything before the first "+<chapter>+" (a login
    may hold "+"), else nbgrader's plain fields."""
    lowered = {c.lower(): c for c in chapters}
    parts = name.split("+")
    for i in range(1, len(parts) - 1):
        if parts[i].lower() in lowered and all(parts[:i]) and parts[i + 1]:
            return "+".join(parts[:i]), lowered[parts[i].lower()], parts[i]
    match = ENTRY.fullmatch(name)
    if not match or "+" in match["chapter"]:
        return None
    return match["claimed"], None, match["chapter"]


def collected_time(path: Path) -> Path | None:
    """``nbgrader collect``'s timestamp.txt beside a notebook (``<student>/<chapter>/``)."""
    stamp = path.parent / TIMESTAMP
    return stamp if stamp.is_file() else None


@dataclass
class Handed:
    """When a submission was handed in, as far as can be told, and why."""

    at: datetime.datetime | None  # None: untimed (no late mark)
    notes: list[str] = field(default_factory=list)


def submitted_at(stamp: Path, received: datetime.datetime | None = None) -> Handed:
    """The time of the submission whose ``timestamp.txt`` is ``stamp`` (nbgrader writes
    ``2026-11-24 18:11:14.280531 UTC``): ``received`` (make collect's record) where there is
    one, and a note where the file disagrees with it; else the file's. A file that is missing
    or says no time is noted, never raised: one student's file stops no one's grade."""
    from .deadlines import parse_time, shown

    claimed, trouble = None, ""
    try:
        text = stamp.read_text(errors="replace").strip()
        claimed = parse_time(text, "its timestamp.txt")
    except OSError as exc:
        trouble = f"its timestamp.txt cannot be read ({exc.strerror or exc})"
    except IntakeError as exc:
        trouble = str(exc).split("; write it")[0]
    if received is None:
        return Handed(claimed, [f"{trouble}: graded untimed (no late mark)"] if trouble else [])
    if claimed is not None and abs(claimed - received) <= AGREE:
        return Handed(received)
    why = trouble or f"its timestamp.txt says {shown(claimed)}"
    return Handed(received, [f"{why}, but it was last changed in the exchange at "
                             f"{shown(received)} (make collect's record): graded as handed in "
                             "then"])


def last_changed(folder: Path) -> datetime.datetime:
    """The newest status-change time of ``folder`` and everything in it: when it was last
    written, renamed or had its times or modes set, which only the kernel (or an NFS server)
    sets."""
    newest = folder.lstat().st_ctime
    for parent, folders, files in os.walk(folder):
        for name in folders + files:
            newest = max(newest, os.lstat(os.path.join(parent, name)).st_ctime)
    return datetime.datetime.fromtimestamp(newest, datetime.UTC)


def received_times(root: Path) -> dict[str, datetime.datetime]:
    """make collect's record in ``root`` (path of a submission under root -> when it was last
    changed in the exchange), or {} where there is none, or where it is not the collecting
    account's (a student can drop a file into a shared inbound, never into collected/)."""
    record = root / RECEIVED
    try:
        if record.stat().st_uid != root.stat().st_uid:
            return {}
        entries = json.loads(record.read_text())
        return {rel: datetime.datetime.fromisoformat(when) for rel, when in entries.items()}
    except (OSError, ValueError, AttributeError, TypeError):
        return {}


@dataclass
class Collected:
    copied: int = 0
    kept: int = 0  # already in the destination
    changed: list[str] = field(default_factory=list)  # ...and changed in the exchange since


def copy_inbound(exchange: Path, course_id: str, dest: Path) -> Collected:
    """Copy every submission in ``exchange``'s inbound of ``course_id`` that ``dest`` lacks
    (one folder per student kept as it is), and record when each was last changed in the
    exchange (``dest/received.json``). nbgrader never changes a submission once handed in (a
    new one is a new folder), so one already in ``dest`` is kept as it was collected; one
    changed in the exchange since then is named in ``changed``."""
    inbound = exchange / course_id / INBOUND
    if not inbound.is_dir():
        raise IntakeError(f"{inbound} does not exist: give the exchange's folder (nbgrader's "
                          "Exchange.root, the hub's HUB_EXCHANGE) and the course id "
                          f"({course_id!r} here); nothing was released there yet?")
    dest.mkdir(parents=True, exist_ok=True)
    received = received_times(dest)
    done = Collected()
    for entry, rel in _entries(inbound):
        target, key = dest / rel, rel.as_posix()
        if target.exists():
            done.kept += 1
            if key in received and last_changed(entry) > received[key]:
                done.changed.append(key)
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_name(target.name + ".copying")
        shutil.rmtree(partial, ignore_errors=True)
        shutil.copytree(entry, partial, symlinks=True)
        partial.rename(target)
        # read again after the copy: a change made while it copied is in the time
        received[key] = last_changed(entry)
        done.copied += 1
    _write_record(dest, received)
    return done


def _write_record(dest: Path, received: dict[str, datetime.datetime]) -> None:
    partial = dest / (RECEIVED + ".writing")
    partial.write_text(json.dumps({rel: when.isoformat() for rel, when in
                                   sorted(received.items())}, indent=1) + "\n")
    partial.replace(dest / RECEIVED)


def _entries(inbound: Path):
    """(folder, path under the inbound) of each submission: at the top, or one level down in a
    student's own folder."""
    for child in sorted(inbound.iterdir()):
        if not child.is_dir():
            continue
        if ENTRY.fullmatch(child.name):
            yield child, child.relative_to(inbound)
            continue
        try:
            inside = sorted(child.iterdir())
        except PermissionError as exc:
            raise IntakeError(f"cannot read {child}: {exc.strerror}; collect as the account "
                              "that owns the exchange (the hub's HUB_COURSE_USER)") from exc
        for entry in inside:
            if entry.is_dir() and ENTRY.fullmatch(entry.name):
                yield entry, entry.relative_to(inbound)
