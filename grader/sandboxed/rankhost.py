"""The rank host: where a submission's tests start their ranks, inside the sandbox.

The scoring kernel decides the score and never runs student code; the ranks of its test cells
run the student's answers, so they start here instead, in a process of their own that the
scoring kernel's forkserver forks (torch is already imported, so it costs no second import) and
that then enters the sandbox (:func:`grader.sandboxed.namespaces.enter`). It takes launch
requests on a pipe and starts each launch's ranks by forking itself. Every rank seals itself
before anything of the submission runs (:mod:`grader.sandboxed.seal`): from then on it can reach
the other ranks only over the network, and neither this process nor the kernel's counters.
The ranks of the grader's own replays, which run nothing of the submission, are only tidied
(:func:`grader.sandboxed.seal.tidy_rank`).

For each launch the host:

1. forks the ranks, then asks the scoring kernel for their private inputs (fresh random values,
   one per rank) and hands each rank its own: the inputs were never in this process when it
   forked, so no rank holds another's;
2. counts, at each barrier the ranks pass, what crossed the network (:mod:`.network`);
3. reads each rank's report as data (:mod:`commlab.plain`), never as code, and kills whatever
   the ranks left running before the next launch;
4. answers with the run's result and the network's count, as data (:mod:`grader.wire`).

No code of the submission runs in this process, and the ranks cannot reach it: what it answers
is what the kernel and the ranks' plain reports said.
"""

from __future__ import annotations

import ctypes
import functools
import multiprocessing
import os
import pickle
import signal
from typing import Any

import psutil

from commlab import launch, processes

from .. import wire
from . import define, limits, links, namespaces, network, replay, seal  # noqa: F401 - before the sandbox

READY = b"ready"
# The store-based barrier at the end of init_process_group and new_group has every rank that
# sees the others arrived set a key, so how much a group's start sends to the store depends on
# which ranks arrive last. The launcher's own barriers (commlab.control) already hold every rank
# until all have started: without it, the same calls send the same bytes, and the network's
# count can be checked to within a few bytes (grader/trusted/evidence.py).
RANK_ENVIRON = {"TORCH_DIST_INIT_BARRIER": "0"}
# In a sandbox each rank has a network of its own (:mod:`.links`): gloo listens on its link, and
# the store on the host's end of the bridge.
NETWORK_ENVIRON = {"MASTER_ADDR": links.HOST_ADDRESS, "GLOO_SOCKET_IFNAME": links.RANK_INTERFACE}
PRIVATE_PLEASE = b"private?"
_PR_SET_PDEATHSIG, _PR_SET_CHILD_SUBREAPER, _PR_SET_DUMPABLE = 1, 36, 4


def serve(connection: Any, plan: namespaces.Plan | None) -> None:
    """The host's life (the target of the scoring kernel's process): enter the sandbox (unless
    ``plan`` is None: grading without one), say ready, answer requests until the pipe closes."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the scoring kernel's stop button is not ours
    _die_with_the_kernel()
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
                limits.for_submission()
            else:  # processes the ranks leave behind become ours, so that we can stop them
                ctypes.CDLL(None).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
            # no process of this user may read this one's memory (the ranks could not anyway)
            ctypes.CDLL(None).prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)
            _settle(plan)
        except BaseException as exc:  # noqa: BLE001 - the kernel says why the host never came
            connection.send_bytes(wire.encode(exc))
            return
        connection.send_bytes(READY)
        _answer(connection, sealed=plan is not None)
    finally:
        os._exit(0)


def _die_with_the_kernel() -> None:
    """End when the scoring kernel ends, even by SIGKILL, with every rank.

    The host is the forkserver's child, not the kernel's, and every child of a forkserver holds
    the write end of the pipe whose closing tells the forkserver that its client is gone: kept
    here (and in every rank forked from here), it would keep the forkserver, and so this host,
    alive for ever. Closed, the forkserver ends with the kernel, and the host with it; in the
    sandbox the host is the init of its pid namespace, whose end kills every rank."""
    from multiprocessing import forkserver

    alive = forkserver._forkserver._forkserver_alive_fd
    if alive is not None:
        os.close(alive)
        forkserver._forkserver._forkserver_alive_fd = None
    parent = os.getppid()
    ctypes.CDLL(None).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:  # the forkserver ended before the line above
        os._exit(0)


def _settle(plan: namespaces.Plan | None) -> None:
    """The ranks' surroundings: forked from here, a writable temporary folder, no stray
    environment of the kernel's."""
    processes.START_METHOD = "fork"
    if plan is not None:
        for name in ("TMPDIR", "HOME", "MPLCONFIGDIR"):
            os.environ[name] = str(plan.workdir)
        namespaces.own_writable_folders(plan)
        links.make_host_network()
    for name in [k for k in os.environ if k.startswith("JPY_")]:
        del os.environ[name]


def _answer(connection: Any, sealed: bool) -> None:
    while True:
        try:
            payload, world_size, options = pickle.loads(connection.recv_bytes())
        except (EOFError, OSError):
            return
        # the scoring kernel's own code (a replay) runs no line of the submission: its ranks
        # are tidied, not sealed (only the kernel can ask, on this pipe)
        own_code = options.pop("grader_code", False)
        treat = seal.tidy_rank if own_code else seal.seal_rank
        if options.pop("private", False):
            options["private"] = lambda: _private_inputs(connection)
        networks, observer = None, network.Observer()
        try:
            if sealed:  # a network of its own for each rank, gone with the launch
                networks = links.Networks(world_size)
                observer = network.Observer(networks)
            grading = launch.Grading(
                seal=functools.partial(treat, networks=networks) if sealed else None,
                observer=observer, environ={**RANK_ENVIRON, **(NETWORK_ENVIRON if sealed else {})},
                store_address=links.HOST_ADDRESS if sealed else None)
            outcome: Any = launch.run_pickled(payload, world_size, grading=grading, **options)
        except BaseException as exc:  # noqa: BLE001 - every failure goes back as data
            outcome = exc
            result = getattr(exc, "result", None)
            if result is not None and result.network is None:
                result.network = observer.windows()
        _stop_leftovers()
        if networks is not None:
            networks.close()
        connection.send_bytes(wire.encode(outcome))


def _private_inputs(connection: Any) -> list[bytes]:
    """The ranks' private inputs, asked of the scoring kernel once the ranks are forked."""
    connection.send_bytes(PRIVATE_PLEASE)
    inputs = pickle.loads(connection.recv_bytes())
    if not (isinstance(inputs, list) and all(isinstance(i, bytes) for i in inputs)):
        raise ValueError("the scoring kernel sent no private inputs")
    return inputs


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
