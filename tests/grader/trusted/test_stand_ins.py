"""The stand-ins the scoring kernel has for the student's answers (grader/trusted/stand_ins.py):
the ranks run only the imports the answers use, and a stand-in is no class to build on in the
kernel."""

from __future__ import annotations

import pytest

from grader.trusted import stand_ins


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
