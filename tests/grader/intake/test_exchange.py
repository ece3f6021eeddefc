"""What nbgrader's exchange received, graded: submissions made by nbgrader's own submit code
into each student's inbound folder (as a hub mounts it), collected, read with their times
against due dates (the newest on time, late ones marked, a forged name refused, a student off
the roster named), graded, and the feedback released and fetched by nbgrader's own code, each
student her own page; then a second run a week later. tests/system/test_hub.py does the same
through a real hub."""

from __future__ import annotations

import datetime
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest

from grader import course
from grader.intake import IntakeError, collect
from grader.intake.deadlines import choose, due_dates, parse_time
from grader.intake.exchange import AGREE, copy_inbound, parse_name, received_times, submitted_at
from grader.trusted.exchange_feedback import OWN_FEEDBACK
from support import class_factory
from support.course_copy import ROOT
from support.exchange import COURSE_ID, Exchange
from support.grading import read_grades

CHAPTER = "01_broadcast"
UTC = datetime.UTC


def _at(minute: int) -> datetime.datetime:
    return datetime.datetime(2026, 12, 1, 23, minute, tzinfo=UTC)


# --- due dates and the choice among attempts ----------------------------------------------------

def test_times_need_their_zone_and_read_as_nbgrader_writes_them():
    assert parse_time("2026-11-24 18:11:14.280531 UTC", "t") == \
        datetime.datetime(2026, 11, 24, 18, 11, 14, 280531, tzinfo=UTC)
    assert parse_time("2026-12-02T00:59:00+01:00", "t") == _at(59)
    with pytest.raises(IntakeError, match="says no time zone"):
        parse_time("2026-12-01T23:59", "--due")
    with pytest.raises(IntakeError, match="is not a time"):
        parse_time("friday", "--due")


@pytest.mark.parametrize("zone", ["Europe/Berlin", "America/New_York", "Asia/Dubai",
                                  "Australia/Adelaide", "Europe/London", "UTC"])
@pytest.mark.parametrize("month", [1, 7])
def test_times_read_as_nbgrader_writes_them_in_a_local_zone(zone, month):
    """nbgrader's Exchange.timezone set to a local zone: timestamp.txt ends in the zone's
    abbreviation (CET, CEST, EDT, ACDT, BST) or number (+04), summer and winter."""
    from zoneinfo import ZoneInfo

    from nbgrader.exchange.abc.exchange import Exchange as NbgraderExchange

    written = datetime.datetime(2026, month, 3, 12, 30, 15, 250000, tzinfo=ZoneInfo(zone))
    text = written.strftime(NbgraderExchange.timestamp_format.default_value)
    assert parse_time(text, "timestamp.txt") == written


def test_a_zone_abbreviation_of_several_zones_is_refused_with_the_cure():
    with pytest.raises(IntakeError, match=r"could be India .*c\.Exchange\.timezone = 'UTC'"):
        parse_time("2026-12-01 23:59:00.000 IST", "timestamp.txt")
    with pytest.raises(IntakeError, match="ends in XYZT, a time zone this course does not know"):
        parse_time("2026-12-01 23:59:00.000 XYZT", "timestamp.txt")


def test_due_dates_come_from_the_flag_or_the_course_configuration(tmp_path):
    chapters = ["01_broadcast", "02_scatter"]
    config = tmp_path / "course.toml"
    config.write_text('[due]\n01_broadcast = 2026-12-01T23:59:00Z\n'
                      '02_scatter = "2026-12-08 23:59 UTC"\n')
    dates = due_dates(chapters, None, config)
    assert dates == {"01_broadcast": _at(59),
                     "02_scatter": datetime.datetime(2026, 12, 8, 23, 59, tzinfo=UTC)}
    assert due_dates(chapters, "2026-12-01T23:00Z", config) == dict.fromkeys(chapters, _at(0))
    assert due_dates(chapters, None, tmp_path / "none.toml") == {}
    config.write_text("[due]\n01_broadcst = 2026-12-01T23:59:00Z\n")
    with pytest.raises(IntakeError, match="01_broadcst, which no chapter"):
        due_dates(chapters, None, config)
    config.write_text("[due]\n01_broadcast = 2026-12-01T23:59:00\n")
    with pytest.raises(IntakeError, match="says no time zone"):
        due_dates(chapters, None, config)


def test_the_course_configuration_names_only_chapters():
    due_dates(course.chapters(), None, course.COURSE_CONFIG)


def test_the_newest_on_time_is_graded_unless_told_otherwise():
    due = _at(30)
    # newest first by intake's order; one late
    times = [_at(40), _at(20), _at(10)]
    chosen = choose(times, due)
    assert (chosen.index, chosen.late) == (1, False)
    assert "not the 1 later one, handed in after the due date" in chosen.notes[-1]
    newest = choose(times, due, "newest")
    assert (newest.index, newest.late) == (0, True)
    assert newest.notes[0].startswith("late: handed in 2026-12-01 23:40:00 UTC, 10 min after")
    only_late = choose([_at(45), _at(35)], due)
    assert (only_late.index, only_late.late) == (0, True)
    assert choose([_at(10)], None).late is None  # no due date: no late mark
    assert choose([None], due).late is None  # no time: intake's own order
    with pytest.raises(IntakeError, match="unknown --take"):
        choose(times, due, "oldest")


# --- the exchange's layouts -------------------------------------------------------------------

@pytest.fixture(scope="module")
def handed_in(tmp_path_factory):
    """A chapter released and handed in through the exchange: alice on time; bob on time twice
    (untouched, then right); carol on time (untouched), then late (right); dave late only; erin,
    not on the roster, on time; mallory's server hands in under alice's name."""
    folder = tmp_path_factory.mktemp("exchange")
    exchange = Exchange(folder / "exchange", folder / "homes")
    exchange.release(CHAPTER)
    right, untouched = class_factory.correct(CHAPTER), class_factory.release(CHAPTER)
    times = {"alice": [exchange.submit("alice", CHAPTER, right)],
             "bob": [exchange.submit("bob", CHAPTER, untouched),
                     exchange.submit("bob", CHAPTER, right)],
             "carol": [exchange.submit("carol", CHAPTER, untouched)],
             "erin": [exchange.submit("erin", CHAPTER, untouched)]}
    exchange.submit("mallory", CHAPTER, right, claimed="alice")
    time.sleep(0.01)
    due = datetime.datetime.now(UTC)
    time.sleep(0.01)
    times["carol"].append(exchange.submit("carol", CHAPTER, right))
    times["dave"] = [exchange.submit("dave", CHAPTER, right)]
    roster = folder / "roster.txt"
    roster.write_text("alice\nbob\ncarol\ndave\nmallory\nfrank\n")
    return exchange, times, due, roster, folder


def test_make_collect_copies_new_submissions_only(handed_in, tmp_path):
    exchange, times, *_ = handed_in
    first = copy_inbound(exchange.root, COURSE_ID, tmp_path / "collected")
    assert (first.copied, first.kept, first.changed) == (8, 0, [])
    again = copy_inbound(exchange.root, COURSE_ID, tmp_path / "collected")
    assert (again.copied, again.kept, again.changed) == (0, 8, [])
    # when each was last changed in the exchange: after nbgrader's timestamp, within a second
    record = received_times(tmp_path / "collected")
    assert len(record) == 8
    dave = next(when for rel, when in record.items() if rel.startswith("dave/"))
    stamped = parse_time(times["dave"][0], "t")
    assert datetime.timedelta(0) <= dave - stamped < datetime.timedelta(seconds=1)
    with pytest.raises(IntakeError, match="does not exist"):
        copy_inbound(exchange.root, "another", tmp_path / "collected")


@pytest.mark.parametrize("layout", ["own folders", "one inbound"])
def test_intake_reads_the_exchange_with_its_times(handed_in, tmp_path, layout):
    exchange, times, due, roster, _ = handed_in
    source = exchange.root / COURSE_ID / "inbound"
    if layout == "one inbound":  # nbgrader's own layout: every submission side by side
        flat = tmp_path / "inbound"
        flat.mkdir()
        for entry in source.glob("*/*"):
            shutil.copytree(entry, flat / entry.name)
        source = flat
    found = collect(source, tmp_path / "scratch", course.chapters(), roster=roster,
                    due=dict.fromkeys(course.chapters(), due))
    assert found.layout == "exchange"
    got = {s.student: (s.submitted_at.strftime("%Y-%m-%d %H:%M:%S.%f UTC"), s.late)
           for s in found.submissions}
    expected = {"bob": (times["bob"][1], False), "carol": (times["carol"][0], False),
                "dave": (times["dave"][0], True), "erin": (times["erin"][0], False)}
    skipped = {s.name.split("/")[-2].split("+")[0]: s.why for s in found.skipped}
    if layout == "own folders":
        expected["alice"] = (times["alice"][0], False)
        assert "claims to be alice's, but was handed in from mallory's server" in \
            skipped["alice"]
    else:  # without the hub's folders, mallory's forgery is alice's newest on time
        assert got["alice"][0] != times["alice"][0]
        got.pop("alice")
    assert got == expected
    assert found.unlisted == ["erin"]
    assert "not on the roster handed in: erin" in found.report()
    carol = next(s for s in found.submissions if s.student == "carol")
    assert (carol.folder / "submission_secret.txt").is_file()
    assert "not the 1 later one" in carol.notes[-1]


# --- what a student's own server writes: her times, and her submission after the due date ---

def test_a_time_rests_on_make_collects_record_where_the_students_file_disagrees(tmp_path):
    stamp = tmp_path / "timestamp.txt"
    received = _at(30)
    stamp.write_text("2026-12-01 23:29:58.500000 UTC")  # nbgrader's, just before its copy
    assert submitted_at(stamp, received).at == received  # the record, always
    assert submitted_at(stamp, received).notes == []  # agreeing: nothing to say
    assert submitted_at(stamp, None).at == _at(29) + datetime.timedelta(seconds=58.5)
    stamp.write_text("2026-12-01 22:00:00 UTC")  # backdated
    backdated = submitted_at(stamp, received)
    assert backdated.at == received
    assert backdated.notes == ["its timestamp.txt says 2026-12-01 22:00:00 UTC, but it was last "
                               "changed in the exchange at 2026-12-01 23:30:00 UTC (make "
                               "collect's record): graded as handed in then"]
    stamp.write_text(f"{(received + AGREE * 2).isoformat()}")  # from the future
    assert submitted_at(stamp, received).at == received
    stamp.write_text("yesterday")
    assert submitted_at(stamp, received).at == received
    untimed = submitted_at(stamp, None)
    assert untimed.at is None
    assert untimed.notes == ["its timestamp.txt: 'yesterday' is not a time: graded untimed "
                             "(no late mark)"]
    stamp.unlink()
    assert "cannot be read" in submitted_at(stamp, received).notes[0]


def _entry(exchange: Exchange, login: str, stamp: str) -> Path:
    return next(p for p in (exchange.root / COURSE_ID / "inbound" / login).iterdir()
                if stamp in p.name)


def test_a_submission_changed_after_the_due_date_is_late_or_graded_as_collected(tmp_path):
    """alice's on-time submission is collected, then rewritten after the due date: the
    collected one is graded, on time, and make collect names the change. bob rewrites his
    on-time one after the due date, notebook and timestamp.txt, before anyone collects: late.
    erin hands in after the due date under a folder name and a time of an hour before: late.
    frank writes 'yesterday' into his timestamp.txt before the due date: graded on time by the
    record, and untimed (named) where there is none; no one else is stopped. gina's server
    writes times in a zone with no abbreviation (nbgrader's folder name then holds "+04")."""
    exchange = Exchange(tmp_path / "exchange", tmp_path / "homes")
    exchange.release(CHAPTER)
    right, untouched = class_factory.correct(CHAPTER), class_factory.release(CHAPTER)
    collected = tmp_path / "collected"
    alice = exchange.submit("alice", CHAPTER, untouched)
    assert copy_inbound(exchange.root, COURSE_ID, collected).copied == 1
    bob = exchange.submit("bob", CHAPTER, untouched)
    frank = exchange.submit("frank", CHAPTER, right)
    (_entry(exchange, "frank", frank) / "timestamp.txt").write_text("yesterday")
    gina = exchange.submit("gina", CHAPTER, right, timezone="Asia/Dubai")
    assert gina.endswith(" +04") and "+04+" in _entry(exchange, "gina", gina).name
    time.sleep(0.01)
    due = datetime.datetime.now(UTC)
    time.sleep(0.01)
    an_hour_before = due - datetime.timedelta(hours=1)
    for login, stamp in (("alice", alice), ("bob", bob)):
        entry = _entry(exchange, login, stamp)
        nbformat.write(right, entry / f"{CHAPTER}.ipynb")
        (entry / "timestamp.txt").write_text(an_hour_before.strftime("%Y-%m-%d %H:%M:%S.%f UTC"))
    exchange.view("erin")
    forged = (exchange.root / COURSE_ID / "inbound" / "erin" /
              f"erin+{CHAPTER}+{an_hour_before.strftime('%Y-%m-%d %H:%M:%S.%f UTC')}+x1")
    forged.mkdir()
    nbformat.write(right, forged / f"{CHAPTER}.ipynb")
    (forged / "timestamp.txt").write_text(an_hour_before.strftime("%Y-%m-%d %H:%M:%S.%f UTC"))

    second = copy_inbound(exchange.root, COURSE_ID, collected)
    assert (second.copied, second.kept) == (4, 1)
    assert second.changed == [f"alice/{_entry(exchange, 'alice', alice).name}"]
    dues = dict.fromkeys(course.chapters(), due)
    found = collect(collected, tmp_path / "scratch", course.chapters(), due=dues)
    got = {s.student: s for s in found.submissions}
    assert {s: (got[s].late, bool(got[s].notes)) for s in got} == {
        "alice": (False, False), "bob": (True, True), "erin": (True, True),
        "frank": (False, True), "gina": (False, False)}
    assert nbformat.read(got["alice"].path, as_version=4) == untouched  # as collected
    assert "graded as handed in then" in got["bob"].notes[0]
    assert got["frank"].notes[0].startswith("its timestamp.txt: 'yesterday' is not a time")
    assert found.skipped == []

    # the exchange itself, without make collect's record: the students' word, frank untimed;
    # a notebook gina left beside her submissions is no one's hand-in, and named
    nbformat.write(right, exchange.root / COURSE_ID / "inbound" / "gina" / f"{CHAPTER}.ipynb")
    raw = collect(exchange.root / COURSE_ID / "inbound", tmp_path / "scratch", course.chapters(),
                  due=dues)
    got = {s.student: s for s in raw.submissions}
    assert {s: got[s].late for s in got} == {"alice": False, "bob": False, "erin": False,
                                            "frank": None, "gina": False}
    assert got["frank"].notes == ["its timestamp.txt: 'yesterday' is not a time: graded untimed "
                                  "(no late mark)"]
    assert [(s.name, s.why.split(" [")[0]) for s in raw.skipped] == [
        (f"gina/{CHAPTER}.ipynb", "its name does not follow")]


def test_make_collect_copies_a_link_as_a_link_and_intake_names_it(tmp_path):
    """A link in a student's submission folder, to a file the collecting account may read and
    she may not: copied as the link (following it would hand her the file), then named."""
    exchange = Exchange(tmp_path / "exchange", tmp_path / "homes")
    exchange.release(CHAPTER)
    stamp = exchange.submit("bob", CHAPTER, class_factory.correct(CHAPTER))
    secret = tmp_path / "course-only.ipynb"
    secret.write_text("the instructor's")
    (_entry(exchange, "bob", stamp) / "02_scatter.ipynb").symlink_to(secret)
    copy_inbound(exchange.root, COURSE_ID, tmp_path / "collected")
    copied = _entry(exchange, "bob", stamp).name
    assert (tmp_path / "collected" / "bob" / copied / "02_scatter.ipynb").is_symlink()
    found = collect(tmp_path / "collected", tmp_path / "scratch", course.chapters())
    assert [(s.student, s.chapter) for s in found.submissions] == [("bob", CHAPTER)]
    assert [s.why for s in found.skipped] == ["a link to outside the submissions folder"]


def test_a_login_may_hold_a_plus_and_a_time_its_zone_number():
    chapters = course.chapters()
    assert parse_name(f"alice+ml@uni.edu+{CHAPTER}+2026-12-01 23:59:00.1 +04+x1", chapters) \
        == ("alice+ml@uni.edu", CHAPTER, CHAPTER)
    assert parse_name("bob+99_gossip+2026-12-01 23:59:00.1 UTC+x1", chapters) == \
        ("bob", None, "99_gossip")
    assert parse_name("bob+01_broadcast", chapters) is None
    assert parse_name("notes", chapters) is None


def test_a_record_the_collecting_account_did_not_write_is_not_read(tmp_path):
    inbound = tmp_path / "inbound"
    inbound.mkdir()
    (inbound / "received.json").write_text('{"bob/x": "2026-12-01T22:00:00+00:00"}')
    assert received_times(inbound) == {"bob/x": _at(0) - datetime.timedelta(hours=1)}
    os.chown(inbound / "received.json", 1000, 1000)  # a student's, in a shared inbound
    assert received_times(inbound) == {}


# --- grading, feedback, and a week later --------------------------------------------------------

def _grade(collected: Path, out: Path, gradebook: Path, roster: Path, due: str, *more: str):
    done = subprocess.run([sys.executable, "-m", "grader", "grade", str(collected), str(out),
                           "--roster", str(roster), "--due", due, "--gradebook", str(gradebook),
                           "--jobs", "1", *more], cwd=ROOT, capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr
    return read_grades(out), done.stderr


def _release(out: Path, exchange: Exchange) -> str:
    done = subprocess.run([sys.executable, "-m", "grader", "release-feedback", str(out),
                           "--exchange", str(exchange.root), "--course", COURSE_ID], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout + done.stderr


@pytest.mark.slow
def test_graded_feedback_fetched_and_a_second_run(handed_in):
    from nbgrader.api import Gradebook

    exchange, times, due, roster, folder = handed_in
    collected, gradebook = folder / "collected", folder / "gb" / "gradebook.db"
    copy_inbound(exchange.root, COURSE_ID, collected)
    rows, said = _grade(collected, folder / "out", gradebook, roster, due.isoformat())
    got = {name: (row["score"], row["status"], row["late"]) for name, row in rows.items()}
    assert got == {"alice": ("4", "graded", "on time"), "bob": ("4", "graded", "on time"),
                   "carol": ("0", "graded", "on time"), "dave": ("4", "graded", "late"),
                   "erin": ("0", "graded", "on time"), "frank": ("0", "missing", ""),
                   "mallory": ("0", "missing", "")}
    assert rows["erin"]["notes"] == "not on the roster"
    assert "1 student not on the roster handed in: erin" in said
    # the time make collect saw it land, a moment after nbgrader's timestamp
    landed = parse_time(rows["dave"]["submitted"], "t") - parse_time(times["dave"][0], "t")
    assert datetime.timedelta(0) <= landed < datetime.timedelta(seconds=1)
    results = json.loads((folder / "out" / "results.json").read_text())
    assert {o["student"]: o["late"] for o in results["outcomes"]}["dave"] is True
    with Gradebook(f"sqlite:///{gradebook}") as gb:
        assert gb.find_assignment(CHAPTER).duedate.replace(tzinfo=UTC) == due
        assert gb.find_submission(CHAPTER, "dave").total_seconds_late > 0
        assert gb.find_submission(CHAPTER, "alice").total_seconds_late == 0

    said = _release(folder / "out", exchange)
    assert "released 5 feedback pages to 5 students" in said
    pages = {name: exchange.fetch_feedback(name, CHAPTER)
             for name in ("alice", "bob", "carol", "dave", "erin", "mallory")}
    assert pages["mallory"] == []  # her forgery is graded for no one
    # each student's folder of pages (all her server sees) holds hers alone
    own = {name: sorted(p.name for p in (exchange.root / COURSE_ID / OWN_FEEDBACK / name)
                        .iterdir()) for name in ("alice", "bob", "carol", "dave", "erin")}
    assert all(len(names) == 1 for names in own.values()), own
    assert len({names[0] for names in own.values()}) == 5
    assert not (exchange.root / COURSE_ID / OWN_FEEDBACK / "mallory").exists() or \
        list((exchange.root / COURSE_ID / OWN_FEEDBACK / "mallory").iterdir()) == []
    for name in ("alice", "bob", "carol", "dave", "erin"):
        assert len(pages[name]) == 1, (name, pages[name])
    assert pages["bob"][0].parent.name == times["bob"][1]  # the submission graded
    assert pages["carol"][0].parent.name == times["carol"][0]
    assert "Score: 4.0 / 4.0" in pages["alice"][0].read_text()
    assert "BEGIN HIDDEN TESTS" not in pages["alice"][0].read_text()

    # a week later: the due date moved (an extension for the class), erin hands in again,
    # the class is collected and graded again, and the feedback released again
    times["erin"].append(exchange.submit("erin", CHAPTER, class_factory.correct(CHAPTER)))
    again = copy_inbound(exchange.root, COURSE_ID, collected)
    assert (again.copied, again.kept, again.changed) == (1, 8, [])
    later = datetime.datetime.now(UTC) + datetime.timedelta(days=1)
    rows, _ = _grade(collected, folder / "out", gradebook, roster, later.isoformat())
    got = {name: (row["score"], row["late"]) for name, row in rows.items()}
    assert got["carol"] == ("4", "on time") and got["dave"] == ("4", "on time")
    assert got["erin"] == ("4", "on time") and got["alice"] == ("4", "on time")
    with Gradebook(f"sqlite:///{gradebook}") as gb:
        assert {s.student.id: s.score for s in gb.find_assignment(CHAPTER).submissions} == {
            "alice": 4, "bob": 4, "carol": 4, "dave": 4, "erin": 4}
    _release(folder / "out", exchange)
    carol = exchange.fetch_feedback("carol", CHAPTER)
    assert [p.parent.name for p in carol] == sorted(times["carol"])  # both her submissions
    assert "Score: 4.0 / 4.0" in carol[-1].read_text()
