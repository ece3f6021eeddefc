"""An instructor's term, as they would run it: one course folder, the default gradebook, `make
grade` week after week. Chapter 01 for a class, then chapter 02, then chapter 01 again with a
late submission: every run grades, and the gradebook ends with every submission.

The course's environment is reached through a link (`.venv` -> an environment elsewhere, as a
shared or cached environment often is), in a folder the sandbox hides.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from nbgrader.api import Gradebook

from support.class_factory import correct, release, write
from support.course_copy import VENV, make, tracked_copy
from support.grading import read_grades


@pytest.fixture(scope="module")
def course(tmp_path_factory) -> Path:
    root = tracked_copy(tmp_path_factory.mktemp("course"))
    (root / ".venv").symlink_to(VENV, target_is_directory=True)
    return root


def _grade(course: Path, students: dict[str, object], chapter: str, week: str):
    folder = course / "class" / week
    for student, nb in students.items():
        write(folder, student, nb, chapter)
    done = make("grade", f"SUBMISSIONS=class/{week}", f"OUT=grades/{week}",
                "GRADE_FLAGS=--jobs 1", cwd=course, timeout=900)
    return done, read_grades(course / "grades" / week)


@pytest.fixture(scope="module")
def term(course):
    weeks = [("01_broadcast", "week1", {"ann": correct("01_broadcast"),
                                        "ben": release("01_broadcast")}),
             ("02_scatter", "week2", {"ann": correct("02_scatter"),
                                      "ben": correct("02_scatter")}),
             ("01_broadcast", "week3", {"cat": correct("01_broadcast")})]
    return [_grade(course, students, chapter, week) for chapter, week, students in weeks]


@pytest.mark.slow
@pytest.mark.parametrize("week", [0, 1, 2])
def test_every_make_grade_of_the_term_grades(term, week):
    done, rows = term[week]
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert rows and all(row["status"] == "graded" for row in rows.values()), rows


@pytest.mark.slow
def test_the_default_gradebook_ends_the_term_with_every_submission(course, term):
    assert (course / "grader" / "gradebook.db").exists()
    with Gradebook(f"sqlite:///{course / 'grader' / 'gradebook.db'}") as gb:
        scores = {(s.assignment.name, s.student.id): s.score
                  for chapter in ("01_broadcast", "02_scatter")
                  for s in gb.assignment_submissions(chapter)}
    assert scores == {("01_broadcast", "ann"): 4.0, ("01_broadcast", "ben"): 0.0,
                      ("01_broadcast", "cat"): 4.0, ("02_scatter", "ann"): 4.0,
                      ("02_scatter", "ben"): 4.0}
