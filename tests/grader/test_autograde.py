"""Autograding a class: every kind of submission gets its score and status, and the student's
code, hostile or not, can neither see the grader's secrets nor change a score. (The attacks on
the evidence itself, forged traces and side channels, are in tests/chapters/test_attacks.py.)"""

from __future__ import annotations

import html
import json
import re

import nbformat
import psutil
import pytest

from grader.course import NOTEBOOKS, SOLUTIONS
from grader.sandboxed import limits
from grader.sandboxed import namespaces as sandbox
from grader.trusted import feedback, tamper
from support import grading
from support.class_factory import CHAPTER, LEFTOVER_MARK, cases, correct, make_class
from support.processes import descendants

CASES = cases()


def test_tampering_is_found_and_duplicates_are_dropped():
    nb = correct()
    index = next(i for i, c in enumerate(nb.cells)
                 if c.metadata.get("nbgrader", {}).get("grade_id") == "00-whoami-test")
    nb.cells.insert(index + 1, nbformat.from_dict(dict(nb.cells[index])))
    nb.cells[index].source += "\nassert True"
    notes = tamper.check_tampering(nb, NOTEBOOKS / CHAPTER / f"{CHAPTER}.ipynb")
    assert notes == ["edited 00-whoami-test", "duplicated 00-whoami-test"]
    ids = [c.metadata.get("nbgrader", {}).get("grade_id") for c in nb.cells]
    assert ids.count("00-whoami-test") == 1


@pytest.fixture(scope="module")
def graded_class(tmp_path_factory):
    folder = tmp_path_factory.mktemp("class")
    out = tmp_path_factory.mktemp("out")
    db = tmp_path_factory.mktemp("gradebook") / "gradebook.db"
    expected = make_class(folder)
    graded = grading.graded_class(folder, out, keep_scratch=True, jobs=2, limit=240, db=db,
                                  cell_timeout=20, keep=True)
    return expected, graded.batch, graded.rows, out, db, graded.scratch


def _output(out, student: str, tests_only: bool = False) -> str:
    """What the student's cells (or only the test cells) printed, as graded."""
    nb = nbformat.read(out / "autograded" / student / CHAPTER / f"{CHAPTER}.ipynb",
                       as_version=4)
    return "".join(o.get("text", "") or f"{o.get('ename')}: {o.get('evalue')}\n"
                   for c in nb.cells if c.cell_type == "code"
                   and (not tests_only or c.metadata.get("nbgrader", {}).get("grade"))
                   for o in c.outputs)


@pytest.mark.slow
def test_grades_csv_keeps_its_columns_with_the_notes_last(graded_class):
    _, _, rows, _, _, _ = graded_class
    assert list(next(iter(rows.values()))) == ["student", "chapter", "score", "max_score",
                                               "status", "submitted", "late", "notes"]
    assert {row["max_score"] for row in rows.values()} == {"2"}


@pytest.mark.slow
@pytest.mark.parametrize("student", sorted(CASES))
def test_submission_gets_its_status_and_score(graded_class, student):
    expected, _, rows, out, _, _ = graded_class
    status, score = expected[student]
    if status is not None:
        assert rows[student]["status"] == status
    if score is not None:
        assert float(rows[student]["score"]) == score, _output(out, student, tests_only=True)


@pytest.mark.slow
def test_instructor_gradebook_holds_the_same_scores(graded_class):
    from nbgrader.api import Gradebook

    _, result, _, _, db, _ = graded_class
    recorded = [o for o in result.outcomes if o.cells]
    assert len(recorded) >= len(CASES) - 1  # all but the unreadable notebook
    with Gradebook(f"sqlite:///{db}") as gb:
        for outcome in recorded:
            assert gb.find_submission(CHAPTER, outcome.student).score == outcome.score


def _hidden_lines(chapter: str) -> list[str]:
    """Every line of the chapter's hidden tests that a student's page could not hold otherwise."""
    source = nbformat.read(SOLUTIONS / chapter / f"{chapter}.ipynb", as_version=4)
    release = nbformat.read(NOTEBOOKS / chapter / f"{chapter}.ipynb", as_version=4)
    # A hidden line that is part of a line the student's notebook shows anyway (a
    # continuation such as `init_process_group=False)`) proves nothing when found.
    shown = "\n".join(c.source for c in release.cells)
    return [line.strip() for c in source.cells for block in feedback.HIDDEN_TESTS.findall(
        c.source) for line in block.splitlines()[1:-1]
        if len(line.strip()) > 20 and line.strip() not in shown]


@pytest.mark.slow
def test_feedback_shows_results_but_no_hidden_test(graded_class):
    _, _, _, out, _, _ = graded_class
    page = (out / "feedback" / "untouched" / f"{CHAPTER}.html").read_text()
    assert "NotImplementedError" in page
    hidden = _hidden_lines(CHAPTER)
    assert hidden and not [line for line in hidden if html.escape(line) in page]
    assert "hidden tests" in page


@pytest.mark.slow
def test_feedback_cuts_a_huge_output(graded_class):
    _, _, _, out, _, _ = graded_class
    assert (out / "feedback" / "prints_megabytes" / f"{CHAPTER}.html").stat().st_size < 1e6


@pytest.mark.slow
def test_keep_leaves_each_log_in_out_beside_the_graded_notebooks(graded_class):
    _, _, _, out, _, _ = graded_class
    log = (out / "kept" / "hangs_in_collective" / f"{CHAPTER}.log").read_text()
    assert "status: timed out" in log
    for step in ("submitted", "autograded"):
        folder = out / step / "correct" / CHAPTER
        assert (folder / f"{CHAPTER}.ipynb").exists() and (folder / "timestamp.txt").exists()


@pytest.mark.slow
def test_the_ranks_that_run_answers_find_no_solution_hidden_test_or_gradebook(graded_class):
    if not sandbox.available():
        pytest.skip("this machine does not allow user namespaces")
    shown = _output(graded_class[3], "snoops_from_its_answer", tests_only=True)
    assert "'found': []" in shown, shown
    assert int(shown.split("'seen': ")[1].split(",")[0]) > 10, shown  # commlab's files at least
    # no route: the namespace has loopback only (a refused connection would be another error)
    assert "'network': 'OSError'" in shown, shown


@pytest.mark.slow
def test_a_silenced_kernel_still_shows_the_tests_messages(graded_class):
    shown = _output(graded_class[3], "silences_errors", tests_only=True)
    assert "NotImplementedError" in shown


@pytest.mark.slow
def test_processes_left_behind_are_gone_and_changed_no_score(graded_class):
    _, result, rows, out, _, _ = graded_class
    # the answer cell started it in every rank (the test's message shows what they printed)
    assert "left a process behind" in _output(out, "rewrites_scores", tests_only=True)
    assert float(rows["rewrites_scores"]["score"]) == 0.0
    left = [p for p in psutil.process_iter(["cmdline"])
            if LEFTOVER_MARK in " ".join(p.info["cmdline"] or [])]
    assert left == []
    results = json.loads((out / "results.json").read_text())
    assert all(o["score"] <= o["max_score"] for o in results["outcomes"])


@pytest.mark.slow
@pytest.mark.parametrize("student, started, limit", [
    ("storms_threads", "threads started", "run at most 512 threads and processes"),
    ("storms_processes", "processes started", "run at most 512 threads and processes"),
    ("hogs_memory", None, "use at most 2 GB of memory")])
def test_a_rank_that_takes_the_machine_stops_at_its_limit_and_is_told_which(
        graded_class, student, started, limit):
    _, _, rows, out, _, _ = graded_class
    output = _output(out, student, tests_only=True)
    assert f"The grader lets {'a' if 'run' in limit else 'each'} rank {limit}" in output, output
    if started:
        counts = [int(n) for n in re.findall(rf"{started}: (\d+)", output)]
        assert len(counts) == 4 and max(counts) < limits.RANK_TASKS, output
    assert float(rows["correct"]["score"]) == 2.0, "graded beside it, at full marks"


@pytest.mark.slow
def test_grading_leaves_no_process_or_folder_behind(graded_class):
    *_, scratch = graded_class
    assert descendants() == []
    assert list(scratch.iterdir()) == []
    scratch.rmdir()
