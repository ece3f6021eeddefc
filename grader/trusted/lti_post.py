"""Grades back through LTI 1.3 (``python -m grader lti post OUT``) and the class list from the
LMS (``python -m grader lti roster``), with the client of grader/trusted/lti.py.

Posting: one line item per chapter, tagged with the course's tag and the chapter as its
``resourceId``, found again on every run or created once; a score per student, clamped to the
line item's ``scoreMaximum``, with ``activityProgress`` ``Completed`` and ``gradingProgress``
``FullyGraded``, and when nbgrader's exchange recorded when it was handed in, that time
(``submission.submittedAt``, and Canvas's own ``submitted_at``) so that the LMS marks it late
by its own due date, as it records late work. A score equal to the LMS's result is not posted
again, so a second posting changes nothing. A student the LMS does not know is named.

Students are matched to the LMS's users by the roster's ``LTI user id`` column (``lti
roster``'s), else by the name the hub gave them: the LMS member whose ``username_claim``
(default ``sub``, the LTI user id) reads the same.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from ..intake import deadlines
from ..intake.errors import IntakeError
from . import lti

if TYPE_CHECKING:
    from .verdict import Outcome

LEARNER = "Learner"
MISSING = "missing"  # grades.csv's status of a student who handed nothing in (nbgrader's
# import, which the verdict's module needs, takes seconds: the roster needs none of it)
ID_COLUMN = "lti user id"
# the claims a hub can name students by, and where an NRPS member holds the same value
MEMBER_FIELD = {"sub": "user_id", "email": "email", "name": "name",
                "given_name": "given_name", "family_name": "family_name"}


@dataclass
class Plan:
    """What a posting does: line items to create, scores to post, those left as they are,
    and what the instructor must know."""

    create: dict[str, float] = field(default_factory=dict)  # chapter -> its maximum
    post: list[tuple[Outcome, str, dict]] = field(default_factory=list)  # outcome, user, score
    unchanged: list[Outcome] = field(default_factory=list)
    unknown: list[Outcome] = field(default_factory=list)  # the LMS does not know the student
    notes: list[str] = field(default_factory=list)


def is_learner(member: dict) -> bool:
    return any(r.rsplit("#", 1)[-1] == LEARNER or r == LEARNER for r in member.get("roles", []))


def hub_name(member: dict, claim: str) -> str:
    """The name the hub gives this member (JupyterHub's names are lower case)."""
    return str(member.get(MEMBER_FIELD.get(claim, claim), "") or "").casefold()


def write_roster(client: lti.Client, to) -> int:
    """The LMS's learners as a roster ``--roster`` reads (Username, Full name, Email address,
    LTI user id); return how many."""
    claim = client.settings.get("username_claim", "sub")
    learners = [m for m in lti.members(client)
                if is_learner(m) and m.get("status", "Active") == "Active"]
    writer = csv.writer(to)
    writer.writerow(["Username", "Full name", "Email address", "LTI user id"])
    for member in sorted(learners, key=lambda m: hub_name(m, claim)):
        writer.writerow([hub_name(member, claim), member.get("name", ""),
                         member.get("email", ""), member.get("user_id", "")])
    return len(learners)


def _submitted(outcome: Outcome) -> str | None:
    """When the exchange recorded the hand-in, ISO 8601 in UTC."""
    if not (outcome.timestamped and outcome.submitted):
        return None
    try:
        when = deadlines.parse_time(outcome.submitted, "the hand-in time")
    except IntakeError:
        return None
    return when.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def score_of(outcome: Outcome, user: str, item: dict, missing: str) -> dict:
    """The AGS score of ``outcome`` on ``item``, clamped to the line item's maximum."""
    maximum = float(item.get("scoreMaximum") or outcome.max_score)
    given = outcome.score if outcome.status != MISSING else 0.0
    score = {"userId": user, "scoreGiven": min(max(given, 0.0), maximum),
             "scoreMaximum": maximum, "activityProgress": "Completed",
             "gradingProgress": "FullyGraded",
             "timestamp": datetime.now(UTC).isoformat(timespec="milliseconds")}
    if outcome.status == MISSING and missing == "zero":
        score["activityProgress"] = "Initialized"
    submitted = _submitted(outcome)
    if submitted:
        score["submission"] = {"submittedAt": submitted}
        score["https://canvas.instructure.com/lti/submission"] = {"submitted_at": submitted}
    return score


def _same(result: dict | None, score: dict) -> bool:
    """Whether the LMS's result already says ``score`` (results are scaled to the line item's
    maximum)."""
    if not result or result.get("resultScore") is None:
        return False
    their = float(result["resultScore"]) / float(result.get("resultMaximum") or 1)
    ours = score["scoreGiven"] / score["scoreMaximum"] if score["scoreMaximum"] else 0.0
    return abs(their - ours) < 1e-9


def _users(client: lti.Client, students: dict[str, dict]) -> dict[str, str]:
    """Each graded student's LTI user id: the roster's, else the member the hub named so."""
    claim = client.settings.get("username_claim", "sub")
    by_name = {hub_name(m, claim): str(m["user_id"]) for m in lti.members(client)
               if m.get("user_id")}
    known = set(by_name.values())
    users = {}
    for student, who in students.items():
        if who.get(ID_COLUMN, "") in known:
            users[student] = who[ID_COLUMN]
        elif student.casefold() in by_name:
            users[student] = by_name[student.casefold()]
    return users


def plan(client: lti.Client, out: Path, missing: str = "empty") -> Plan:
    """What posting ``out``'s scores would do, asked of the LMS without changing it."""
    from .gradebook import read_results

    found = read_results(out)
    graded = [o for o in found.outcomes if o.status != MISSING or missing == "zero"]
    students = {o.student: found.students.get(o.student, {}) for o in graded}
    users = _users(client, students)
    items = {i.get("resourceId"): i for i in lti.line_items(client)}
    done = Plan()
    chapters = sorted({o.chapter for o in graded})
    for chapter in chapters:
        maximum = max(o.max_score for o in graded if o.chapter == chapter)
        if chapter not in items:
            done.create[chapter] = maximum
            items[chapter] = {"id": "", "label": chapter, "scoreMaximum": maximum}
        elif float(items[chapter].get("scoreMaximum") or 0) < maximum:
            done.notes.append(f"{chapter}: the LMS's line item is out of "
                              f"{float(items[chapter]['scoreMaximum'] or 0):g}, less than "
                              "the chapter's "
                              "points: scores above it are posted as its maximum")
    their = {c: lti.results(client, items[c]) if items[c]["id"] else {} for c in chapters}
    for outcome in sorted(graded, key=lambda o: (o.chapter, o.student)):
        user = users.get(outcome.student)
        if user is None:
            done.unknown.append(outcome)
            continue
        score = score_of(outcome, user, items[outcome.chapter], missing)
        if _same(their[outcome.chapter].get(user), score):
            done.unchanged.append(outcome)
        else:
            done.post.append((outcome, user, score))
    done.notes += [f"{o.student}/{o.chapter}: handed nothing in, not posted (--missing zero "
                   "posts a 0)" for o in found.outcomes
                   if o.status == MISSING and missing != "zero"]
    return done


def carry_out(client: lti.Client, done: Plan) -> None:
    """Create the line items ``done`` names, then post its scores."""
    items = {i.get("resourceId"): i for i in lti.line_items(client)}
    for chapter, maximum in done.create.items():
        if chapter not in items:
            items[chapter] = lti.create_line_item(client, chapter, maximum)
    for outcome, _, score in done.post:
        lti.post_score(client, items[outcome.chapter], score)


def describe(done: Plan, dry_run: bool) -> str:
    """The plan as the instructor reads it: one line per change, per unknown student."""
    lines = io.StringIO()
    verb = "would " if dry_run else ""
    for chapter, maximum in done.create.items():
        print(f"{verb}create the line item {chapter} (out of {maximum:g})", file=lines)
    for outcome, _, score in done.post:
        late = f", handed in {score['submission']['submittedAt']}" if "submission" in score \
            else ""
        print(f"{verb}post {outcome.student}/{outcome.chapter}: {score['scoreGiven']:g} of "
              f"{score['scoreMaximum']:g}{late}", file=lines)
    for note in done.notes:
        print(f"note: {note}", file=lines)
    print(f"{len(done.post)} score{'s' if len(done.post) != 1 else ''} "
          f"{'to post' if dry_run else 'posted'}, {len(done.unchanged)} unchanged, "
          f"{len(done.create)} line item{'s' if len(done.create) != 1 else ''} "
          f"{'to create' if dry_run else 'created'}", file=lines)
    return lines.getvalue()


def unknown_lines(done: Plan) -> list[str]:
    return [f"{o.student}/{o.chapter}: the LMS's class list has no such student, not posted "
            f"(score {o.score:g}): a student who left the course, a guest, or a hub name the "
            "LMS does not give (grade with --roster from `python -m grader lti roster`)"
            for o in done.unknown]
