"""Hostile submissions, graded as a class: each attack of a student who wants the points without
the work scores 0 on the test it aims at, and harms nothing.

The class (tests/support/forgeries.py), on chapters 00 to 17: recomputes other ranks' inputs,
reads them from its process, calls the test's own helpers, forges its trace, deletes records or
hides a costly collective behind the calls of the intended answer, reports a schedule it never
ran, makes the right calls on zeros, moves data through files, shared memory, a Unix socket, the
rendezvous store, a connection or datagrams of its own, lies in its reply, sends a report that
would run code in the rank host, leaves IPC objects and files for the next submission, writes to
terminals, hands in outputs that would run script in a browser, and prints its hidden test cases.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from pathlib import Path

import nbformat
import pytest

from grader.sandboxed import namespaces
from grader.trusted import batch, feedback
from support.class_factory import write
from support.forgeries import MARKERS, students
from support.processes import descendants

STUDENTS = students()
pytestmark = pytest.mark.skipif(not namespaces.available(),
                                reason="this machine does not allow user namespaces")


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    folder = tmp_path_factory.mktemp("forgeries")
    for student, (chapter, notebook, _) in STUDENTS.items():
        write(folder / "class", student, notebook, chapter)
    scratch = Path(tempfile.mkdtemp(prefix="forgery-test-"))  # short: sockets live there
    settings = batch.Settings(jobs=2, db=folder / "gradebook.db", scratch_parent=scratch)
    batch.grade_class(folder / "class", folder / "out", settings)
    results = json.loads((folder / "out" / "results.json").read_text())
    # every student also gets "missing" for the chapters others handed in
    outcomes = {o["student"]: o for o in results["outcomes"]
                if o["chapter"] == STUDENTS[o["student"]][0]}
    yield outcomes, folder / "out"
    scratch.rmdir()


def _message(out: Path, student: str, grade_id: str) -> str:
    chapter = STUDENTS[student][0]
    nb = nbformat.read(out / "autograded" / student / chapter / f"{chapter}.ipynb", 4)
    cell = next(c for c in nb.cells
                if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)
    return "\n".join(str(o.get("evalue", "")) for o in cell.outputs
                     if o.get("output_type") == "error")


@pytest.mark.slow
@pytest.mark.parametrize("student", sorted(s for s, (_, _, aim) in STUDENTS.items() if aim))
def test_the_attack_scores_nothing_on_the_test_it_aims_at(graded, student):
    outcomes, out = graded
    aim = STUDENTS[student][2]
    assert outcomes[student]["cells"][aim] == 0, _message(out, student, aim)


@pytest.mark.slow
@pytest.mark.parametrize("student, fragment", [
    ("recomputes_inputs", "A rank can make only its own"),
    ("calls_the_checks", "A rank can make only its own"),
    ("forges_its_trace", "where the calls your trace lists send"),
    ("hides_an_all_gather", "where the calls your trace lists send"),
    ("uses_the_store", "and the rendezvous store"),
    ("opens_its_own_connection", "opened and closed again"),
    ("lies_in_its_reply", "does not hold the"),
    ("runs_code_in_the_host", "cannot be read"),
    ("makes_its_piece", "A rank can make only its own"),
    ("calls_the_test_for_every_rank", "A rank can make only its own"),
    ("all_to_all_through_the_store", "and the rendezvous store"),
    ("reports_a_ring_it_never_ran", "where the calls your trace lists send"),
    ("hides_the_worlds_all_reduce", "where the calls your trace lists send"),
    ("gathers_every_block_hidden", "where the calls your trace lists send"),
    ("makes_every_causal_block", "A rank can make only its own"),
    ("steps_the_whole_optimizer", "the parameters after step"),
    ("right_calls_on_zeros", "should be"),
])
def test_the_test_says_what_gave_the_attack_away(graded, student, fragment):
    _, out = graded
    message = _message(out, student, STUDENTS[student][2])
    assert fragment in message, message


@pytest.mark.slow
def test_what_a_submission_leaves_is_gone_for_the_next(graded):
    _, out = graded
    assert "{'found': []}" in _message(out, "looks_for_what_was_left", "00-whoami-test")
    listed = subprocess.run(["ipcs", "-m"], capture_output=True, text=True).stdout
    assert "0x0badcafe" not in listed.lower()
    for folder in ("/tmp", "/dev/shm"):
        assert not Path(folder, "commlab-left-behind").exists()
        assert not Path(folder, "commlab-forgery").exists()
    assert descendants() == []


@pytest.mark.slow
def test_no_terminal_or_device_of_the_machine_is_reachable(graded):
    _, out = graded
    message = _message(out, "writes_to_terminals", "00-whoami-test")
    assert "'reached': []" in message, message
    shown = message.split("'devices': ")[1]
    for device in ("'null'", "'urandom'"):
        assert device in shown
    for device in ("'tty'", "'console'", "'pts'", "'sda'", "'vda'", "'kmsg'"):
        assert device not in shown, shown


@pytest.mark.slow
def test_feedback_pages_run_no_script_the_student_wrote(graded):
    _, out = graded
    page = (out / "feedback" / "scripts_in_outputs" / "00_launching_ranks.html").read_text()
    for marker in MARKERS:
        assert marker not in page
    assert "&lt;script&gt;student-4&lt;/script&gt;" in page  # shown as text
    assert "an output of type application/javascript, not shown here" in page


@pytest.mark.slow
def test_feedback_names_a_failed_hidden_case_and_prints_nothing_of_it(graded):
    outcomes, out = graded
    page = (out / "feedback" / "prints_hidden_cases" / "01_broadcast.html").read_text()
    assert "HIDDEN-CASE-MARKER" not in page
    assert feedback.HIDDEN_FAILURE in page
    # the instructor's view keeps the details
    assert "HIDDEN-CASE-MARKER" in _message(out, "prints_hidden_cases", "01-my-broadcast-test")
