"""``commlab.run``: run a function on N ranks from a notebook cell, and always come back.

The story of a run: check the arguments, build one :class:`~commlab.worker.LaunchSpec`, start
the ranks (:mod:`commlab.processes`), watch them (:mod:`commlab.watch`), stop them, and turn
what they left into a :class:`RunResult` or an error (:mod:`commlab.explain`).

The launcher owns everything a run creates (processes, pipes, the rendezvous store on a port the
operating system picks) and releases all of it in a ``finally``, whatever happens: success, a
rank that raises or dies, a hang past ``timeout``, or the stop button.
"""

from __future__ import annotations

import dataclasses
import gc
import math
import os
import sys
from collections.abc import Callable
from typing import Any

import cloudpickle

from . import control, explain, processes, rendezvous, torchrun, worker
from .backend import choose_backend, group_backend
from .errors import CommlabError
from .result import RunResult
from .watch import STARTUP_LIMIT, Watch, all_done
from .worker import LaunchSpec

# Private inputs: one bytes object per rank, or a function that gives them once the ranks are
# started (so that the process that forks the ranks holds none of them when it forks).
Private = list[bytes] | Callable[[], list[bytes]] | None


@dataclasses.dataclass
class Grading:
    """What a grader adds to a launch, in the process that forks the ranks (its rank host).

    seal: called first thing in each rank, ``seal(rank, board_entry, fds_to_keep)``
        (:data:`commlab.worker.BEFORE_RANK`); the ranks are forked from this process.
    observer: told when the ranks have started (``started(ranks, store_port)``), at each barrier
        they pass (``barrier(tag)``) and once every rank reported (``reported()``); its
        ``windows()`` become the result's ``network``. After that the ranks are killed, not
        let go: a grader's last count is the last thing that happens in them.
    environ: variables the ranks get on top of everything else.
    store_address: the address the rendezvous store listens on (the loopback when None).
    The ranks then report as plain data (:mod:`commlab.plain`) and pass a barrier once their
    group is up, before the function is unpickled.
    """

    seal: Callable[..., None] | None = None
    observer: Any = None
    environ: dict[str, str] = dataclasses.field(default_factory=dict)
    store_address: str | None = None

DEFAULT_TIMEOUT = 10.0
DEFAULT_WORLD_SIZE = 4
# gloo must never give up before the launcher does: the launcher's message is better.
_GROUP_GRACE = 60.0


def run(fn: Callable[..., Any], world_size: int = DEFAULT_WORLD_SIZE, *, args: tuple = (),
        backend: str = "auto", timeout: float = DEFAULT_TIMEOUT,
        init_process_group: bool = True, debug: bool = False,
        trace_values: bool = True, _private: list[bytes] | None = None) -> RunResult:
    """Run ``fn(rank, world_size, *args)`` on ``world_size`` ranks and bring back what they did.

    Args:
        fn: the function each rank runs. It may be defined in a notebook cell, be a closure or a
            lambda, and use the notebook's globals.
        world_size: number of ranks (processes).
        args: extra arguments passed to ``fn`` after ``rank`` and ``world_size``.
        backend: ``"auto"`` (NCCL with one GPU per rank when there are enough GPUs, else gloo on
            the CPU), ``"gloo"`` or ``"nccl"``. Inside ``fn``, ``commlab.device()`` is the
            rank's device, so the same code runs on both; with NCCL, CPU tensors still go
            through gloo.
        timeout: seconds the ranks get to finish; past it every rank is stopped and
            :class:`CollectiveTimeout` says which call each rank was waiting in.
        init_process_group: ``False`` leaves ``dist.init_process_group()`` to ``fn``, which
            finds ``MASTER_ADDR``, ``MASTER_PORT``, ``RANK`` and ``WORLD_SIZE`` in its
            environment, as under ``torchrun``.
        debug: sets ``TORCH_DISTRIBUTED_DEBUG=DETAIL``, which turns hangs and crashes from
            mismatched collectives into immediate errors that name the mismatch (slower).
        trace_values: copy small tensors before and after each call into the trace, for
            pictures and checks.
        _private: for commlab.checks: one private input per rank, each sent to its rank only
            (``commlab.worker.PRIVATE`` there).

    Returns:
        A :class:`RunResult`; in a notebook it shows each rank's output under its label.

    Raises:
        RankError: a rank raised; the message shows its traceback from your own lines.
        RankCrashed: a rank's process died (for example gloo aborting on mismatched shapes).
        CollectiveTimeout: the ranks did not finish within ``timeout``.
        TypeError, ValueError: bad arguments, before any process starts.
    """
    _check_arguments(fn, world_size, args, timeout)
    if os.environ.get("COMMLAB_WORKER"):
        raise CommlabError(
            "commlab.run was called inside a rank. Call it once, from the notebook, and let the "
            "function it runs do the distributed work.")
    if torchrun.launched_by_torchrun():
        return torchrun.run_here(fn, args=args, backend=backend, timeout=timeout,
                                 init_process_group=init_process_group, debug=debug,
                                 trace_values=trace_values)
    choose_backend(backend, world_size)  # refuse a backend this machine can't run, here
    payload = _pickle_function(fn, args)
    if _elsewhere is not None:
        return _elsewhere(payload, world_size, backend=backend, timeout=timeout,
                          init_process_group=init_process_group, debug=debug,
                          trace_values=trace_values, private=_private)
    return run_pickled(payload, world_size, backend=backend, timeout=timeout,
                       init_process_group=init_process_group, debug=debug,
                       trace_values=trace_values, private=_private)


# A grader runs the ranks of its test cells in a sandbox of their own, away from the kernel that
# decides the score: it installs here the function that sends them there (see
# grader/trusted/scoring_kernel.py).
_elsewhere: Callable[..., RunResult] | None = None


def launch_elsewhere(launcher: Callable[..., RunResult] | None) -> None:
    """Send every later ``run`` of this process to ``launcher(payload, world_size, **options)``
    (``None``: launch here again). ``payload`` is the cloudpickled ``(fn, args)``."""
    global _elsewhere
    _elsewhere = launcher


def run_pickled(payload: bytes, world_size: int, *, backend: str = "auto",
                timeout: float = DEFAULT_TIMEOUT, init_process_group: bool = True,
                debug: bool = False, trace_values: bool = True, private: Private = None,
                grading: Grading | None = None) -> RunResult:
    """:func:`run` for a function already pickled with cloudpickle as ``(fn, args)``: this
    process never unpickles it, only the ranks do."""
    chosen = choose_backend(backend, world_size)
    address = grading.store_address if grading is not None else None
    store = rendezvous.launch_store(timeout + _GROUP_GRACE, address or "127.0.0.1")
    try:
        spec = LaunchSpec(
            payload=payload, world_size=world_size, backend=chosen,
            group_backend=group_backend(chosen, world_size),
            init_process_group=init_process_group, trace_values=trace_values,
            pg_timeout=timeout + _GROUP_GRACE,
            environ={**os.environ, **_rank_environ(world_size, store.port, debug),
                     **(grading.environ if grading is not None else {})},
            sys_path=list(sys.path), cwd=os.getcwd(), private=private is not None,
            data_reports=grading is not None, windows=grading is not None)
        return _start_watch_stop_explain(spec, timeout, private, grading, store.port)
    finally:
        del store  # closes the port


def start_ahead_after_this_cell() -> None:
    """In a Jupyter kernel, once the cell that runs this (the import cell) has finished, fork
    the forkserver from the kernel (:func:`processes.fork_forkserver_from_here`: torch is
    imported already) and start a first run's ranks in the background
    (:func:`processes.start_ahead`). Nothing happens outside a kernel, inside a rank, under
    torchrun, or where the cell sent every later ``run`` elsewhere (a grader's scoring kernel,
    :func:`launch_elsewhere`).
    """
    if os.environ.get("COMMLAB_WORKER") or torchrun.launched_by_torchrun():
        return
    shell = _kernel_shell()
    if shell is None:
        return

    def after_the_cell(*_: Any) -> None:
        shell.events.unregister("post_run_cell", after_the_cell)
        # What the imports made lives as long as the kernel: the garbage collector's full
        # passes, during the notebook and at the kernel's exit, skip it from now on. torch's
        # objects made a shutdown or restart cost 0.75 CPU-s, and 0.17 once frozen.
        gc.freeze()
        if _elsewhere is None:
            _end_helpers_before_the_kernel(shell.kernel)
            processes.fork_forkserver_from_here(DEFAULT_WORLD_SIZE)
            processes.start_ahead(DEFAULT_WORLD_SIZE)

    shell.events.register("post_run_cell", after_the_cell)


def _end_helpers_before_the_kernel(kernel: Any) -> None:
    """Have the kernel end the ranks and the forkserver (:func:`processes.end_helpers`) when it
    is asked to shut down or restart, before ipykernel ends its children: so that it stops in
    about a second and runs its exit handlers, rather than being killed 2.5 s later. Its
    ``do_shutdown`` is the step ipykernel runs first (its subclasses' hook)."""
    given = kernel.do_shutdown
    if getattr(given, "ends_commlab_helpers", False):
        return  # the module imported again

    def do_shutdown(restart: bool) -> Any:
        try:
            processes.end_helpers()
        except Exception:  # noqa: BLE001 - the shutdown goes on: ipykernel ends what is left
            pass
        return given(restart)

    do_shutdown.ends_commlab_helpers = True  # type: ignore[attr-defined]
    kernel.do_shutdown = do_shutdown


def _kernel_shell() -> Any:
    """IPython's shell when this process is a Jupyter kernel, else None."""
    if "ipykernel" not in sys.modules:
        return None
    try:
        from IPython import get_ipython
    except ImportError:
        return None
    shell = get_ipython()
    return shell if getattr(shell, "kernel", None) is not None else None


# --- checks before anything starts ----------------------------------------------------------

def _check_arguments(fn: Any, world_size: Any, args: Any, timeout: Any) -> None:
    """Refuse, before anything starts, what can't run, saying what to write instead."""
    if not callable(fn):
        raise TypeError(f"commlab.run needs a function to run on every rank, got "
                        f"{type(fn).__name__} {fn!r:.60}. Pass the function itself, without "
                        "calling it: commlab.run(example, 4), not commlab.run(example(), 4).")
    if isinstance(world_size, bool) or not isinstance(world_size, int):
        raise TypeError(f"world_size must be a whole number of ranks such as 4, got "
                        f"{type(world_size).__name__} {world_size!r:.40}.")
    if world_size < 1:
        raise ValueError(f"world_size must be at least 1, got {world_size}.")
    cores = os.cpu_count() or 1
    if world_size > max(64, 8 * cores):
        raise ValueError(f"world_size={world_size} would start {world_size} processes on a "
                         f"machine with {cores} cores. Use at most {max(64, 8 * cores)}.")
    if not isinstance(args, tuple):
        raise TypeError(f"args must be a tuple of extra arguments, got "
                        f"{type(args).__name__}. For one argument write args=(value,).")
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not (
            timeout > 0 and math.isfinite(timeout)):
        raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}.")


def _pickle_function(fn: Callable, args: tuple) -> bytes:
    try:
        return cloudpickle.dumps((fn, args))
    except Exception as exc:  # noqa: BLE001
        raise TypeError(
            f"the function or its arguments can't be sent to the ranks ({type(exc).__name__}: "
            f"{exc}). Something it uses (an open file, a lock, a generator, a process group) "
            "can't be copied to another process: create it inside the function instead.") from None




# --- the launch --------------------------------------------------------------------------------

def _rank_environ(world_size: int, port: int, debug: bool) -> dict[str, str]:
    """The variables every rank finds, as under torchrun, on top of the notebook's own."""
    environ = {
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
        "WORLD_SIZE": str(world_size),
        "LOCAL_WORLD_SIZE": str(world_size),
        # Every rank connects to the store the launcher owns, as under torchrun's agent.
        "TORCHELASTIC_USE_AGENT_STORE": "True",
        # No rank returns from init_process_group (or new_group) before every rank has built
        # the group: a rank that returns and closes the group at once would otherwise cut the
        # connections a slower peer is still making ("Gloo connectFullMesh failed ...
        # Connection closed by peer"). This holds for a group the student builds too.
        "TORCH_DIST_INIT_BARRIER": "1",
        "COMMLAB_WORKER": "1",
        "TORCH_CPP_LOG_LEVEL": "INFO" if debug else os.environ.get("TORCH_CPP_LOG_LEVEL",
                                                                    "ERROR"),
    }
    if debug:
        environ["TORCH_DISTRIBUTED_DEBUG"] = "DETAIL"
    loopback = rendezvous.loopback_interface()
    if loopback and "GLOO_SOCKET_IFNAME" not in os.environ:
        environ["GLOO_SOCKET_IFNAME"] = loopback
    # the ranks' store clients name the store with a lookup (see commlab.rendezvous)
    environ["RES_OPTIONS"] = rendezvous.resolver_options()
    return environ


def _start_watch_stop_explain(spec: LaunchSpec, timeout: float, private: Private,
                              grading: Grading | None, store_port: int) -> RunResult:
    ranks = [processes.RankProcess(r) for r in range(spec.world_size)]
    observer = grading.observer if grading is not None else None
    board = None
    timed_out = released = False
    try:
        board = _start(spec, ranks, grading)
        if observer is not None:
            observer.started(ranks, store_port)
        _send_private(ranks, private)
        barriers = control.Barriers(observer.barrier if observer is not None else None)
        timed_out = Watch(ranks, board, timeout, barriers, spec.data_reports).wait()
        if observer is not None and all(rank.over for rank in ranks):
            observer.reported()
        if all_done(ranks) and grading is None:
            # a grader's ranks are not asked to tear down: once counted, they are killed below;
            # NCCL's tear their group down, which the next run's must not overlap
            released = spec.backend != "nccl"
            processes.release(ranks, wait=not released)
    finally:
        # Positions are taken before the kill: a killed rank can't report where it was.
        positions = board.snapshot() if board is not None else [(0, 0, 0)] * spec.world_size
        if released:
            processes.stop_in_background(ranks)
        else:
            processes.stop(ranks)
        processes.start_ahead(spec.world_size)  # the next run's ranks, in the background
    result = _result(spec, ranks)
    if grading is None:
        processes.warn_if_dynamo_was_missed(ranks)
    if observer is not None:
        result.network = observer.windows()
    if all_done(ranks):
        return result
    if timed_out:
        raise explain.timeout_error(positions, timeout, STARTUP_LIMIT, result)
    raise explain.failure_error(ranks, positions, result)


def _start(spec: LaunchSpec, ranks: list[processes.RankProcess], grading: Grading | None):
    """Start the ranks; a grader's seal is what each runs first."""
    previous = worker.BEFORE_RANK
    worker.BEFORE_RANK = grading.seal if grading is not None else None
    try:
        return processes.start(spec, ranks)
    finally:
        worker.BEFORE_RANK = previous


def _send_private(ranks: list[processes.RankProcess], private: Private) -> None:
    """Each rank's private input, to that rank alone, once every rank is started."""
    if private is None:
        return
    inputs = private() if callable(private) else private
    if len(inputs) != len(ranks):
        raise ValueError(f"{len(inputs)} private inputs for {len(ranks)} ranks")
    for rank, data in zip(ranks, inputs):
        rank.control.send_bytes(control.PRIVATE + bytes(data))


def _result(spec: LaunchSpec, ranks: list[processes.RankProcess]) -> RunResult:
    """Every rank's output, and what the ranks that reported returned, traced and warned."""
    reports = [rank.report for rank in ranks]
    return RunResult(
        spec.world_size, spec.backend,
        returns=[r.returned if r is not None else None for r in reports],
        stdout=[rank.text("stdout") for rank in ranks],
        stderr=[rank.text("stderr") for rank in ranks],
        trace=[r.trace if r is not None else [] for r in reports],
        warnings=[r.warnings if r is not None else [] for r in reports],
        groups=[r.groups if r is not None else [] for r in reports])
