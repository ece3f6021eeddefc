"""Hostile submissions, graded as a class: each attack of a student who wants the points without
the work scores 0 on the test it aims at, and harms nothing.

The class, on chapters 00 to 17 (each attack a file, tests/chapters/NN_name/attacks/*.py, named
after its student; tests/chapters/README.md): recomputes other ranks' inputs, reads them from
its process, calls the test's own helpers, forges its trace, deletes records or hides a costly
collective behind the calls of the intended answer, reports a schedule it never ran, makes the
right calls on zeros, moves data through files, shared memory, a Unix socket, the rendezvous
store, a connection or datagrams of its own, the socket table, a connection kept open under
forged records of the calls it replaces, lies in its reply, sends a report that would run
code in the rank host, leaves IPC objects and files for the next submission, writes to
terminals, and prints its hidden test cases; and one student hands in outputs that would run
script in a browser.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import nbformat
import pytest

from grader.sandboxed import namespaces
from grader.trusted import feedback
from support.answer_files import answer_files
from support.class_factory import cell_index, correct, release, with_answer, write
from support.grading import graded_class
from support.processes import descendants

ATTACKS = {attack.name: attack for attack in answer_files("attacks")}
# the file's name is its student's: two chapters' attacks of one name would be one student
assert len(ATTACKS) == len(answer_files("attacks")), \
    "two attack files share a name: name each after what it does in its chapter"
pytestmark = pytest.mark.skipif(not namespaces.available(),
                                reason="this machine does not allow user namespaces")

# what must not be in a feedback page as markup (escaped, as text, they may)
MARKERS = ("<script>alert('student-1')", "alert('student-2')", "<svg onload=",
           "<img src=x onerror", "<script>student-4")


def _scripts_in_outputs():
    """A correct notebook handed in with outputs and a Markdown cell that would run script in a
    reader's browser."""
    nb = correct("00_launching_ranks")
    cell = nbformat.v4.new_code_cell("show()")
    cell.outputs = [
        nbformat.v4.new_output("display_data", data={
            "text/html": "<script>alert('student-1')</script>", "text/plain": "plain"}),
        nbformat.v4.new_output("display_data", data={
            "application/javascript": "alert('student-2')"}),
        nbformat.v4.new_output("display_data", data={
            "image/svg+xml": "<svg onload=\"alert('student-3')\"></svg>"}),
        nbformat.v4.new_output("execute_result", execution_count=1, data={
            "text/markdown": "<img src=x onerror=alert('student-5')>"}),
    ]
    nb.cells.insert(cell_index(nb, "00-whoami") + 1, cell)
    nb.cells.insert(1, nbformat.v4.new_markdown_cell(
        "<script>student-4</script> and <img src=x onerror=alert('student-6')>"))
    return nb


def _chapter(student: str) -> str:
    return ATTACKS[student].chapter if student in ATTACKS else "00_launching_ranks"


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    folder = tmp_path_factory.mktemp("forgeries")
    for attack in ATTACKS.values():
        answered = with_answer(attack.answer_cell, attack.cell, release(attack.chapter))
        write(folder / "class", attack.name, answered, attack.chapter)
    write(folder / "class", "scripts_in_outputs", _scripts_in_outputs(), "00_launching_ranks")
    # the suite's other tests share the machine: the grader's cell limit is test_autograde's
    graded_class(folder / "class", folder / "out", jobs=2, db=folder / "gradebook.db",
                 cell_timeout=120)
    results = json.loads((folder / "out" / "results.json").read_text())
    # every student also gets "missing" for the chapters others handed in
    outcomes = {o["student"]: o for o in results["outcomes"]
                if o["chapter"] == _chapter(o["student"])}
    return outcomes, folder / "out"


def _points(student: str, grade_id: str) -> float:
    """What the test cell ``grade_id`` of the student's chapter is worth."""
    chapter = _chapter(student)
    cell = next(c for c in release(chapter).cells
                if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)
    return cell.metadata["nbgrader"]["points"]


def _message(out: Path, student: str, grade_id: str) -> str:
    chapter = _chapter(student)
    nb = nbformat.read(out / "autograded" / student / chapter / f"{chapter}.ipynb", 4)
    cell = next(c for c in nb.cells
                if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)
    return "\n".join(str(o.get("evalue", "")) for o in cell.outputs
                     if o.get("output_type") == "error")


@pytest.mark.slow
@pytest.mark.parametrize("student", sorted(s for s, a in ATTACKS.items() if not a.finds_nothing))
def test_the_attack_scores_nothing_on_the_test_it_aims_at(graded, student):
    outcomes, out = graded
    (aim,) = ATTACKS[student].test_cells
    assert outcomes[student]["cells"][aim] == 0, _message(out, student, aim)


@pytest.mark.slow
@pytest.mark.parametrize("student", sorted(s for s, a in ATTACKS.items() if a.says))
def test_the_test_says_what_gave_the_attack_away(graded, student):
    _, out = graded
    message = _message(out, student, ATTACKS[student].test_cells[0])
    assert any(words in message for words in ATTACKS[student].says), message


@pytest.mark.slow
@pytest.mark.parametrize("student", sorted(s for s, a in ATTACKS.items() if a.finds_nothing))
def test_what_a_launch_leaves_is_gone_for_the_next_and_a_right_answer_keeps_its_points(
        graded, student):
    """An attack whose calls are right and whose harm is what it leaves for a later launch of
    the same submission (code run after the grader's last count, a connection waiting to close):
    its points stay, and no case found anything of an earlier one (the instructor's view, hidden
    cases included)."""
    outcomes, out = graded
    (aim,) = ATTACKS[student].test_cells
    message = _message(out, student, aim)
    assert ATTACKS[student].finds_nothing not in message, message
    assert outcomes[student]["cells"][aim] == _points(student, aim) > 0, message


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
