"""The typical wrong answer to each exercise fails its test cell with a message that says what is
wrong, and an unusual but right answer passes it.

The answers are files, chapter by chapter (tests/chapters/NN_name/wrong_answers/ and
right_answers/; tests/chapters/README.md says how one is written). Each case runs, in a real
Jupyter kernel, the chapter's set-up and definition cells, then the answer in place of the
solution cell, then the exercise's test cell as nbgrader would, and checks what the student
would read.
"""

from __future__ import annotations

import ast

import pytest

from commlab import cells
from grader import course
from support.answer_files import CHAPTERS, KINDS, SHARED, AnswerFile, answer_files
from support.chapter_kernel import code_cells, grade_id, source_of

# the attacks that are also wrong answers a student could hand in (their test cell fails in a
# plain kernel too, saying KERNEL_MESSAGE)
WRONG = answer_files("wrong_answers") + [a for a in answer_files("attacks") if a.says_in_a_kernel]
RIGHT = answer_files("right_answers")


def _cases(answers: list[AnswerFile]) -> list:
    """One case per answer and test cell that judges it."""
    return [pytest.param(answer, test, id=repr(answer) if len(answer.test_cells) == 1
                         else f"{answer!r}/{test}")
            for answer in answers for test in answer.test_cells]


@pytest.mark.parametrize("answer, test", _cases(WRONG))
def test_typical_wrong_answer_fails_with_a_message_that_names_the_mistake(chapter_kernel, answer,
                                                                          test):
    kernel = chapter_kernel(answer.chapter)
    # judged by the error messages of this cell, not by the next reply on the shell channel:
    # under load, the kernel_info requests of the start-up can leave extra replies there
    assert kernel.execute(answer.cell, timeout=60).error is None
    ran = kernel.execute(source_of(answer.chapter, test), timeout=120)
    assert ran.error is not None, f"the wrong answer {answer!r} passed {test}"
    # commlab.checks.CheckFailed is the AssertionError a test cell's expectation raises
    assert ran.error["ename"] == "CheckFailed", ran.error["evalue"]
    said = answer.says if answer.kind == "wrong_answers" else answer.says_in_a_kernel
    assert any(words in ran.error["evalue"] for words in said), ran.error["evalue"]


@pytest.mark.parametrize("answer, test", _cases(RIGHT))
def test_a_correct_variant_passes_the_test_cell(chapter_kernel, answer, test):
    kernel = chapter_kernel(answer.chapter)
    assert kernel.execute(answer.cell, timeout=60).error is None
    ran = kernel.execute(source_of(answer.chapter, test), timeout=120)
    assert ran.error is None, ran.error["evalue"]


def _stubs_and_tests(chapter: str) -> tuple[list[str], list[str]]:
    """The student notebook's answer cells (its stubs) and its test cells' grade ids."""
    graded = [(c, c["metadata"].get("nbgrader", {}))
              for c in code_cells(chapter, course.NOTEBOOKS) if grade_id(c)]
    return (["".join(c["source"]) for c, meta in graded if meta.get("solution")],
            [grade_id(c) for c, meta in graded if meta.get("grade") and not meta.get("solution")])


@pytest.mark.parametrize("chapter", course.chapters())
def test_the_student_notebooks_stubs_pass_no_test_cell(chapter_kernel, chapter):
    # what `make validate` checks with nbgrader validate --invert, which runs every cell of the
    # notebook: here the stubs are judged in the chapter's kernel, as the wrong answers are
    kernel = chapter_kernel(chapter)
    stubs, tests = _stubs_and_tests(chapter)
    assert stubs and tests
    for stub in stubs:
        assert kernel.execute(stub, timeout=60).error is None, stub
    for test in tests:
        ran = kernel.execute(source_of(chapter, test), timeout=120)
        assert ran.error is not None, f"{chapter}: the stubs pass {test}"
        # failing for want of a name of the chapter's would pass any answer too
        assert ran.error["ename"] != "NameError", (test, ran.error["evalue"])


def test_every_answer_file_stands_for_a_solution_cell_and_names_test_cells_of_its_chapter():
    chapters = set(course.chapters())
    folders = {p.name for p in CHAPTERS.iterdir() if p.is_dir()} - {"__pycache__", SHARED.name}
    assert folders <= chapters, f"folders under tests/chapters/ that are no chapter: " \
                                f"{sorted(folders - chapters)}"
    for folder in folders:
        kinds = {p.name for p in (CHAPTERS / folder).iterdir() if p.is_dir()} - {"__pycache__"}
        assert kinds <= set(KINDS), f"tests/chapters/{folder}: {sorted(kinds - set(KINDS))}"
    answers = [a for kind in KINDS for a in answer_files(kind)]
    for answer in answers:
        cells = {grade_id(c): c["metadata"]["nbgrader"] for c in code_cells(answer.chapter)
                 if grade_id(c)}
        where = answer.path.relative_to(CHAPTERS)
        assert cells.get(answer.answer_cell, {}).get("solution"), \
            f"{where}: ANSWER_CELL {answer.answer_cell!r} is no answer cell of {answer.chapter}"
        for test in answer.test_cells:
            assert cells.get(test, {}).get("grade") and not cells[test].get("solution"), \
                f"{where}: TEST_CELL {test!r} is no test cell of {answer.chapter}"
        assert bool(answer.says) == (answer.kind == "wrong_answers") or \
            answer.kind == "attacks", f"{where}: MESSAGE is for wrong answers and attacks"
        assert not answer.says_in_a_kernel or answer.kind == "attacks", \
            f"{where}: KERNEL_MESSAGE is for attacks that are wrong answers too"
    attackers = [a.name for a in answer_files("attacks")]
    # an attack's name is its student's in the graded class
    assert len(attackers) == len(set(attackers)), "two attacks of one name"


def test_every_statement_of_an_answer_file_runs_when_grading_defines_it():
    # grading takes from an answer cell only what defines (commlab.cells): a statement it skips
    # would make an attack harmless for a reason of its own, and a wrong answer right
    for answer in [a for kind in KINDS for a in answer_files(kind)]:
        tree = ast.parse(answer.cell)
        skipped = [ast.unparse(node).splitlines()[0] for node in tree.body
                   if not cells.is_definition(node)
                   and not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant))]
        assert skipped == [], f"{answer.path.relative_to(CHAPTERS)}: grading skips {skipped}"
