"""The rank host: where a submission's tests start their ranks, inside the namespaces.

The scoring kernel decides the score and never runs student code; the ranks of its test cells
run the student's answers, so they start here instead, in a process of their own that the
scoring kernel's forkserver forks (torch is already imported, so it costs no second import) and
that then enters the sandbox (:func:`grader.sandboxed.namespaces.enter`). It takes launch
requests on a pipe, starts each launch's ranks by forking itself, and answers with what they did,
as data
(:mod:`grader.wire`). After each launch it kills whatever the ranks left running, so that every
test starts from nothing.

Code in a rank can do anything a process can do inside the sandbox, this host included: it can
make the host answer something else. The scoring kernel reads the answer as data only, and
judges it with the instructor's checks.
"""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import pickle
import signal
import tempfile
from typing import Any

import psutil

from commlab import launch, processes

from .. import wire
from . import define, namespaces  # noqa: F401 - imported before the sandbox hides them

READY = b"ready"
_PR_SET_CHILD_SUBREAPER = 36


def serve(connection: Any, plan: namespaces.Plan | None) -> None:
    """The host's life (the target of the scoring kernel's process): enter the sandbox (unless
    ``plan`` is None: grading without one), say ready, answer requests until the pipe closes."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the scoring kernel's stop button is not ours
    # forked as a daemon, so that it never outlives the kernel; the ranks are its children
    multiprocessing.current_process()._config["daemon"] = False
    try:
        try:
            if plan is not None:
                namespaces.enter(plan)
                first = os.fork()
                if first:  # outside the new pid namespace: wait, then go with it
                    connection.close()
                    os.waitpid(first, 0)
                    os._exit(0)
                namespaces.become_init()
            else:  # processes the ranks leave behind become ours, so that we can stop them
                ctypes.CDLL(None).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
            _settle(plan)
        except BaseException as exc:  # noqa: BLE001 - the kernel says why the host never came
            connection.send_bytes(wire.encode(exc))
            return
        connection.send_bytes(READY)
        _answer(connection)
    finally:
        os._exit(0)


def _settle(plan: namespaces.Plan | None) -> None:
    """The ranks' surroundings: forked from here, a writable temporary folder, no stray
    environment of the kernel's."""
    processes.START_METHOD = "fork"
    if plan is not None:
        for name in ("TMPDIR", "HOME", "MPLCONFIGDIR"):
            os.environ[name] = str(plan.workdir)
        tempfile.tempdir = None
    for name in [k for k in os.environ if k.startswith("JPY_")]:
        del os.environ[name]


def _answer(connection: Any) -> None:
    while True:
        try:
            payload, world_size, options = pickle.loads(connection.recv_bytes())
        except (EOFError, OSError):
            return
        try:
            outcome: Any = launch.run_pickled(payload, world_size, **options)
        except BaseException as exc:  # noqa: BLE001 - every failure goes back as data
            outcome = exc
        _stop_leftovers()
        connection.send_bytes(wire.encode(outcome))


def every_rank_answers(rank: int, world_size: int) -> int:
    """A warm-up run's function: every rank meets the others, and returns its rank."""
    import torch.distributed as dist

    dist.barrier()
    return rank


def _stop_leftovers() -> None:
    """Kill every process the ranks left behind (they are this host's descendants)."""
    left = psutil.Process().children(recursive=True)
    for process in left:
        try:
            process.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(left, timeout=10)
