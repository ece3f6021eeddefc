"""The grading rule (commlab.cells) and the answers it defines (commlab.answers): what grading
takes of a notebook's cells, the same for the grader, Validate and `make check`."""

from __future__ import annotations

import os
import sys

import cloudpickle
import nbformat
import pytest

from commlab import answers, cells


def _answer(source: str, grade_id: str = "q-one") -> nbformat.NotebookNode:
    return nbformat.v4.new_code_cell(source, metadata={"nbgrader": {
        "solution": True, "grade": False, "grade_id": grade_id, "locked": False}})


def _test(grade_id: str, source: str = "pass") -> nbformat.NotebookNode:
    return nbformat.v4.new_code_cell(source, metadata={"nbgrader": {
        "solution": False, "grade": True, "grade_id": grade_id, "points": 1, "locked": True}})


def _bundle(*pieces: tuple[str, str | None, str], seed: dict | None = None) -> answers.Answers:
    return answers.Answers(os.urandom(8).hex(), list(pieces), cloudpickle.dumps(
        {"OFFSET": 10, "hues": answers.Module("colorsys")} if seed is None else seed))


# --- what the rule takes of a cell --------------------------------------------------------------

def test_definitions_keep_each_line_where_the_cell_has_it():
    source = ("import math\n"
              "print('trying it')\n"
              "SIZE = 4; result = run(SIZE)\n"
              "@decorated\n"
              "def helper(x):\n"
              "    return x + SIZE\n"
              "table = make_table()\n")
    kept = cells.definitions(source).splitlines()
    assert kept == ["import math", "", "SIZE = 4", "@decorated", "def helper(x):",
                    "    return x + SIZE"]
    assert cells.skipped(source) == {"result": (3, "SIZE = 4; result = run(SIZE)"),
                                     "table": (7, "table = make_table()")}


def test_an_import_no_piece_refers_to_is_left_out():
    source = "import math\nimport no_such_module_anywhere\ndef f(x):\n    return math.floor(x)\n"
    assert cells.definitions(source, referenced={"math", "floor"}).splitlines()[:2] == [
        "import math", ""]


def test_the_pieces_above_each_test_and_not_the_courses_own_cells():
    given = "import torch\ndef example(rank, world_size):\n    return rank\n"
    notebook = [nbformat.v4.new_code_cell(given),
                _answer("def one():\n    return helper()\n", "q-one"),
                nbformat.v4.new_code_cell("def helper():\n    return 1\n"),
                _test("q-one-test"),
                _answer("def two():\n    return 2\n", "q-two"),
                nbformat.v4.new_code_cell("def one():\n    return 'redefined below its test'\n"),
                _test("q-two-test")]
    found, cuts = cells.pieces(notebook, cells.given_sources([nbformat.v4.new_code_cell(given)]))
    assert [piece.label for piece in found] == [
        "answer cell q-one", 'cell "def helper():"', "answer cell q-two", 'cell "def one():"']
    assert cuts == {"q-one-test": 2, "q-two-test": 4}


# --- defining the answers (in a rank, or in a student's kernel) ---------------------------------

def test_answers_are_defined_with_the_chapters_definitions_and_the_students_helpers():
    bundle = _bundle(("answer cell q-one", "q-one", "import math\ndef shifted(x):\n"
                      "    return math.floor(x) + OFFSET + half(x)\n"),
                     ('cell "def half(x):"', None, "def half(x):\n    return x / 2\n"),
                     ("answer cell q-two", "q-two",
                      "def hue(r, g, b):\n    return hues.rgb_to_hsv(r, g, b)[0]\n"))
    assert answers.defined(bundle, "q-one", "shifted")(2.5) == 13.25
    assert answers.defined(bundle, "q-two", "hue")(0.0, 0.0, 1.0) == 2 / 3


def test_a_statement_that_computes_is_never_run():
    # an answer cell that tries its own example, and a cell that would end the process
    bundle = _bundle(("answer cell q-one", "q-one",
                      "def shifted(x):\n    return x + 1\nprint(shifted(1))\nos._exit(3)\n"))
    assert answers.defined(bundle, "q-one", "shifted")(1) == 2


def test_a_name_only_a_skipped_statement_sets_is_explained():
    bundle = _bundle(('cell "PEERS = list(range(4))"', None, "PEERS = list(range(4))\n"),
                     ("answer cell q-one", "q-one", "def peers():\n    return PEERS\n"))
    with pytest.raises(NameError) as raised:
        answers.defined(bundle, "q-one", "peers")()
    why = answers.explain_name_error(raised.value)
    assert why is not None and why.startswith(
        '`PEERS` is set in your cell "PEERS = list(range(4))", line 1, by a statement that '
        "calls something (`PEERS = list(range(4))`)")


@pytest.mark.parametrize("source, kind, words", [
    ("def other():\n    pass\n", NameError,
     "none of them defines shifted. Define shifted in your answer cell q-one"),
    ("def shifted(x):\n    return (x\n", SyntaxError,
     "'(' was never closed (your answer cell q-one, line 2)"),
    ("@(lambda f: 1 / 0)\ndef shifted(x):\n    return x\n", ZeroDivisionError,
     "division by zero (your answer cell q-one, line 1, while grading defined it)"),
])
def test_a_missing_or_broken_answer_is_reported_as_itself_with_its_cell(source, kind, words):
    with pytest.raises(kind) as raised:
        answers.defined(_bundle(("answer cell q-one", "q-one", source)), "q-one", "shifted")
    assert words in str(raised.value)


def test_a_students_traceback_names_the_answer_cell_and_its_line():
    bundle = _bundle(("answer cell q-one", "q-one",
                      "print('first')\n\ndef shifted(x):\n    return x / 0\n"))
    with pytest.raises(ZeroDivisionError) as raised:
        answers.defined(bundle, "q-one", "shifted")(1)
    frame = raised.traceback[-1]
    assert str(frame.path) == "<answer cell q-one>" and frame.lineno + 1 == 4
    assert "x / 0" in str(frame.statement)


def test_a_stand_in_goes_to_a_rank_as_its_definition():
    bundle = _bundle(("answer cell q-one", "q-one", "def shifted(x):\n    return x + OFFSET\n"))
    stand_in = answers.StandIn(bundle, "q-one", "shifted")
    assert cloudpickle.loads(cloudpickle.dumps(stand_in))(1) == 11
    assert stand_in(2) == 12
    with pytest.raises(TypeError, match="only inside a function run on the ranks"):
        class Sub(stand_in):  # noqa: F841 - what a test cell in the kernel might write
            pass


# --- Validate and make check: the same answers in the student's kernel --------------------------

def test_before_each_test_validate_binds_the_answers_as_graded(tmp_path):
    release_path = tmp_path / "notebooks" / "07_x" / "07_x.ipynb"
    release_path.parent.mkdir(parents=True)
    given = "import math\nOFFSET = 10\n"
    release = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell(given), _answer("def one():\n    raise NotImplementedError",
                                                  "07-one"),
        _test("07-one-test")])
    nbformat.write(release, release_path)
    submitted = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell(given),
        nbformat.v4.new_code_cell("scale = math.floor(2.5)\ndef helper():\n    return OFFSET\n"),
        _answer("def one():\n    return helper() + scale\n", "07-one"),
        _test("07-one-test", "assert one() == 10")])
    answers.prepare_notebook(submitted, course=tmp_path)
    added = submitted.cells[3]
    assert added.source.startswith("__import__(\"commlab.answers\")") and "nbgrader" not in \
        added.metadata and submitted.cells[4].metadata["nbgrader"]["grade_id"] == "07-one-test"
    namespace = {"math": sys.modules["math"], "OFFSET": 10, "scale": 2, "one": None}
    exec(added.source.replace('__import__("commlab.answers").answers.as_graded(',
                              "as_graded(namespace, "), {"as_graded": _as_graded_into,
                                                         "namespace": namespace})
    with pytest.raises(NameError, match="`scale` is set in your cell"):
        namespace["one"]()


def _as_graded_into(namespace: dict, data: dict) -> None:
    answers.as_graded(data, namespace)
