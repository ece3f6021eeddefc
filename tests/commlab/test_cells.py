"""commlab.cells: what grading takes from each kind of notebook cell, read without running it:
a cell's definitions and imports, nothing from magics or a cell that does not parse."""

from __future__ import annotations

from commlab import cells


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
    assert kept.splitlines() == ["import math", "SIZES = [(3, 4), (2, 2)]", "", "",
                                 "@functools.cache", "def helper(x):", "    return x",
                                 "class Probe:", "    pass"]


def test_magics_and_broken_cells_give_nothing_and_do_not_fail():
    assert cells.definitions("%matplotlib inline\nimport os") == "\nimport os\n"
    assert cells.definitions("def broken(:\n    pass") == ""
    assert cells.imports("(" * 200_000) == []
