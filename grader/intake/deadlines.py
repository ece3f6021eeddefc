"""Due dates, and which of a student's submissions of a chapter is graded.

A chapter's due date is ``--due`` when given (one time for every chapter of the run), else the
chapter's line in ``grader/course.toml``'s ``[due]`` table, else none. A submission whose time
is known (nbgrader's ``timestamp.txt``) is late when it was handed in after its chapter's due
date. Of a student's submissions of a chapter the newest on time is graded; when all are late,
the newest, marked late. ``take="newest"`` grades the newest whatever its time (still marked
late when it is). Submissions without a time (LMS downloads, plain folders) keep intake's own
order: the newest attempt by the LMS's word, or by the file's time, and no late mark (the LMS
applies its own deadline: a Canvas download marks late files ``LATE_``).
"""

from __future__ import annotations

import datetime
import tomllib
from dataclasses import dataclass
from pathlib import Path

from .errors import IntakeError

TAKES = ("on-time", "newest")
EXAMPLE = "2026-12-01T23:59:00+01:00 (or ...Z, or 2026-12-01 23:59 UTC)"


def parse_time(text: str, what: str) -> datetime.datetime:
    """An ISO 8601 time with its zone (``Z``, ``+01:00`` or `` UTC``, as nbgrader writes)."""
    value = text.strip()
    if value.upper().endswith(" UTC"):
        value = value[:-4] + "+00:00"
    try:
        when = datetime.datetime.fromisoformat(value)
    except ValueError:
        raise IntakeError(f"{what}: {text!r} is not a time; write it as {EXAMPLE}") from None
    if when.tzinfo is None:
        raise IntakeError(f"{what}: {text!r} says no time zone, so it could be any of 25 "
                          f"hours; write it as {EXAMPLE}")
    return when.astimezone(datetime.UTC)


def due_dates(chapters: list[str], due: str | None,
              config: Path | None) -> dict[str, datetime.datetime]:
    """Each chapter's due date: ``due`` for all of them, else ``config``'s ``[due]`` table."""
    if due:
        when = parse_time(due, "--due")
        return dict.fromkeys(chapters, when)
    if config is None or not config.exists():
        return {}
    try:
        table = tomllib.loads(config.read_text()).get("due", {})
    except tomllib.TOMLDecodeError as exc:
        raise IntakeError(f"{config} cannot be read: {exc}") from None
    unknown = sorted(set(table) - set(chapters))
    if unknown:
        raise IntakeError(f"{config}: [due] names {', '.join(unknown)}, which no chapter of "
                          f"solutions/ is; use the chapters' folder names ({chapters[0]}, ...)")
    dates = {}
    for chapter, value in table.items():
        if isinstance(value, datetime.datetime):
            if value.tzinfo is None:
                raise IntakeError(f"{config}: the due date of {chapter} says no time zone; "
                                  f"write it as {EXAMPLE}")
            dates[chapter] = value.astimezone(datetime.UTC)
        else:
            dates[chapter] = parse_time(str(value), f"{config}, the due date of {chapter}")
    return dates


def late_by(when: datetime.datetime | None, due: datetime.datetime | None) -> float | None:
    """Seconds after the due date (0 or less: on time); None when either is unknown."""
    if when is None or due is None:
        return None
    return (when - due).total_seconds()


def duration(seconds: float) -> str:
    """``2 d 3 h``, ``3 h 5 min``, ``12 min``, ``40 s``."""
    seconds = int(round(seconds))
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days} d {hours} h"
    if hours:
        return f"{hours} h {minutes} min"
    return f"{minutes} min" if minutes else f"{secs} s"


def shown(when: datetime.datetime) -> str:
    return when.strftime("%Y-%m-%d %H:%M:%S UTC")


@dataclass
class Choice:
    """The attempt graded (its index in the attempts given), and what the notes say."""

    index: int
    late: bool | None
    notes: list[str]


def choose(times: list[datetime.datetime | None], due: datetime.datetime | None,
           take: str = "on-time") -> Choice:
    """Which of one student's attempts at a chapter to grade (``times``: each attempt's time,
    None where unknown; the attempts come newest first by intake's own order)."""
    if take not in TAKES:
        raise IntakeError(f"unknown --take {take!r}: use one of {', '.join(TAKES)}")
    timed = [(when, n) for n, when in enumerate(times) if when is not None]
    if not timed:
        return Choice(0, None, [])
    timed.sort(reverse=True)
    newest = timed[0]
    on_time = [(when, n) for when, n in timed if due is None or when <= due]
    chosen = on_time[0] if on_time and take == "on-time" else newest
    when, index = chosen
    notes = []
    over = late_by(when, due)
    late = None if over is None else over > 0
    if late:
        notes.append(f"late: handed in {shown(when)}, {duration(over)} after the due date "
                     f"{shown(due)}")
    if len(timed) > 1:
        later = [w for w, _ in timed if w > when]
        notes.append(f"{len(timed)} submissions; graded the one of {shown(when)}"
                     + (f", not the {len(later)} later one{'s' if len(later) > 1 else ''}, "
                        "handed in after the due date" if later else ", the newest"))
    return Choice(index, late, notes)
