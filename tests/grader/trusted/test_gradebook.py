"""What `make grade` graded, seen with the instructor's own tools: nbgrader's API (the one the
Formgrader panels of JupyterLab use) lists every submission with its score and opens its graded
notebook; a manual score given there survives the next `make grade`, unless the test of that
cell changed; grades.csv and the feedback pages show the final score."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from support.class_factory import correct, release, write
from support.course_copy import VENV, make, tracked_copy
from support.grading import read_grades

CHAPTER = "01_broadcast"
TEST = "01-my-broadcast-test"


def _api(course: Path):
    """nbgrader's API over the course, configured as Formgrader is: by the course's
    grader/nbgrader_config.py."""
    from nbgrader.apps.api import NbGraderAPI
    from nbgrader.coursedir import CourseDirectory
    from traitlets.config.loader import PyFileConfigLoader

    config = PyFileConfigLoader("nbgrader_config.py", path=str(course / "grader")).load_config()
    return NbGraderAPI(coursedir=CourseDirectory(config=config), config=config)


def _grade(course: Path, week: str, students: dict) -> dict[str, dict[str, str]]:
    for student, notebook in students.items():
        write(course / "class" / week, student, notebook, CHAPTER)
    done = make("grade", f"SUBMISSIONS=class/{week}", f"OUT=grades/{week}", cwd=course,
                timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return read_grades(course / "grades" / week)


@pytest.fixture(scope="module")
def course(tmp_path_factory) -> Path:
    root = tracked_copy(tmp_path_factory.mktemp("course"))
    (root / ".venv").symlink_to(VENV, target_is_directory=True)
    return root


@pytest.fixture(scope="module")
def first(course):
    return _grade(course, "week1", {"ann": correct(CHAPTER), "ben": release(CHAPTER)})


@pytest.mark.slow
def test_formgrader_lists_every_submission_with_its_score(course, first):
    api = _api(course)
    submissions = {s["student"]: s for s in api.get_submissions(CHAPTER)}
    assert {s: (v["score"], v["autograded"]) for s, v in submissions.items()} == {
        "ann": (4.0, True), "ben": (0.0, True)}
    notebooks = api.get_notebook_submissions(CHAPTER, CHAPTER)
    assert sorted((n["student"], n["score"]) for n in notebooks) == [("ann", 4.0), ("ben", 0.0)]
    assert api.get_assignment(CHAPTER)["num_submissions"] == 2


@pytest.mark.slow
def test_a_submission_opens_as_the_graded_notebook_with_each_tests_result(course, first):
    graded = course / "autograded" / "ben" / CHAPTER / f"{CHAPTER}.ipynb"
    cells = {c["metadata"].get("nbgrader", {}).get("grade_id"): c
             for c in json.loads(graded.read_text())["cells"]}
    errors = [o for o in cells[TEST]["outputs"] if o["output_type"] == "error"]
    assert errors and "NotImplementedError" in errors[0]["evalue"] + "".join(
        errors[0]["traceback"])
    assert (course / "submitted" / "ben" / CHAPTER / "timestamp.txt").exists()


@pytest.fixture(scope="module")
def regraded(course, first):
    """A manual point for ben's first test in Formgrader's gradebook, then the class graded
    again with a late submission."""
    api = _api(course)
    with api.gradebook as gb:
        grade = gb.find_grade(TEST, CHAPTER, CHAPTER, "ben")
        grade.manual_score = 1.0
        gb.db.commit()
    rows = _grade(course, "week2", {"ben": release(CHAPTER), "cat": correct(CHAPTER)})
    return api, rows


@pytest.mark.slow
def test_a_manual_score_survives_grading_again(course, regraded):
    api, rows = regraded
    with api.gradebook as gb:
        assert gb.find_grade(TEST, CHAPTER, CHAPTER, "ben").manual_score == 1.0
        assert gb.find_submission(CHAPTER, "ben").score == 1.0
    assert (rows["ben"]["score"], rows["ben"]["notes"]) == (
        "1", f"manual score 1 on {TEST} (automatic 0)")
    assert (rows["cat"]["score"], rows["cat"]["notes"]) == ("4", "")
    page = (course / "grades" / "week2" / "feedback" / "ben" / f"{CHAPTER}.html").read_text()
    assert "Score: 1.0 / 4.0" in page  # the chapter's total, the manual point included
    assert "Score: 1.0 / 2.0" in page  # the test cell the instructor scored


@pytest.mark.slow
def test_a_manual_score_goes_when_the_test_of_its_cell_changed(course, regraded):
    path = course / "solutions" / CHAPTER / f"{CHAPTER}.ipynb"
    solution = json.loads(path.read_text())
    for cell in solution["cells"]:
        if cell["metadata"].get("nbgrader", {}).get("grade_id") == TEST:
            cell["source"] = ["# the same checks, one line longer\n"] + cell["source"]
    path.write_text(json.dumps(solution, indent=1) + "\n")
    assert make("generate", cwd=course, timeout=600).returncode == 0
    rows = _grade(course, "week3", {"ben": release(CHAPTER)})
    assert (rows["ben"]["score"], rows["ben"]["notes"]) == ("0", "")
    with _api(course).gradebook as gb:
        assert gb.find_grade(TEST, CHAPTER, CHAPTER, "ben").manual_score is None


def test_scratch_gradebooks_learn_the_schema_version_in_this_process_as_alembic_says_it():
    # nbgrader asks a new Python (alembic heads) every time it creates a gradebook: several
    # seconds of CPU a grading run, unless grading's own answer (the same) stands in for it
    import subprocess

    from nbgrader.dbutil import _temp_alembic_ini

    from grader.trusted import gradebook

    with _temp_alembic_ini("sqlite:////tmp/gradebook.db") as ini:
        said = subprocess.check_output([str(VENV / "bin" / "alembic"), "-c", ini, "heads"],
                                       text=True, timeout=120)
    assert gradebook.alembic_head() == said.split()[0]
