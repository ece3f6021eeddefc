"""Where a score is decided: the scoring notebook holds none of the student's code, which reaches
it as data, and each test sends the ranks the pieces of the notebook above it. (What comes back
from the ranks is read as data only: tests/grader/test_wire.py; the answers defined in a rank:
tests/commlab/test_answers.py; whole submissions, hostile ones included, are graded in
tests/grader/test_autograde.py.)"""

from __future__ import annotations

import nbformat

from grader.trusted import scoring_notebook as scoring
from grader.trusted import stand_ins
from support.class_factory import correct

MARK = "student-code-marker-7f3a"


def _marked_submission():
    """The correct chapter-00 notebook with a marker in every code cell."""
    nb = correct()
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.source += f"\n# {MARK}\nimport json  # {MARK}"
    return nb


def test_the_scoring_notebook_holds_no_line_of_the_students(tmp_path):
    data = tmp_path / "submission.json"
    data.write_text("{}")
    notebook = scoring.scoring_notebook("00_launching_ranks", data)
    assert all(MARK not in cell.source for cell in notebook.cells)
    # the student's code reaches the kernel only as data, in the file begin() reads
    submitted = scoring.submission_data(_marked_submission(), None, "00_launching_ranks")
    assert submitted["pieces"] and all(MARK in source for _, _, source in submitted["pieces"])


def test_the_scoring_notebook_has_every_test_cell_with_its_hidden_tests(tmp_path):
    notebook = scoring.scoring_notebook("00_launching_ranks", tmp_path / "s.json")
    tests = [c for c in notebook.cells if scoring.is_test(c)]
    assert [c.metadata.nbgrader.grade_id for c in tests] == ["00-whoami-test",
                                                             "00-join-group-test"]
    assert all("BEGIN HIDDEN TESTS" in c.source for c in tests)
    assert 'whoami = __scorer__.answer("00-whoami", "whoami")'.replace('"', "'") in "\n".join(
        c.source for c in notebook.cells)



def test_each_test_sends_the_pieces_above_it_and_only_the_names_they_use():
    # the chapter's helpers go to the ranks only where an answer or a student's cell uses one
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("def helper(x):\n    return x + OFFSET\n"),
        nbformat.v4.new_code_cell("def a():\n    return helper(1)", metadata={"nbgrader": {
            "solution": True, "grade": False, "grade_id": "q-a"}}),
        nbformat.v4.new_code_cell("import secret_tests", metadata={"nbgrader": {
            "solution": False, "grade": True, "grade_id": "q-a-test", "points": 1}}),
        nbformat.v4.new_code_cell("def late():\n    pass\n"),
    ])
    data = scoring.submission_data(nb, None)
    assert data["pieces"] == [('cell "def helper(x):"', None,
                               "def helper(x):\n    return x + OFFSET\n"),
                              ("answer cell q-a", "q-a", "def a():\n    return helper(1)"),
                              ('cell "def late():"', None, "def late():\n    pass\n")]
    assert data["cuts"] == {"q-a-test": 2}
    book = stand_ins.Book([tuple(p) for p in data["pieces"]], data["cuts"],
                          shared={"OFFSET", "plt"})
    book.testing("q-a-test")
    assert [label for label, _, _ in book.bundle().pieces] == [
        'cell "def helper(x):"', "answer cell q-a"]
    book.testing(None)
    assert len(book.bundle().pieces) == 3
