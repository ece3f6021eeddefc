"""Autograding a class: one command, every kind of submission, right scores and statuses."""

from __future__ import annotations

import csv
import sys
import zipfile
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "grader"))
import autograde  # noqa: E402

from support.class_factory import CHAPTER, correct, make_class  # noqa: E402
from support.processes import descendants  # noqa: E402


def test_lms_zip_and_folder_layouts_are_both_understood(tmp_path):
    nb = correct()
    with zipfile.ZipFile(tmp_path / "export.zip", "w") as archive:
        archive.writestr(f"alice_1234_5678_{CHAPTER}.ipynb", nbformat.writes(nb))
        archive.writestr(f"submissions/bob/{CHAPTER}/{CHAPTER}.ipynb", nbformat.writes(nb))
        archive.writestr("../escape.ipynb", "{}")
        archive.writestr("notes.txt", "not a notebook")
    found = autograde.collect(tmp_path / "export.zip", tmp_path / "scratch")
    assert sorted(found) == [("alice", CHAPTER), ("bob", CHAPTER)]
    assert not (tmp_path / "escape.ipynb").exists()


def test_tampering_is_found_and_duplicates_are_dropped(tmp_path):
    nb = correct()
    index = next(i for i, c in enumerate(nb.cells)
                 if c.metadata.get("nbgrader", {}).get("grade_id") == "00-whoami-test")
    nb.cells.insert(index + 1, nbformat.from_dict(dict(nb.cells[index])))
    nb.cells[index].source += "\nassert True"
    source = tmp_path / "in.ipynb"
    nbformat.write(nb, source)
    notes = autograde.clean_submission(source, CHAPTER, tmp_path / "out.ipynb")
    assert notes == ["edited 00-whoami-test", "duplicated 00-whoami-test"]
    cleaned = nbformat.read(tmp_path / "out.ipynb", as_version=4)
    ids = [c.metadata.get("nbgrader", {}).get("grade_id") for c in cleaned.cells]
    assert ids.count("00-whoami-test") == 1


@pytest.fixture(scope="module")
def graded_class(tmp_path_factory):
    folder = tmp_path_factory.mktemp("class")
    out = tmp_path_factory.mktemp("out")
    db = tmp_path_factory.mktemp("gradebook") / "gradebook.db"
    expected = make_class(folder)
    outcomes = autograde.grade_class(folder, out, jobs=2, limit=240, db=db, cell_timeout=20)
    return expected, outcomes, out, db


@pytest.mark.slow
def test_every_submission_gets_its_score_and_status(graded_class):
    expected, _, out, _ = graded_class
    with open(out / "grades.csv") as sheet:
        rows = {row["student"]: row for row in csv.DictReader(sheet)}
    assert list(next(iter(rows.values()))) == ["student", "chapter", "score", "max_score",
                                               "status"]
    assert sorted(rows) == sorted(expected)
    for student, (status, score) in expected.items():
        row = rows[student]
        assert (student, row["status"]) == (student, status)
        assert row["max_score"] == "2"
        if score is not None:
            assert (student, float(row["score"])) == (student, score)


@pytest.mark.slow
def test_instructor_gradebook_holds_the_same_scores(graded_class):
    from nbgrader.api import Gradebook

    _, outcomes, _, db = graded_class
    with Gradebook(f"sqlite:///{db}") as gb:
        for outcome in outcomes:
            if outcome.autograded is not None:
                assert gb.find_submission(CHAPTER, outcome.student).score == outcome.score


@pytest.mark.slow
def test_feedback_shows_results_but_no_hidden_test(graded_class):
    _, _, out, _ = graded_class
    page = (out / "feedback" / "bob" / f"{CHAPTER}.html").read_text()
    assert "NotImplementedError" in page
    assert "for world_size in (1, 2, 3)" not in page  # a hidden test's line
    assert "hidden tests" in page
    huge = (out / "feedback" / "grace" / f"{CHAPTER}.html").stat().st_size
    assert huge < 1_000_000


@pytest.mark.slow
def test_student_code_sees_no_solutions_and_no_network(graded_class):
    if not autograde.sandbox_available():
        pytest.skip("this machine does not allow user namespaces")
    _, _, out, _ = graded_class
    page = (out / "feedback" / "mallory" / f"{CHAPTER}.html").read_text()
    assert "solutions: []" in page
    assert "network: OSError" in page or "network: " in page and "reachable" not in page


@pytest.mark.slow
def test_grading_leaves_no_process_or_folder_behind(graded_class):
    assert descendants() == []
    assert not list(Path("/tmp").glob("commlab-job-*"))
