"""The student's answers, defined inside a rank (grader/sandboxed/define.py): with the scoring
kernel's definitions, and a missing or broken answer named by its cell."""

from __future__ import annotations

import os

import pytest

from grader.sandboxed import define


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
