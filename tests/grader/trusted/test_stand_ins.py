"""The stand-ins the scoring kernel has for the student's answers (grader/trusted/stand_ins.py):
a stand-in is no class to build on in the kernel. (Which pieces of the notebook a test sends the
ranks: tests/grader/trusted/test_scoring_notebook.py.)"""

from __future__ import annotations

import pytest

from grader.trusted import stand_ins


def test_a_stand_in_can_not_be_subclassed_in_the_kernel():
    stand_in = stand_ins.Answer(stand_ins.Book([], {}), "q-one", "Model")
    with pytest.raises(TypeError, match="only inside a function run on the ranks"):
        class Sub(stand_in):  # noqa: F841 - what a test cell in the kernel might write
            pass
