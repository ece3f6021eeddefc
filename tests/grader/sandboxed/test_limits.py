"""A submission's limits (grader.sandboxed.limits): set where the PID namespace is the
submission's own, never the machine's, and each reached one named in a sentence for the student.
(Whole submissions that reach them are graded in tests/grader/test_autograde.py.)"""

from __future__ import annotations

import errno
import subprocess
import sys
import textwrap

import pytest

from grader.sandboxed import limits
from grader.sandboxed import namespaces as sandbox

pytestmark = pytest.mark.skipif(not sandbox.available(),
                                reason="this machine does not allow user namespaces")

THREADS_UNTIL_REFUSED = textwrap.dedent("""
    import threading
    from grader.sandboxed import limits
    limits.for_rank()
    threading.stack_size(64 * 1024)
    stop, started = threading.Event(), 0
    try:
        while started < 3000:
            threading.Thread(target=stop.wait, daemon=True).start()
            started += 1
    except RuntimeError as exc:
        print(started, limits.explain(exc))
    stop.set()
""")


def _in_namespaces(code: str, first_process: bool = True) -> subprocess.CompletedProcess:
    unshare = ["unshare", "--user", "--map-root-user"]
    if first_process:  # else it shares its PID namespace (the machine's) with every process
        unshare += ["--pid", "--fork", "--mount-proc"]
    return subprocess.run([*unshare, sys.executable, "-c", code], capture_output=True,
                          text=True, timeout=120)


def test_a_rank_in_its_own_pid_namespace_starts_no_more_than_its_tasks():
    done = _in_namespaces(THREADS_UNTIL_REFUSED)
    assert done.returncode == 0, done.stderr
    started, said = done.stdout.split(" ", 1)
    assert limits.RANK_TASKS - 16 < int(started) < limits.RANK_TASKS
    assert f"at most {limits.RANK_TASKS} threads and processes" in said


def test_limits_are_set_only_by_the_first_process_of_a_new_pid_namespace():
    # any other process would write the pid_max of a namespace it shares with others
    done = _in_namespaces("from grader.sandboxed import limits\nlimits.for_rank()",
                          first_process=False)
    assert done.returncode != 0
    assert "only the first process of a new PID namespace" in done.stderr


@pytest.mark.parametrize("exc, names", [
    (RuntimeError("can't start new thread"), "512 threads and processes together, in at most 2"),
    (BlockingIOError(errno.EAGAIN, "Resource temporarily unavailable"), "512 threads and"),
    (RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 3 GB"),
     "2 GB of memory"),
    (MemoryError(), "2 GB of memory"),
    (OSError(errno.EMFILE, "Too many open files"), "1024 files and sockets"),
    (OSError(errno.EFBIG, "File too large"), "256 MB of disk"),
    (OSError(errno.ENOSPC, "No space left on device"), "256 MB of disk")])
def test_each_limit_reached_is_named_for_the_student(exc, names):
    assert names in limits.explain(exc)


def test_other_errors_name_no_limit():
    assert limits.explain(ValueError("shapes differ")) == ""
    assert limits.explain(ConnectionResetError(errno.ECONNRESET, "reset")) == ""
