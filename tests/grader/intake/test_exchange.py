"""What nbgrader's exchange received, graded: submissions made by nbgrader's own submit code
into each student's inbound folder (as a hub mounts it), collected, read with their times
against due dates (the newest on time, late ones marked, a forged name refused, a student off
the roster named), graded, and the feedback released and fetched by nbgrader's own code, each
student her own page; then a second run a week later. tests/system/test_hub.py does the same
through a real hub."""

from __future__ import annotations

import datetime
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from grader import course
from grader.intake import IntakeError, collect
from grader.intake.deadlines import choose, due_dates, parse_time
from grader.intake.exchange import copy_inbound
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
    exchange, *_ = handed_in
    assert copy_inbound(exchange.root, COURSE_ID, tmp_path / "collected") == (8, 0)
    assert copy_inbound(exchange.root, COURSE_ID, tmp_path / "collected") == (0, 8)
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


# --- grading, feedback, and a week later --------------------------------------------------------

def _grade(collected: Path, out: Path, gradebook: Path, roster: Path, due: str, *more: str):
    done = subprocess.run([sys.executable, "-m", "grader", "grade", str(collected), str(out),
                           "--roster", str(roster), "--due", due, "--gradebook", str(gradebook),
                           "--jobs", "2", *more], cwd=ROOT, capture_output=True, text=True,
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
    assert rows["dave"]["submitted"] == times["dave"][0]
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
    for name in ("alice", "bob", "carol", "dave", "erin"):
        assert len(pages[name]) == 1, (name, pages[name])
    assert pages["bob"][0].parent.name == times["bob"][1]  # the submission graded
    assert pages["carol"][0].parent.name == times["carol"][0]
    assert "Score: 4.0 / 4.0" in pages["alice"][0].read_text()
    assert "BEGIN HIDDEN TESTS" not in pages["alice"][0].read_text()

    # a week later: the due date moved (an extension for the class), erin hands in again,
    # the class is collected and graded again, and the feedback released again
    times["erin"].append(exchange.submit("erin", CHAPTER, class_factory.correct(CHAPTER)))
    assert copy_inbound(exchange.root, COURSE_ID, collected) == (1, 8)
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
