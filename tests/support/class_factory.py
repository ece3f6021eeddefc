"""A small class of chapter-00 submissions, one of each kind an instructor meets.

Used by test_autograde.py and bench/grade_bench.py. Each entry: student -> (notebook, expected
status, expected score or None when only the status matters).
"""

from __future__ import annotations

import copy
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[2]
CHAPTER = "00_launching_ranks"


def _release():
    return nbformat.read(ROOT / "notebooks" / CHAPTER / f"{CHAPTER}.ipynb", as_version=4)


def _answers() -> dict[str, str]:
    source = nbformat.read(ROOT / "solutions" / CHAPTER / f"{CHAPTER}.ipynb", as_version=4)
    return {c.metadata.nbgrader.grade_id: c.source for c in source.cells
            if c.get("metadata", {}).get("nbgrader", {}).get("solution")}


def _cell_index(nb, grade_id: str) -> int:
    return next(i for i, c in enumerate(nb.cells)
                if c.get("metadata", {}).get("nbgrader", {}).get("grade_id") == grade_id)


def correct():
    nb = _release()
    for grade_id, source in _answers().items():
        nb.cells[_cell_index(nb, grade_id)].source = source
    return nb


def _with_answer(grade_id: str, source: str, base=None):
    nb = base if base is not None else correct()
    nb.cells[_cell_index(nb, grade_id)].source = source
    return nb


def _after(nb, grade_id: str, source: str):
    nb.cells.insert(_cell_index(nb, grade_id) + 1, nbformat.v4.new_code_cell(source))
    return nb


def make_class(folder: Path, with_slow_cases: bool = True) -> dict[str, tuple[str, float | None]]:
    """Write ``<student>/00_launching_ranks/00_launching_ranks.ipynb`` for each student."""
    full = 2.0
    cases: dict[str, tuple[object, str, float | None]] = {
        "alice": (correct(), "graded", full),
        "bob": (_release(), "graded", 0.0),
        # a rank that waits in a collective nobody else makes: commlab stops it within 8 s
        "carol": (_with_answer("00-whoami", (
            "def whoami():\n"
            "    if dist.get_rank() == 0:\n"
            "        dist.barrier()\n"
            "    return {'rank': dist.get_rank(), 'world_size': dist.get_world_size(),\n"
            "            'backend': dist.get_backend()}\n")), "timed out", 1.0),
        "erin": (_after(correct(), "00-whoami", "import os\nos._exit(1)"), "kernel died", 0.0),
        "frank": (_after(correct(), "00-whoami", "import sys\nsys.exit(2)"), "graded", full),
        "grace": (_after(correct(), "00-whoami", "print('x' * 3_000_000)"), "graded", full),
        "kim": ("this is not a notebook", "missing", 0.0),
        # reads what it should not see, and tries the network
        "mallory": (_after(correct(), "00-whoami", (
            "import os, socket\n"
            f"print('solutions:', sorted(os.listdir({str(ROOT / 'solutions')!r})))\n"
            "try:\n"
            "    socket.create_connection(('192.0.2.1', 80), timeout=2)\n"
            "    print('network: reachable')\n"
            "except OSError as err:\n"
            "    print('network:', type(err).__name__)\n")), "graded", full),
    }
    tampered_edit = correct()
    tampered_edit.cells[_cell_index(tampered_edit, "00-whoami-test")].source = "pass"
    cases["heidi"] = (tampered_edit, "tests tampered with", full)
    tampered_delete = correct()
    del tampered_delete.cells[_cell_index(tampered_delete, "00-join-group-test")]
    cases["ivan"] = (tampered_delete, "tests tampered with", full)
    duplicated = correct()
    i = _cell_index(duplicated, "00-whoami-test")
    duplicated.cells.insert(i + 1, copy.deepcopy(duplicated.cells[i]))
    cases["judy"] = (duplicated, "tests tampered with", full)
    if with_slow_cases:
        cases["dave"] = (_after(correct(), "00-whoami", "while True:\n    pass"), "timed out",
                         None)
    expected = {}
    for student, (nb, status, score) in cases.items():
        path = folder / student / CHAPTER / f"{CHAPTER}.ipynb"
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(nb, str):
            path.write_text(nb)
        else:
            nbformat.write(nb, path)
        expected[student] = (status, score)
    return expected
