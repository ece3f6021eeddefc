"""What one submission may take of the machine, enforced by the kernel on the processes that run
its code, so that one submission can neither starve the machine nor slow another student's case
past its time limit, whatever its code does.

- **Processes and threads**, together: a PID namespace's own ``pid_max`` (Linux 6.14 and later),
  :data:`RANK_TASKS` in each rank's namespace and :data:`SUBMISSION_TASKS` in the rank host's and
  in the student's kernel's (a rank's tasks take a number in every namespace above it too, so
  the host's bounds the submission's ranks together). ``RLIMIT_NPROC`` would not do: the kernel
  does not apply it to processes of the machine's root, which the grader is in a container.
  Where ``pid_max`` is not per namespace (an older kernel), ``RLIMIT_NPROC`` stands in for it.
- **Memory**: ``RLIMIT_DATA`` (heap, anonymous mappings, thread stacks) per process,
  :data:`MEMORY_BYTES`.
- **Open files**: ``RLIMIT_NOFILE``, :data:`OPEN_FILES`.
- **Disk**: a rank writes only to its own tmpfs folders (:mod:`.seal`), :data:`DISK_BYTES` each,
  and no file over that size (``RLIMIT_FSIZE``).

Student code cannot raise any of them: a hard limit rises only with ``CAP_SYS_RESOURCE`` in the
machine's first user namespace, which no process of the sandbox has; ``/proc/sys`` is read-only
in a rank, whose system-call filter refuses ``mount``; the student's kernel runs with no
capability at all (:func:`drop_capabilities`).

:func:`explain` turns what a process sees when it reaches a limit (``can't start new thread``,
``Resource temporarily unavailable``, ``can't allocate memory``, ...) into the sentence a student
reads under the error.
"""

from __future__ import annotations

import ctypes
import errno
import os
import resource
import signal
from pathlib import Path

RANK_TASKS = 512          # a rank's own threads and processes; torch uses one per core and a few
SUBMISSION_TASKS = 4096   # every rank of a submission's launch, or its kernel's processes
MEMORY_BYTES = 2 * 2**30  # a rank of a chapter uses about 0.25 GB
OPEN_FILES = 1024
DISK_BYTES = 256 * 2**20  # each of a rank's writable folders (its TMPDIR and /dev/shm)

_PID_MAX = Path("/proc/sys/kernel/pid_max")
_PR_CAPBSET_DROP = 24


def _cap(kind: int, value: int) -> None:
    """Lower both the soft and the hard limit (never raise one the process was given lower)."""
    _, hard = resource.getrlimit(kind)
    value = value if hard == resource.RLIM_INFINITY else min(value, hard)
    resource.setrlimit(kind, (value, value))


def _tasks(count: int) -> None:
    """At most ``count`` threads and processes in this process's PID namespace, of which it must
    be the first process (never the machine's: its pid_max would be every process's)."""
    if os.getpid() != 1:
        raise RuntimeError("limits: only the first process of a new PID namespace sets its "
                           "pid_max")
    try:
        _PID_MAX.write_text(str(count))
    except OSError:  # pid_max is the whole machine's here: count this user's tasks instead
        _cap(resource.RLIMIT_NPROC, count)


def for_submission() -> None:
    """In the first process of a submission's namespace (its kernel, its rank host)."""
    _tasks(SUBMISSION_TASKS)
    _cap(resource.RLIMIT_DATA, 2 * MEMORY_BYTES)
    _cap(resource.RLIMIT_NOFILE, OPEN_FILES)


def for_rank() -> None:
    """In a rank, inside its own PID namespace, before anything of the submission runs."""
    _tasks(RANK_TASKS)
    _cap(resource.RLIMIT_DATA, MEMORY_BYTES)
    _cap(resource.RLIMIT_NOFILE, OPEN_FILES)
    _cap(resource.RLIMIT_FSIZE, DISK_BYTES)
    # past RLIMIT_FSIZE a write fails with EFBIG, which explain() names, instead of a signal
    # that would end the rank with no word
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)


def drop_capabilities() -> None:
    """Before the student's kernel is executed: no capability survives the exec, so that its
    code can neither mount (and so write ``pid_max``) nor raise a limit inside the sandbox."""
    last = int(Path("/proc/sys/kernel/cap_last_cap").read_text())
    libc = ctypes.CDLL(None, use_errno=True)
    for cap in range(last + 1):
        if libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            number = ctypes.get_errno()
            if number != errno.EINVAL:  # a capability this kernel does not have
                raise OSError(number, f"prctl(PR_CAPBSET_DROP, {cap}): {os.strerror(number)}")


def explain(exc: BaseException) -> str:
    """The limit ``exc`` says a rank reached, as a sentence for the student; "" for any other
    error."""
    text = str(exc)
    number = getattr(exc, "errno", None)
    if "can't start new thread" in text:  # no task left, or no memory for its stack
        return (f"The grader lets a rank run at most {RANK_TASKS} threads and processes "
                f"together, in at most {MEMORY_BYTES // 2**30} GB of memory (each thread's "
                "stack takes 8 MB of it): start fewer.")
    if number == errno.EAGAIN:
        return (f"The grader lets a rank run at most {RANK_TASKS} threads and processes "
                f"together (and a submission {SUBMISSION_TASKS}): start fewer.")
    if isinstance(exc, MemoryError) or "can't allocate memory" in text \
            or number == errno.ENOMEM:
        return (f"The grader lets each rank use at most {MEMORY_BYTES // 2**30} GB of memory: "
                "use smaller tensors, or free what you no longer need.")
    if number in (errno.EMFILE, errno.ENFILE):
        return (f"The grader lets each rank keep at most {OPEN_FILES} files and sockets open "
                "at once: close what you open (a `with` block does).")
    if number in (errno.EFBIG, errno.ENOSPC, errno.EDQUOT):
        return (f"The grader gives each rank {DISK_BYTES // 2**20} MB of disk: write less.")
    return ""
