"""`make grade --fresh-outputs`: each student's notebook runs again, sandboxed, for fresh outputs
on the feedback page. Its cells are code like the answers: a cell that kills the kernel makes
the submission "kernel died", a cell's view of the machine holds nothing of the grader's, no
terminal, and what one student's kernel leaves behind is gone before the next one starts."""

from __future__ import annotations

import subprocess
from pathlib import Path

import nbformat
import pytest

from grader.sandboxed import namespaces
from support.class_factory import NETWORK, SNOOP, after, correct, write
from support.grading import graded_class
from support.processes import descendants

pytestmark = pytest.mark.skipif(not namespaces.available(),
                                reason="this machine does not allow user namespaces")

LEAVES = '''\
import ctypes, os
libc = ctypes.CDLL(None)
print("segment made:", libc.shmget(0x0FEEDBEE, 4096, 0o1000 | 0o666) >= 0)
for folder in ("/dev/shm", os.getcwd()):
    open(os.path.join(folder, "commlab-left"), "w").write("x")
'''
FINDS = '''\
import ctypes, glob, os
libc = ctypes.CDLL(None)
print("segment found:", libc.shmget(0x0FEEDBEE, 4096, 0o666) >= 0)
print("files found:", [f for f in ("/dev/shm/commlab-left", "commlab-left") if os.path.exists(f)])
reached = []
for path in ["/dev/tty", "/dev/console", *glob.glob("/dev/pts/*")]:
    try:
        open(path, "w").write("a student writes here\\n")
        reached.append(path)
    except OSError:
        pass
print("terminals reached:", reached)
'''
# a chapter whose notebook runs again in a few seconds (chapter 00's spawns processes that
# import torch), the extra cells after its first answer
CHAPTER, ANSWER, FULL_MARKS = "05_reduce", "05-my-reduce", 5.0
CLASS = {
    "a_correct": (after(correct(CHAPTER), ANSWER, "print('fresh output')"), "graded",
                  FULL_MARKS),
    "b_kills_its_kernel": (after(correct(CHAPTER), ANSWER, "import os\nos._exit(1)"),
                           "kernel died", 0.0),
    "c_leaves_things": (after(correct(CHAPTER), ANSWER, LEAVES), "graded", FULL_MARKS),
    "d_finds_things": (after(after(after(correct(CHAPTER), ANSWER, FINDS), ANSWER, SNOOP),
                             ANSWER, NETWORK), "graded", FULL_MARKS),
}


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    folder = tmp_path_factory.mktemp("fresh")
    for student, (nb, _, _) in CLASS.items():
        write(folder / "class", student, nb, CHAPTER)
    # one worker: the students' kernels come one after the other, as the next student's would
    graded = graded_class(folder / "class", folder / "out", jobs=1, db=folder / "gradebook.db",
                          fresh_outputs=True)
    # a kernel that could not start stops the batch: say so, rather than find no rows below
    assert graded.batch.kernel_error is None, graded.batch.kernel_error
    return graded.rows, folder / "out"


def _printed(out: Path, student: str) -> str:
    nb = nbformat.read(out / "autograded" / student / CHAPTER / f"{CHAPTER}.ipynb", 4)
    return "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code"
                   for o in c.outputs)


@pytest.mark.slow
@pytest.mark.parametrize("student", sorted(CLASS))
def test_submission_gets_its_status_and_score(graded, student):
    rows, _ = graded
    _, status, score = CLASS[student]
    assert (rows[student]["status"], float(rows[student]["score"])) == (status, score)


@pytest.mark.slow
def test_the_page_shows_what_the_notebook_prints_now(graded):
    _, out = graded
    assert "fresh output" in (out / "feedback" / "a_correct" / f"{CHAPTER}.html").read_text()


@pytest.mark.slow
def test_a_kernel_sees_nothing_of_the_grader_the_network_or_a_terminal(graded):
    _, out = graded
    printed = _printed(out, "d_finds_things")
    assert "found: []" in printed, printed
    assert int(printed.split("looked at ")[1].split()[0]) > 1000  # it walked what it can see
    assert "network: OSError" in printed
    assert "terminals reached: []" in printed


@pytest.mark.slow
def test_what_one_kernel_leaves_is_gone_for_the_next(graded):
    _, out = graded
    assert "segment made: True" in _printed(out, "c_leaves_things")
    printed = _printed(out, "d_finds_things")
    assert "segment found: False" in printed and "files found: []" in printed, printed
    assert "0x0feedbee" not in subprocess.run(["ipcs", "-m"], capture_output=True,
                                              text=True).stdout
    assert descendants() == []
