"""Sealing a rank: before any of a submission's code runs in it, a rank forked by the rank host
gets a world of its own, so that the only way its data can reach another rank is over the
network, where the rank host counts it (:mod:`grader.sandboxed.network`).

:func:`seal_rank` (commlab's ``worker.BEFORE_RANK`` in the rank host):

1. joins the network namespace the rank host made for it (:mod:`.links`: its own sockets,
   address and counters, and a link to the others that the host counts), and unmaps the other
   ranks' pages of the status board;
2. enters a user namespace of its own (it keeps no capability over its network, so it can
   neither configure it nor read its packets below TCP), and new mount, IPC and process-ID
   namespaces: other ranks' processes are not there to signal or read, their shared memory and
   SysV objects do not exist for it;
3. forks once more (a new PID namespace holds the children of the process that made it): the
   child goes on as the rank, the parent waits and ends as it ends, so that the launcher sees the
   rank's exit as before; the child closes every file descriptor but the rank's own pipes (the
   rank host's pipes to the scoring kernel and to the other ranks, the rendezvous store's server
   sockets: all inherited by the fork);
4. mounts empty, private folders over its working folder (its ``TMPDIR`` and ``HOME``) and
   ``/dev/shm``, the only folders the sandbox leaves writable, and a ``/proc`` of its own;
5. loads the system-call filter (:mod:`grader.sandboxed.syscalls`): no other kind of socket, no
   undoing the above.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

from commlab import worker

from . import limits, syscalls
from .namespaces import call, mount, remount_read_only

_CLONE_NEWNS, _CLONE_NEWIPC, _CLONE_NEWUSER, _CLONE_NEWPID = (0x00020000, 0x08000000,
                                                              0x10000000, 0x20000000)
_MS_NOSUID, _MS_NODEV, _MS_NOEXEC = 0x2, 0x4, 0x8
_MS_BIND, _MS_REC, _MS_PRIVATE = 0x1000, 0x4000, 0x40000
_PR_SET_PDEATHSIG, _PR_SET_DUMPABLE = 1, 4


def _close_all_but(keep: set[int]) -> None:
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd not in keep:
            try:
                os.close(fd)
            except OSError:
                pass  # the descriptor of the listing itself, already gone


def _own_namespaces() -> None:
    uid, gid = os.getuid(), os.getgid()
    call("unshare", _CLONE_NEWUSER | _CLONE_NEWNS | _CLONE_NEWIPC | _CLONE_NEWPID)
    for name, text in (("setgroups", "deny"), ("uid_map", f"0 {uid} 1"),
                       ("gid_map", f"0 {gid} 1")):
        Path(f"/proc/self/{name}").write_text(text)


def _wait_and_end_alike(child: int, mine: list[int]) -> None:
    """The parent left outside the rank's PID namespace: end as the rank ends."""
    for fd in mine:  # so that the launcher reads end-of-file when the rank is gone
        try:
            os.close(fd)
        except OSError:
            pass
    while True:
        try:
            _, status = os.waitpid(child, 0)
            break
        except ChildProcessError:
            os._exit(1)
        except InterruptedError:
            continue
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        signal.signal(number, signal.SIG_DFL)
        os.kill(os.getpid(), number)
    os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1)


def _private_folders(workdir: str) -> None:
    mount(None, "/", None, _MS_REC | _MS_PRIVATE)
    mount("proc", "/proc", "proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC)
    # every other folder is read-only already (grader.sandboxed.namespaces): these two were the
    # rank host's, and every rank's, to write
    for folder in ("/dev/shm", workdir):
        mount("tmpfs", folder, "tmpfs", _MS_NOSUID | _MS_NODEV,
              f"mode=1777,size={limits.DISK_BYTES}")
    os.chdir(workdir)


def _limited() -> None:
    """The rank's limits (:mod:`.limits`), set in its own PID namespace's /proc, which then
    turns read-only: pid_max stays as set, since the filter refuses mount."""
    limits.for_rank()
    mount("/proc/sys", "/proc/sys", None, _MS_BIND | _MS_REC)
    remount_read_only("/proc/sys")
    worker.EXPLAIN_FAILURE = limits.explain


def seal_rank(rank: int, board: Any, keep: list[int], networks: Any = None) -> None:
    """See the module docstring. Runs in the rank's process, which has one thread; ``networks``
    (:class:`.links.Networks`) holds the network it joins first, while it may."""
    if networks is not None:
        networks.join(rank)
    board.keep_only_own()
    workdir = os.getcwd()
    _own_namespaces()
    child = os.fork()
    if child:  # keeps the descriptor whose closing tells the launcher that the rank ended
        _wait_and_end_alike(child, keep)
    _close_all_but(set(keep))
    call("prctl", _PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    # the rank host (which made itself unreadable before forking) lists this rank's sockets
    call("prctl", _PR_SET_DUMPABLE, 1, 0, 0, 0)
    _private_folders(workdir)
    _limited()
    syscalls.install()


def tidy_rank(rank: int, board: Any, keep: list[int], networks: Any = None) -> None:
    """For a launch of the grader's own code (a replay: :mod:`.replay`), instead of
    :func:`seal_rank`: no code of the submission runs in it, so it needs no world of its own
    (the namespaces, the second fork, the mounts and the filter cost each rank of each replay
    a few hundredths of a second). What it inherited from the rank host stays open, as it stays
    open in the host: the network's count gives the host's sockets to the store whoever holds
    them. It joins its network as a sealed rank does, so that the same calls are counted the
    same way."""
    if networks is not None:
        networks.join(rank)
    board.keep_only_own()
    call("prctl", _PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    # the rank host (which made itself unreadable before forking) lists this rank's sockets
    call("prctl", _PR_SET_DUMPABLE, 1, 0, 0, 0)
