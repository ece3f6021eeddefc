"""Where a score is decided: the scoring notebook holds none of the student's code, which reaches
it as data, every answer in order. (What comes back from the ranks is read as data only:
tests/grader/test_wire.py; the answers defined in the ranks: tests/grader/sandboxed/test_define.py;
whole submissions, hostile ones included, are graded in tests/grader/test_autograde.py.)"""

from __future__ import annotations

import nbformat

from grader.trusted import scoring_notebook as scoring
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
    submitted = scoring.submission_data(_marked_submission(), None)
    assert all(MARK in source for _, source in submitted["answers"])
    assert f"import json  # {MARK}" in submitted["imports"]


def test_the_scoring_notebook_has_every_test_cell_with_its_hidden_tests(tmp_path):
    notebook = scoring.scoring_notebook("00_launching_ranks", tmp_path / "s.json")
    tests = [c for c in notebook.cells if scoring.is_test(c)]
    assert [c.metadata.nbgrader.grade_id for c in tests] == ["00-whoami-test",
                                                             "00-join-group-test"]
    assert all("BEGIN HIDDEN TESTS" in c.source for c in tests)
    assert 'whoami = __scorer__.answer("00-whoami", "whoami")'.replace('"', "'") in "\n".join(
        c.source for c in notebook.cells)



def test_submission_data_keeps_answers_in_order_and_every_import_once():
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("import numpy as np\nx = np.ones(3)"),
        nbformat.v4.new_code_cell("def a():\n    pass", metadata={"nbgrader": {
            "solution": True, "grade": False, "grade_id": "q-a"}}),
        nbformat.v4.new_code_cell("import numpy as np"),
        nbformat.v4.new_code_cell("import secret_tests", metadata={"nbgrader": {
            "solution": False, "grade": True, "grade_id": "q-a-test", "points": 1}}),
    ])
    data = scoring.submission_data(nb, None)
    assert data["answers"] == [("q-a", "def a():\n    pass")]
    assert data["imports"] == ["import numpy as np"]
