"""Where a score is decided: the scoring notebook holds none of the student's code, what comes
back from the ranks is read as data only, and the student's answers are defined in the ranks.
(Whole submissions, hostile ones included, are graded in test_autograde.py.)"""

from __future__ import annotations

import io
import os
import pickle
from pathlib import Path

import nbformat
import pytest
import torch

from commlab import cells, errors
from commlab.result import RunResult
from commlab.timeline import Span
from commlab.trace import Call, TensorInfo
from grader import wire
from grader.sandboxed import define
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


def test_other_cells_give_only_their_definitions():
    source = ("import math\n"
              "SIZES = [(3, 4), (2, 2)]\n"
              "model = make_model()\n"
              "torch.manual_seed(0)\n"
              "@functools.cache\n"
              "def helper(x):\n"
              "    return x\n"
              "class Probe:\n"
              "    pass\n"
              "result = commlab.run(example, 4)\n"
              "result\n")
    kept = cells.definitions(source)
    assert kept.splitlines() == ["import math", "SIZES = [(3, 4), (2, 2)]", "@functools.cache",
                                 "def helper(x):", "    return x", "class Probe:", "    pass"]


def test_magics_and_broken_cells_give_nothing_and_do_not_fail():
    assert cells.definitions("%matplotlib inline\nimport os") == "import os"
    assert cells.definitions("def broken(:\n    pass") == ""
    assert cells.imports("(" * 200_000) == []


# --- what comes back from the ranks --------------------------------------------------------------

def _call() -> Call:
    info = TensorInfo((2,), "float32", "cpu", 8)
    return Call(op="batch_isend_irecv", index=1, seq=0, rank=0, group_ranks=(0, 1),
                tensors={"tensors": [info]}, sent_to={1: 8}, received_from={1: 8},
                started=1.5, finished=2.5, before={"tensors": [torch.ones(2)]},
                ops=[("isend", 1, info)])


def test_a_result_comes_back_with_its_records_and_values():
    import collections

    pair = collections.namedtuple("Pair", "a b")
    result = RunResult(2, "gloo", returns=[{"x": torch.arange(3), "p": pair(1, 2.5)},
                                           [Span("step", 1.0, 2.0), None, "s", {1, 2}]],
                       stdout=["a", "b"], stderr=["", ""], trace=[[_call()], []],
                       warnings=[["w"], []])
    back = wire.decode(wire.encode(result))
    assert isinstance(back, RunResult)
    assert torch.equal(back.returns[0]["x"], torch.arange(3))
    assert back.returns[0]["p"] == (1, 2.5)
    assert back.returns[1] == [Span("step", 1.0, 2.0), None, "s", {1, 2}]
    call = back.trace[0][0]
    assert isinstance(call, Call) and call.label == "batch_isend_irecv #1"
    assert (call.sent_to, call.received_from, call.started, call.finished) == (
        {1: 8}, {1: 8}, 1.5, 2.5)
    assert torch.equal(call.before["tensors"][0], torch.ones(2))
    assert call.ops[0] == ("isend", 1, TensorInfo((2,), "float32", "cpu", 8))
    assert back.bytes_sent() == [8, 0]


def test_failures_come_back_as_the_same_errors():
    ran = RunResult(2, "gloo", [None, None], ["x", "y"], ["", ""], [[], []], [[], []])
    for error in (errors.RankError("rank 1 raised", {1: "ValueError: no"}, ran),
                  errors.RankCrashed("rank 0 died", {0: "killed by SIGKILL"}, ran,
                                     {0: "SIGKILL"}),
                  errors.CollectiveTimeout("stuck", {0: "all_reduce #1"}, ran),
                  ValueError("world_size must be at least 1")):
        back = wire.decode(wire.encode(error))
        assert type(back) is type(error) and str(back) == str(error)
        assert getattr(back, "failures", None) == getattr(error, "failures", None)
    assert wire.decode(wire.encode(errors.RankCrashed("d", {}, ran, {0: "SIGABRT"}))).signals \
        == {0: "SIGABRT"}


def test_what_is_not_data_is_refused_with_what_to_return():
    result = RunResult(1, "gloo", [torch.nn.Linear(2, 2)], [""], [""], [[]], [[]])
    back = wire.decode(wire.encode(result))
    assert isinstance(back, wire.NotSendable)
    assert "what rank 0 returned is a Linear" in str(back) and "Return tensors" in str(back)


class _Explodes:
    def __reduce__(self):
        return os.system, ("touch " + str(Path(os.environ.get("TMPDIR", "/tmp")) / "pwned"),)


def test_a_forged_reply_that_would_run_code_is_only_an_error(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    for forged in (pickle.dumps({"kind": "result", "result": _Explodes()}),
                   _saved({"kind": "result", "result": _Explodes()}),
                   b"\x10\x00\x00\x00forged-reply", b""):
        back = wire.decode(forged)
        assert isinstance(back, errors.CommlabError)
        assert "not a run's result" in str(back)
    assert not (tmp_path / "pwned").exists()


def _saved(value) -> bytes:
    buffer = io.BytesIO()
    torch.save(value, buffer)
    return buffer.getvalue()


def test_a_reply_too_large_is_refused(monkeypatch):
    monkeypatch.setattr(wire, "MAX_BYTES", 10)
    assert "more than the 10" in str(wire.decode(b"x" * 11))


# --- the answers, in a rank -------------------------------------------------------------------

def _bundle(*cells: tuple[str, str], imports=()) -> define.Answers:
    import cloudpickle

    return define.Answers(os.urandom(8).hex(), list(cells), list(imports),
                           cloudpickle.dumps({"OFFSET": 10,
                                              "hues": define._Module("colorsys")}))


def test_a_rank_defines_the_students_answers_with_the_kernels_definitions():
    bundle = _bundle(("q-one", "def shifted(x):\n    return math.floor(x) + OFFSET\n"),
                     ("q-two", "def hue(r, g, b):\n    return hues.rgb_to_hsv(r, g, b)[0]\n"),
                     imports=["import math"])
    assert define.defined(bundle, "q-one", "shifted")(2.5) == 12
    assert define.defined(bundle, "q-two", "hue")(0.0, 0.0, 1.0) == 2 / 3


@pytest.mark.parametrize("source, words", [
    ("def other():\n    pass\n", "your answer cell (q-one) does not define shifted"),
    ("def shifted(:\n", "your answer cell (q-one) raised SyntaxError"),
    ("raise RuntimeError('at the top')\ndef shifted(x):\n    return x\n",
     "raised RuntimeError when it ran: at the top"),
])
def test_a_missing_or_broken_answer_says_which_cell(source, words):
    with pytest.raises(NameError, match=r"shifted is not defined") as raised:
        define.defined(_bundle(("q-one", source)), "q-one", "shifted")
    assert words in str(raised.value)


def test_a_students_traceback_names_the_answer_cell():
    bundle = _bundle(("q-one", "def shifted(x):\n    return x / 0\n"))
    with pytest.raises(ZeroDivisionError) as raised:
        define.defined(bundle, "q-one", "shifted")(1)
    frame = raised.traceback[-1]
    assert str(frame.path) == "<answer cell q-one>" and "x / 0" in str(frame.statement)


def test_the_ranks_run_only_the_import_lines_whose_names_the_answers_use():
    # every rank of every launch runs them: a chapter's plotting import costs each rank time
    book = stand_ins.Book([("q-one", "def shifted(x):\n    return math.floor(x) + np.sign(x)\n")],
                          ["import math", "import numpy as np", "import matplotlib.pyplot as plt",
                           "from os import path", "import torch.distributed as dist"])
    assert book.imports == ["import math", "import numpy as np"]
    assert stand_ins.Book([], ["import math"]).imports == []


def test_a_stand_in_can_not_be_subclassed_in_the_kernel():
    stand_in = stand_ins.Answer(stand_ins.Book([], []), "q-one", "Model")
    with pytest.raises(TypeError, match="only inside a function run on the ranks"):
        class Sub(stand_in):  # noqa: F841 - what a test cell in the kernel might write
            pass


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
