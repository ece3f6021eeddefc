"""Every chapter, graded as a class is: the solution's answers, handed in as a student's
notebook, get full marks through `make grade`'s path (a scoring kernel with stand-ins, the
answers on sandboxed ranks, the data read back). `make validate` checks the same answers with
nbgrader's own Validator, which runs the whole notebook in one kernel."""

from __future__ import annotations

import pytest

from grader import course
from support.class_factory import correct, write
from support.grading import graded_class

CHAPTERS = course.chapters()


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    folder = tmp_path_factory.mktemp("chapters")
    for chapter in CHAPTERS:
        write(folder / "class", "student", correct(chapter), chapter)
    # a cell's time limit is test_autograde's business: here the suite's other tests share the
    # machine, and chapter 17's test cells take seconds each even alone
    graded = graded_class(folder / "class", folder / "out", jobs=2, db=folder / "gradebook.db",
                          keep=True, cell_timeout=120)
    return {o.chapter: o for o in graded.batch.outcomes}, folder / "out"


@pytest.mark.slow
@pytest.mark.parametrize("chapter", CHAPTERS)
def test_the_solution_gets_full_marks_through_the_grader(graded, chapter):
    outcomes, out = graded
    outcome = outcomes[chapter]
    shown = (out / "kept" / "student" / f"{chapter}.log").read_text()[:3000]
    assert (outcome.status.value, outcome.score) == ("graded", outcome.max_score), shown
