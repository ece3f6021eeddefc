"""Grades back through LTI 1.3, against a real platform (lti1p3platform over HTTP,
tests/support/lti_platform.py): the class list read with `python -m grader lti roster`, graded
with it by the real `make grade`, then `python -m grader lti post` twice. The line item of a
chapter is created once and found again, the scores are the graded ones, a second posting
changes nothing, a student the LMS does not know is named, a dry run changes nothing; the late
flag and the clamping on a class written as grading writes it. No output, page or gradebook
holds the client id or the private key."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from grader.intake.roster import read_roster
from grader.trusted import gradebook, lti
from grader.trusted.verdict import Outcome, Status
from support.class_factory import correct, release, write
from support.course_copy import VENV, make, tracked_copy
from support.lti_platform import CLIENT_ID, INSTRUCTOR, TA, LtiPlatform, member, new_key

ROOT = Path(__file__).resolve().parents[3]
CHAPTER = "01_broadcast"
ANN, BEN, CAT = "a1f0c3", "b2e7d4", "c3d9e5"  # their LTI user ids, the hub's names for them


def _tool_key(folder: Path) -> tuple[Path, dict, str]:
    """The tool's private key file, its public JWK (as `lti jwk` prints it), the PEM text."""
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    private, _ = new_key()
    (folder / "tool.pem").write_text(private)
    return folder / "tool.pem", lti.public_jwk(load_pem_private_key(private.encode(), None)), \
        private


def _members() -> list[dict]:
    return [member(ANN, "Ann Lee"), member(BEN, "Ben Okafor"), member(CAT, "Cat Silva"),
            member("t0", "Tia Teach", INSTRUCTOR), member("t1", "Tom Assist", TA)]


def _lti(course: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """``python -m grader lti ARGS`` in ``course``, with ``env``'s settings only."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("COMMLAB_LTI_")}
    return subprocess.run([sys.executable, "-m", "grader", "lti", *args], cwd=course,
                          capture_output=True, text=True, timeout=120,
                          env={**clean, **(env or {})})


@pytest.fixture(scope="module")
def term(tmp_path_factory):
    """A course whose grader/lti.toml points at the platform, the roster read from it, a class
    graded by `make grade` with it (Dan, who handed in, is on no LMS list; Cat handed nothing
    in), and what each command printed."""
    course = tracked_copy(tmp_path_factory.mktemp("course"))
    (course / ".venv").symlink_to(VENV, target_is_directory=True)
    key_file, jwk, private = _tool_key(course)
    (course / "client_id").write_text(CLIENT_ID + "\n")
    with LtiPlatform(_members(), jwk) as platform:
        settings = platform.settings(key_file)
        (course / "grader" / "lti.toml").write_text(
            "[lti]\n" + "".join(f'{k.removeprefix("COMMLAB_LTI_").lower()} = "{v}"\n'
                                for k, v in settings.items()
                                if k != "COMMLAB_LTI_CLIENT_ID")
            + f'client_id_file = "{course / "client_id"}"\n')
        said = {"roster": _lti(course, "roster")}
        (course / "roster.csv").write_text(said["roster"].stdout)
        for student, notebook in ((ANN, correct(CHAPTER)), (BEN, release(CHAPTER)),
                                  ("dan", correct(CHAPTER))):
            write(course / "class", student, notebook, CHAPTER)
        said["grade"] = make("grade", "SUBMISSIONS=class", "OUT=grades",
                             "GRADE_FLAGS=--jobs 1 --roster roster.csv", cwd=course,
                             timeout=900)
        said["dry run"] = _lti(course, "post", "grades", "--dry-run")
        after_dry_run = (dict(platform.storage.line_items), list(platform.storage.scores))
        said["post"] = _lti(course, "post", "grades")
        after_post = (dict(platform.storage.line_items), list(platform.storage.scores))
        said["again"] = _lti(course, "post", "grades")
        yield {"course": course, "said": said, "platform": platform, "private": private,
               "after dry run": after_dry_run, "after post": after_post}


@pytest.mark.slow
def test_the_roster_from_the_lms_lists_its_learners_for_make_grade(term):
    done = term["said"]["roster"]
    assert done.returncode == 0, done.stderr
    rows = read_roster(term["course"] / "roster.csv")
    assert sorted((m.row["username"], m.row["full name"]) for m in rows) == [
        (ANN, "Ann Lee"), (BEN, "Ben Okafor"), (CAT, "Cat Silva")]
    assert "3 learners from the LMS" in done.stderr
    grade = term["said"]["grade"]
    assert grade.returncode == 0, grade.stdout[-3000:] + grade.stderr[-3000:]
    assert "not on the roster handed in: dan" in grade.stderr


@pytest.mark.slow
def test_a_dry_run_says_what_would_be_posted_and_changes_nothing(term):
    done = term["said"]["dry run"]
    assert "would create the line item 01_broadcast (out of 4)" in done.stdout
    assert f"would post {ANN}/{CHAPTER}: 4 of 4" in done.stdout
    assert f"would post {BEN}/{CHAPTER}: 0 of 4" in done.stdout
    assert term["after dry run"] == ({}, [])


@pytest.mark.slow
def test_posting_creates_one_line_item_per_chapter_and_posts_the_graded_scores(term):
    done = term["said"]["post"]
    items, scores = term["after post"]
    assert [(i["resourceId"], i["tag"], i["scoreMaximum"]) for i in items.values()] == [
        (CHAPTER, "commlab", 4)]
    assert sorted((s["userId"], s["scoreGiven"], s["scoreMaximum"], s["activityProgress"],
                   s["gradingProgress"]) for _, s in scores) == [
        (ANN, 4.0, 4.0, "Completed", "FullyGraded"), (BEN, 0.0, 4.0, "Completed", "FullyGraded")]
    assert "2 scores posted, 0 unchanged, 1 line item created" in done.stdout
    assert f"{CAT}/{CHAPTER}: handed nothing in, not posted" in done.stdout


@pytest.mark.slow
def test_a_student_the_lms_does_not_know_is_named_not_dropped(term):
    done = term["said"]["post"]
    assert done.returncode == 1
    assert "dan/01_broadcast: the LMS's class list has no such student, not posted (score 4)" \
        in done.stderr


@pytest.mark.slow
def test_the_same_scores_posted_again_leave_the_gradebook_unchanged(term):
    done = term["said"]["again"]
    assert "0 scores posted, 2 unchanged, 0 line items created" in done.stdout
    storage = term["platform"].storage
    assert (storage.line_items, storage.scores) == term["after post"]


@pytest.mark.slow
def test_no_output_page_or_gradebook_holds_the_client_id_or_the_key(term):
    course = term["course"]
    key_body = "".join(term["private"].splitlines()[1:-1])
    secrets = [CLIENT_ID.encode(), key_body[:40].encode(), key_body[-40:].encode()]
    said = b"".join((d.stdout + d.stderr).encode() for d in term["said"].values())
    written = [p for p in [*(course / "grades").rglob("*"), course / "grader" / "gradebook.db",
                           course / "roster.csv"] if p.is_file()]
    assert written and (course / "grader" / "gradebook.db") in written
    for secret in secrets:
        assert secret not in said
        assert [p for p in written if secret in p.read_bytes()] == []


def _written_class(tmp_path: Path, outcomes: list[Outcome]) -> Path:
    gradebook.write_sheets(tmp_path / "out", outcomes, [], students={})
    return tmp_path / "out"


def test_late_work_carries_its_hand_in_time_and_scores_are_clamped(tmp_path):
    key_file, jwk, _ = _tool_key(tmp_path)
    late = Outcome(ANN, CHAPTER, 4.0, 4.0, Status.GRADED,        # as the batch writes times
                   submitted="2026-12-02 08:30:00.000000 UTC", timestamped=True,
                   due="2026-12-01 23:59:00.000000 UTC", late=True)
    on_time = Outcome(BEN, CHAPTER, 3.0, 4.0, Status.GRADED)
    nothing = Outcome(CAT, CHAPTER, 0.0, 4.0, Status.MISSING)
    out = _written_class(tmp_path, [late, on_time, nothing])
    with LtiPlatform(_members(), jwk) as platform:
        # the instructor made the line item in the LMS, out of 2
        platform.storage.line_items["1"] = {"id": f"{platform.base}/lineitems/1",
                                            "label": "Broadcast", "scoreMaximum": 2,
                                            "resourceId": CHAPTER, "tag": "commlab"}
        (tmp_path / "none.toml").write_text("")
        done = _lti(ROOT, "post", str(out), "--missing", "zero", "--config",
                    str(tmp_path / "none.toml"), env=platform.settings(key_file))
        scores = {s["userId"]: s for _, s in platform.storage.scores}
    assert done.returncode == 0, done.stderr
    assert len(platform.storage.line_items) == 1
    assert scores[ANN]["submission"] == {"submittedAt": "2026-12-02T08:30:00.000Z"}
    assert scores[ANN]["https://canvas.instructure.com/lti/submission"] == {
        "submitted_at": "2026-12-02T08:30:00.000Z"}
    assert "submission" not in scores[BEN]
    assert {u: (s["scoreGiven"], s["scoreMaximum"], s["activityProgress"])
            for u, s in scores.items()} == {ANN: (2.0, 2.0, "Completed"),
                                            BEN: (2.0, 2.0, "Completed"),
                                            CAT: (0.0, 2.0, "Initialized")}
    assert "less than the chapter's points: scores above it are posted as its maximum" \
        in done.stdout
