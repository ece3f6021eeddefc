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
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

from .errors import IntakeError

TAKES = ("on-time", "newest")
EXAMPLE = "2026-12-01T23:59:00+01:00 (or ...Z, or 2026-12-01 23:59 UTC)"


# The zone abbreviations strftime's %Z writes (nbgrader's timestamp.txt, when a site sets
# Exchange.timezone to a local zone), as hours east of UTC; only those that name one offset
# (CST is the US's and China's, IST India's, Ireland's and Israel's: refused, with the advice).
ZONES = {"UTC": 0, "GMT": 0, "Z": 0, "WET": 0, "WEST": 1, "BST": 1, "CET": 1, "CEST": 2,
         "MET": 1, "MEST": 2, "EET": 2, "EEST": 3, "MSK": 3, "SAST": 2, "EAT": 3, "WAT": 1,
         "PKT": 5, "HKT": 8, "SGT": 8, "AWST": 8, "JST": 9, "KST": 9, "ACST": 9.5,
         "ACDT": 10.5, "AEST": 10, "AEDT": 11, "NZST": 12, "NZDT": 13, "HST": -10, "AKST": -9,
         "AKDT": -8, "PST": -8, "PDT": -7, "MST": -7, "MDT": -6, "CDT": -5, "EST": -5,
         "EDT": -4, "AST": -4, "ADT": -3, "NST": -3.5, "NDT": -2.5}
AMBIGUOUS = {"CST": "US Central (-06) or China (+08)", "IST": "India (+05:30), Ireland (+01) "
             "or Israel (+02)"}
# strftime's %Z for a zone without an abbreviation: +03, -0430
NUMERIC_ZONE = re.compile(r"(?P<sign>[+-])(?P<hours>\d\d)(?::?(?P<minutes>\d\d))?")


def parse_time(text: str, what: str) -> datetime.datetime:
    """An ISO 8601 time with its zone: ``Z``, ``+01:00``, or as nbgrader writes it, a space
    and the zone's abbreviation (`` UTC``, `` CET``, `` EDT``) or number (`` +03``)."""
    value = text.strip()
    date, _, zone = value.rpartition(" ")
    offset = _zone_offset(zone, text, what) if date and not zone[:1].isdigit() else None
    if offset is not None:
        value = date
    try:
        when = datetime.datetime.fromisoformat(value)
    except ValueError:
        raise IntakeError(f"{what}: {text!r} is not a time; write it as {EXAMPLE}") from None
    if offset is not None:
        when = when.replace(tzinfo=datetime.timezone(offset))
    if when.tzinfo is None:
        raise IntakeError(f"{what}: {text!r} says no time zone, so it could be any of 25 "
                          f"hours; write it as {EXAMPLE}")
    return when.astimezone(datetime.UTC)


def _zone_offset(zone: str, text: str, what: str) -> datetime.timedelta | None:
    """The offset a zone's abbreviation or number after the time says; None when it is none."""
    numeric = NUMERIC_ZONE.fullmatch(zone)
    if numeric:
        sign = -1 if numeric["sign"] == "-" else 1
        return sign * datetime.timedelta(hours=int(numeric["hours"]),
                                         minutes=int(numeric["minutes"] or 0))
    if zone.upper() in ZONES:
        return datetime.timedelta(hours=ZONES[zone.upper()])
    if zone.upper() in AMBIGUOUS:
        raise IntakeError(f"{what}: {text!r} ends in {zone}, which could be "
                          f"{AMBIGUOUS[zone.upper()]}; write the time with its offset "
                          "(nbgrader: c.Exchange.timezone = 'UTC' writes it in UTC)")
    if zone.isalpha() and zone.isupper():
        raise IntakeError(f"{what}: {text!r} ends in {zone}, a time zone this course does "
                          f"not know; write it as {EXAMPLE}")
    return None


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
