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
place for what was handed in, apart from the grader's own OUT.

In containers every student is the same user (uid 1000), so nbgrader's own check of who
submitted (the file's owner) tells nothing; the folder of one's own is what a hub can vouch
for. A shared inbound without it trusts each submission's name.
"""

from __future__ import annotations

import datetime
import re
import shutil
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from .errors import IntakeError

# nbgrader's name for a submission: <student>+<assignment>+<timestamp>[+<random>]
ENTRY = re.compile(r"(?P<claimed>[^+/]+)\+(?P<chapter>[^+/]+)\+(?P<time>[^+/]+)"
                   r"(?:\+(?P<random>[^+/]+))?")
TIMESTAMP = "timestamp.txt"
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
        match = ENTRY.fullmatch(rel.parts[depth])
        if not match:
            continue
        folder = path.parents[len(rel.parts) - 2 - depth]
        owner = rel.parts[depth - 1] if depth > 0 and rel.parts[depth - 1] != INBOUND else ""
        chapter = next((c for c in chapters if c.lower() == match["chapter"].lower()), None)
        entry = Entry(student=owner or match["claimed"], chapter=chapter,
                      claimed=match["claimed"], folder=folder, owner=owner)
        if owner and match["claimed"] != owner:
            entry.why = (f"claims to be {match['claimed']}'s, but was handed in from "
                         f"{owner}'s server (the hub's login): not graded. Ask {owner} why")
        elif chapter is None:
            entry.why = (f"handed in as {match['chapter']!r}, which is no chapter of the "
                         "course")
        return entry
    return None


def collected_time(path: Path) -> Path | None:
    """``nbgrader collect``'s timestamp.txt beside a notebook (``<student>/<chapter>/``)."""
    stamp = path.parent / TIMESTAMP
    return stamp if stamp.is_file() else None


def submitted_at(stamp: Path) -> datetime.datetime:
    """The time in a ``timestamp.txt`` (nbgrader writes ``2026-11-24 18:11:14.280531 UTC``)."""
    from .deadlines import parse_time

    return parse_time(stamp.read_text().strip(), f"the time in {stamp}")


def copy_inbound(exchange: Path, course_id: str, dest: Path) -> tuple[int, int]:
    """Copy every submission in ``exchange``'s inbound of ``course_id`` that ``dest`` lacks
    (one folder per student kept as it is); return (copied, already there). Submissions are
    never changed once handed in, so one already in ``dest`` is the same."""
    inbound = exchange / course_id / INBOUND
    if not inbound.is_dir():
        raise IntakeError(f"{inbound} does not exist: give the exchange's folder (nbgrader's "
                          "Exchange.root, the hub's HUB_EXCHANGE) and the course id "
                          f"({course_id!r} here); nothing was released there yet?")
    copied = kept = 0
    for entry, rel in _entries(inbound):
        target = dest / rel
        if target.exists():
            kept += 1
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_name(target.name + ".copying")
        shutil.rmtree(partial, ignore_errors=True)
        shutil.copytree(entry, partial)
        partial.rename(target)
        copied += 1
    return copied, kept


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
