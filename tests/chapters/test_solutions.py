"""Every chapter, graded as a class is: the solution's answers, handed in as a student's
notebook, get full marks through `make grade`'s path (a scoring kernel with stand-ins, the
answers on sandboxed ranks, the data read back). `make validate` checks the same answers with
nbgrader's own Validator, which runs the whole notebook in one kernel."""

from __future__ import annotations

import re

import nbformat
import pytest

from commlab import checks
from grader import course
from support.class_factory import correct, write
from support.grading import graded_class

CHAPTERS = course.chapters()


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    folder = tmp_path_factory.mktemp("chapters")
    for chapter in CHAPTERS:
        write(folder / "class", "student", correct(chapter), chapter)
    # the grader's own cell limit (course.GRADING_CELL_TIMEOUT), the suite's other tests beside
    graded = graded_class(folder / "class", folder / "out", jobs=1, db=folder / "gradebook.db",
                          keep=True)
    return {o.chapter: o for o in graded.batch.outcomes}, folder / "out"


@pytest.mark.slow
@pytest.mark.parametrize("chapter", CHAPTERS)
def test_the_solution_gets_full_marks_through_the_grader(graded, chapter):
    outcomes, out = graded
    outcome = outcomes[chapter]
    shown = (out / "kept" / "student" / f"{chapter}.log").read_text()[:3000]
    assert (outcome.status.value, outcome.score) == ("graded", outcome.max_score), shown


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_every_test_cell_fits_the_graders_cell_limit_by_its_runs_own_limits(chapter):
    """A test cell runs its cases one after the other, each stopped by commlab within
    GRADING_TIMEOUT: the grader's cell limit must leave them all that, or an honest answer on a
    busy machine is cut (chapter 17's FullyShardedModule test took 29.6 s of a limit of 30)."""
    notebook = nbformat.read(course.SOLUTIONS / chapter / f"{chapter}.ipynb", as_version=4)
    for cell in notebook.cells:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id", "")
        if not cell.metadata.get("nbgrader", {}).get("grade"):
            continue
        runs = len(re.findall(r"\bchecks\.(?:Case|run)\(", cell.source))
        assert runs * checks.GRADING_TIMEOUT < course.GRADING_CELL_TIMEOUT, \
            f"{grade_id}: {runs} runs of up to {checks.GRADING_TIMEOUT} s each"
