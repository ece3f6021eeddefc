"""Start the rank processes from a warm forkserver, and stop and close them.

Why not ``mp.spawn`` as the seeds do: spawn re-imports ``__main__`` in each child, and a function
defined in a notebook cell is not there (``Can't get attribute 'example' on <module
'__main__'>``). Why not plain fork: a forked child of a kernel that used CUDA can't use CUDA, and
fork copies the kernel's threads and state. Why not torch elastic's ``start_processes``: it
spawns (seconds per call) and has no live per-rank board. So the workers come from a
forkserver, a clean process with torch preloaded, and the function travels to them by value
with cloudpickle. In a notebook the forkserver is forked from the kernel once, right after its
import cell, before any cell can use CUDA, and sheds the kernel's state
(:mod:`commlab.kernel_forkserver`); elsewhere it is a new interpreter that imports torch
(seconds, once per process). Each rank is started ahead of its run where it can be
(:mod:`commlab.standby`): it waits on its control pipe until the run sends it its rank and
launch.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import os
import pickle
import re
import signal
import sys
import tempfile
import threading
import time
from multiprocessing import spawn
from typing import Any

import torch.multiprocessing as mp

from . import capture, control, kernel_forkserver, standby, status, worker

# Workers are modules the forkserver imports once, so each rank starts with torch loaded (and
# the functional collectives, which the trace wraps in every rank). torch._dynamo too: every
# torch.optim optimizer imports it on first use (its constructor and its step), which cost each
# rank of each run 1.4 s on an idle 2-core machine and 10 s at a load of 8, past a test's
# 8 s; it also brings DTensor and FSDP2's modules (commlab.preload_dynamo: without the empty
# cache folder its import makes).
# commlab.preload_memory comes after them all: it makes the memory they fill cheap to fork, and
# turns the garbage collector on again, which commlab.preload_start, first, turns off meanwhile.
# A forkserver forked from a notebook's kernel (commlab.kernel_forkserver) imports the second
# list once it has forked the first run's ranks, so that the first run does not wait for it.
PRELOAD_AT_ONCE = ["torch", "torch.distributed", "torch.distributed._functional_collectives",
                   "cloudpickle", "commlab.worker"]
DYNAMO = "commlab.preload_dynamo"
MEMORY = "commlab.preload_memory"
PRELOAD_LATER = [DYNAMO, MEMORY]
PRELOAD = ["commlab.preload_start", *PRELOAD_AT_ONCE, *PRELOAD_LATER]
# The chapters whose ranks import torch._dynamo (their optimizers, some DTensor operations),
# measured by running each solution and its hidden checks without it preloaded. A notebook in
# the folder of another chapter has a forkserver without it: 1.5 s of CPU saved per kernel, and
# per grading run of such chapters alone. A rank that imports it there anyway says so
# (:func:`warn_if_dynamo_was_missed`), which a chapter's strict test run turns into a failure.
DYNAMO_CHAPTERS = frozenset({"12_async_and_overlap", "14_tensor_parallel",
                             "17_sharded_training"})
_CHAPTER_FOLDER = re.compile(r"\d\d_[a-z0-9_]+")


def needs_dynamo(chapters: list[str] | None) -> bool:
    """Whether ranks running ``chapters``' code need ``torch._dynamo`` preloaded: unless every
    one is a chapter known not to (None: not known, so they may)."""
    if chapters is None:
        return True
    return not chapters or any(not _CHAPTER_FOLDER.fullmatch(chapter)
                               or chapter in DYNAMO_CHAPTERS for chapter in chapters)


def notebook_chapter() -> list[str] | None:
    """The chapter of this process's notebook, from its working directory (a kernel's is its
    notebook's folder: ``work/05_reduce``); None where that is no chapter's folder."""
    name = os.path.basename(os.getcwd())
    return [name] if _CHAPTER_FOLDER.fullmatch(name) else None


def warn_if_dynamo_was_missed(ranks: list[RankProcess]) -> None:
    """Say once, on this process's stderr, that a run's ranks imported ``torch._dynamo``
    themselves in a chapter's folder whose forkserver does not preload it."""
    global _said_dynamo_missed
    imported = [rank.rank for rank in ranks
                if rank.report is not None and rank.report.imported_dynamo]
    if not imported or _said_dynamo_missed:
        return
    chapters = notebook_chapter()
    if needs_dynamo(chapters):
        return
    _said_dynamo_missed = True
    [chapter] = chapters
    print(f"commlab: rank {imported[0]} imported torch._dynamo itself (torch.optim's optimizers "
          "and some DTensor operations need it), a second or more of its run: the forkserver "
          f"preloads it only for the chapters in commlab.processes.DYNAMO_CHAPTERS, and "
          f"{chapter} is not one of them. Every run that needs it imports it again.",
          file=sys.stderr)


_said_dynamo_missed = False


def for_chapters(preload: list[str], chapters: list[str] | None) -> list[str]:
    """A forkserver's ``preload``, without ``torch._dynamo`` where ``chapters`` don't need it
    (the grader's rank hosts use it too)."""
    if needs_dynamo(chapters):
        return preload
    return [name for name in preload if name != DYNAMO]


class RankProcess:
    """The launcher's side of one rank: its process, pipes, output and report."""

    def __init__(self, rank: int):
        self.rank = rank
        self.process: Any = None
        self.control: Any = None
        self.readers: dict[str, Any] = {}
        self.output = capture.Output()
        self.report: worker.RankReport | None = None
        self.exitcode: int | None = None
        self.killed = False  # stopped by the launcher, not dead by itself

    @property
    def dead(self) -> bool:
        return self.exitcode is not None

    @property
    def over(self) -> bool:
        """Reported or died: nothing more will come from this rank."""
        return self.report is not None or self.dead

    @property
    def failed(self) -> bool:
        """Reported a failure, or died without reporting."""
        return (self.report is not None and not self.report.done) or (
            self.dead and self.report is None)

    @property
    def done(self) -> bool:
        return self.report is not None and self.report.done

    def text(self, stream: str) -> str:
        return self.output.text(stream)

    def pipes(self) -> list[tuple[capture.Output, str, Any]]:
        return [(self.output, stream, reader) for stream, reader in self.readers.items()]

    def adopt(self, started: Started) -> None:
        self.process, self.control, self.readers = (started.process, started.control,
                                                    started.readers)


@dataclasses.dataclass
class Started:
    """A rank's process started from the forkserver, waiting for its rank and launch
    (:func:`commlab.worker.standby`), with the launcher's ends of its pipes and its board
    entry."""

    process: Any
    control: Any
    readers: dict[str, Any]
    slot: Any
    # forked before the forkserver preloaded everything (kernel_forkserver.preloaded)
    early: bool = False


# None: a forkserver. "fork": the ranks are forked from this process itself, for a process that
# is already what a forkserver is (torch imported, one thread, nothing computed), such as the
# grader's rank host; it saves importing torch once more.
START_METHOD: str | None = None


def mp_context() -> Any:
    """The forkserver context (started once per kernel), or spawn where there is none."""
    if START_METHOD is not None:
        return mp.get_context(START_METHOD)
    method = "forkserver" if "forkserver" in mp.get_all_start_methods() else "spawn"
    ctx = mp.get_context(method)
    if method == "forkserver":
        ctx.set_forkserver_preload(for_chapters(PRELOAD, notebook_chapter()))
        _start_forkserver_quietly()
    return ctx


def fork_forkserver_from_here(first_ranks: int) -> bool:
    """Start the forkserver as a fork of this process, a notebook's kernel right after its import
    cell (:mod:`commlab.kernel_forkserver`): torch is imported already, and the rest of
    :data:`PRELOAD` comes once ``first_ranks`` are forked. False where it is not (a forkserver
    runs, ranks are forked or spawned, or this process can't be forked now)."""
    if START_METHOD is not None or "forkserver" not in mp.get_all_start_methods():
        return False
    later = for_chapters(PRELOAD_LATER, notebook_chapter())
    mp.get_context("forkserver").set_forkserver_preload(PRELOAD_AT_ONCE + later)
    _socket_folder_short_enough()
    if not kernel_forkserver.start(PRELOAD_AT_ONCE, later, first_ranks):
        return False
    # the ranks started before it had everything, still waiting then, are started again
    kernel_forkserver.when_preloaded(lambda: _standby.renew(lambda started: started.early))
    return True


def _start_forkserver_quietly() -> None:
    """Start the forkserver (once per kernel) with c10d's C++ log level at ERROR, and deaf to
    the stop button.

    torch reads ``TORCH_CPP_LOG_LEVEL`` when it is imported, which for our workers happens once,
    in the forkserver; its warnings would otherwise land in every rank's stderr. Jupyter's stop
    button sends SIGINT to the kernel's whole process group, forkserver included, and a
    forkserver still importing torch would die of it, leaving its socket to the next run ("EOFError
    ... unexpected EOF"). An ignored SIGINT is inherited through exec, and Python keeps it ignored.
    """
    from multiprocessing import forkserver

    previous = os.environ.get("TORCH_CPP_LOG_LEVEL")
    if previous is None:
        os.environ["TORCH_CPP_LOG_LEVEL"] = "ERROR"
    _socket_folder_short_enough()
    try:
        with _sigint_ignored():
            forkserver.ensure_running()
    finally:
        if previous is None:
            del os.environ["TORCH_CPP_LOG_LEVEL"]


# a Unix socket's path has at most 107 bytes; the forkserver's is
# <temp dir>/pymp-XXXXXXXX/listener-XXXXXXXX, 33 bytes below the temp dir
_SOCKET_PATH_MAX = 107
_SOCKET_NAME_LENGTH = len("/pymp-12345678/listener-12345678")


def _socket_folder_short_enough() -> None:
    """multiprocessing's folder for the forkserver's socket under ``/tmp`` where the temp dir is
    too deep for a socket path (a test runner's or a cluster job's TMPDIR), which would otherwise
    fail every run with "OSError: AF_UNIX path too long". multiprocessing makes that folder once
    per process, on first use, and removes it at exit."""
    from multiprocessing import process, util

    if process.current_process()._config.get("tempdir") is not None:
        return  # made already, wherever it is
    if len(tempfile.gettempdir()) + _SOCKET_NAME_LENGTH <= _SOCKET_PATH_MAX:
        return
    chosen, tempfile.tempdir = tempfile.tempdir, "/tmp"
    try:
        util.get_temp_dir()
    finally:
        tempfile.tempdir = chosen


@contextlib.contextmanager
def _sigint_ignored():
    """SIGINT ignored in this process meanwhile (only the main thread may change handlers)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    handler = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, handler)


_hiding = threading.local()


@contextlib.contextmanager
def _main_module_hidden():
    """Keep a worker started meanwhile by this thread from re-running the script that called
    ``run``.

    multiprocessing re-imports the parent's ``__main__`` in every spawned or forkserver child so
    that functions defined there can be found. Ours travel by value, so the re-import is pure
    cost, and a script without an ``if __name__ == "__main__"`` guard would launch again from
    inside each rank. So what a child is told to prepare leaves ``__main__`` out, for the
    processes this thread starts meanwhile; ``__main__`` itself is left alone, since the
    notebook's own code may be using it in another thread while the next run's ranks start
    (:mod:`commlab.standby`).
    """
    _leave_main_out_of_preparation()
    was, _hiding.on = getattr(_hiding, "on", False), True
    try:
        yield
    finally:
        _hiding.on = was


def _leave_main_out_of_preparation() -> None:
    """Wrap multiprocessing's ``get_preparation_data`` (once per process) so that it leaves the
    main module out for a thread inside :func:`_main_module_hidden`."""
    if getattr(spawn.get_preparation_data, "leaves_main_out", False):
        return
    given = spawn.get_preparation_data

    def preparation_data(name: str) -> dict[str, Any]:
        data = given(name)
        if getattr(_hiding, "on", False):
            data.pop("init_main_from_name", None)
            data.pop("init_main_from_path", None)
        return data

    preparation_data.leaves_main_out = True  # type: ignore[attr-defined]
    spawn.get_preparation_data = preparation_data


def start(spec: worker.LaunchSpec, ranks: list[RankProcess]) -> status.Board:
    """Give each of ``ranks`` a process: from the forkserver, a rank started ahead where one
    waits (else one started now), which is then sent its rank and ``spec``; forked or spawned,
    a process started now with ``spec`` as its arguments. Each gets its pipes and its entry on
    the board. ``ranks`` is filled as they start, so that :func:`stop` finds every one of them
    even if starting is interrupted."""
    ctx = mp_context()
    if ctx.get_start_method() == "forkserver":
        return _start_from_forkserver(ctx, spec, ranks)
    board = status.Board(ctx, spec.world_size)
    for rank in ranks:
        parent_end, child_end = ctx.Pipe(duplex=True)
        readers, writers = {}, {}
        for stream in capture.STREAMS:
            readers[stream], writers[stream] = ctx.Pipe(duplex=False)
        rank.control, rank.readers = parent_end, readers
        process = ctx.Process(
            target=worker.main, name=f"commlab-rank-{rank.rank}", daemon=True,
            args=(spec, rank.rank, child_end, writers["stdout"], writers["stderr"],
                  board.for_rank(rank.rank)))
        with _main_module_hidden():
            process.start()
        rank.process = process
        # Only the child may hold the writing ends, so that its death reads as end of file.
        child_end.close()
        writers["stdout"].close()
        writers["stderr"].close()
    return board


# seconds a run waits for a rank being started ahead before it forks its own
_SETTLE_LIMIT = 5.0


def _start_from_forkserver(ctx: Any, spec: worker.LaunchSpec,
                           ranks: list[RankProcess]) -> status.Board:
    # no rank is started ahead while this run starts and runs (start_ahead resumes): the
    # forkserver forks this run's ranks first, and the run has the machine to itself
    _standby.hold()
    if len(_standby.waiting()) < len(ranks):
        # a rank still starting ends in the pool within a fork: take it rather than fork another
        # (a forkserver forked from the kernel preloads the rest after the first run's ranks)
        _standby.settle(_SETTLE_LIMIT)
    slots = []
    for rank in ranks:
        started = _standby.take() or start_waiting(ctx)
        rank.adopt(started)
        slots.append(started.slot)
    launch = pickle.dumps(spec, protocol=pickle.HIGHEST_PROTOCOL)
    for rank in ranks:
        try:
            rank.control.send_bytes(control.start_message(rank.rank, launch))
        except OSError:
            pass  # it died waiting: the watch finds it dead
    return status.Board(ctx, spec.world_size, slots)


def start_waiting(ctx: Any, rehearse: bool = False) -> Started:
    """Start a rank's process from the forkserver; it waits for its rank and launch (and
    rehearses its first steps meanwhile, with ``rehearse``: for a rank started ahead)."""
    parent_end, child_end = ctx.Pipe(duplex=True)
    readers, writers = {}, {}
    for stream in capture.STREAMS:
        readers[stream], writers[stream] = ctx.Pipe(duplex=False)
    slot = status.new_slot(ctx)
    early = not kernel_forkserver.preloaded()
    process = ctx.Process(target=worker.standby, name="commlab-rank", daemon=True,
                          args=(child_end, writers["stdout"], writers["stderr"], slot,
                                rehearse))
    try:
        with _main_module_hidden():
            process.start()
    except BaseException:
        for end in [parent_end, *readers.values()]:
            end.close()
        raise
    finally:
        # Only the child may hold the writing ends, so that its death reads as end of file.
        for end in [child_end, *writers.values()]:
            end.close()
    return Started(process, parent_end, readers, slot, early)


def _close_waiting(started: Started) -> None:
    """End a rank that waited for a run and release its pipes (closing its control pipe is
    its word to exit)."""
    started.control.close()
    started.process.join(5.0)
    if started.process.exitcode is None:
        started.process.kill()
        started.process.join(5.0)
    for reader in started.readers.values():
        reader.close()
    started.process.close()


def _forkserver_running() -> bool:
    """Whether this process's forkserver is up (without reaping it, and without starting one
    from a thread that can't make it deaf to the stop button)."""
    from multiprocessing import forkserver

    pid = forkserver._forkserver._forkserver_pid
    if pid is None:
        return False
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None
    except (AttributeError, ChildProcessError):
        return False


def _start_in_background() -> Started:
    if not _forkserver_running():
        raise RuntimeError("no forkserver")
    return start_waiting(mp.get_context("forkserver"), rehearse=True)


_standby: standby.Pool[Started] = standby.Pool(
    _start_in_background, lambda started: started.process.is_alive(), _close_waiting)


def start_ahead(world_size: int) -> None:
    """Have the ranks of a next run of ``world_size`` started in the background from the
    forkserver, starting it if needed (nothing where ranks are forked or spawned)."""
    global _closed_at_exit
    try:
        if mp_context().get_start_method() != "forkserver":
            return
        if not _closed_at_exit:
            # before the interpreter stops the thread that starts them, in the middle of a
            # start (its child would find half a launch, and say so on stderr)
            atexit.register(close_ranks_started_ahead)
            _closed_at_exit = True
        _standby.keep(world_size)
    except Exception:  # noqa: BLE001 - the next run starts its own ranks, and says what fails
        pass


_closed_at_exit = False


def ranks_started_ahead(timeout: float | None = None) -> list[int]:
    """The process ids of the ranks waiting for the next run, once the background thread has
    started them all (or ``timeout`` seconds have passed)."""
    _standby.settle(timeout)
    return [started.process.pid for started in _standby.waiting()]


def close_ranks_started_ahead() -> None:
    """End the ranks waiting for a next run (it starts its own; see :func:`start_ahead`)."""
    _standby.close()


def end_helpers(timeout: float = 1.0) -> None:
    """End what this process started to serve its runs, and wait for it (``timeout`` seconds at
    most): the ranks waiting for a next run, those still stopping, the forkserver and
    multiprocessing's resource tracker.

    For a Jupyter kernel asked to shut down (:func:`commlab.launch.start_ahead_after_this_cell`
    calls this first): ipykernel then ends every child in its process group and waits while
    any is listed. Left to it, the forkserver, which nothing waits for, stays listed as a
    zombie, and the resource tracker ignores its SIGTERM; the kernel was still waiting when
    Jupyter killed it 2.5 s later, its exit handlers unrun and multiprocessing's temporary
    folder left behind. Whatever is not over in time is left to ipykernel, and reaped when it
    ends.
    """
    from multiprocessing import forkserver, resource_tracker

    close_ranks_started_ahead()
    deadline = time.monotonic() + timeout
    wait_stopped(timeout)
    server, tracker = forkserver._forkserver, resource_tracker._resource_tracker
    reapers = []
    with server._lock:
        # every rank holds the pipe too: the server ends once they and this end are closed
        reapers.append(_close_and_reap(server._forkserver_alive_fd, server._forkserver_pid))
        server._forkserver_alive_fd = server._forkserver_pid = None
        server._forkserver_address = None
    with tracker._lock:
        reapers.append(_close_and_reap(tracker._fd, tracker._pid))
        tracker._fd = tracker._pid = None
    for reaper in reapers:
        if reaper is not None:
            reaper.join(max(deadline - time.monotonic(), 0.0))


def _close_and_reap(fd: int | None, pid: int | None) -> threading.Thread | None:
    """Close ``fd``, the pipe whose end ends process ``pid``, and reap ``pid`` in a thread of its
    own whenever it ends (the thread, to join)."""
    if fd is not None:
        with contextlib.suppress(OSError):
            os.close(fd)
    if pid is None:
        return None

    def reap() -> None:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)

    reaper = threading.Thread(target=reap, name="commlab-reap", daemon=True)
    reaper.start()
    return reaper


def release(ranks: list[RankProcess], wait: bool) -> None:
    """Every rank finished: keep what they printed, then let them exit (under NCCL after they
    tear their group down), and with ``wait``, wait until they have."""
    capture.drain([p for rank in ranks for p in rank.pipes()], until_eof=False)
    for rank in ranks:
        try:
            rank.control.send_bytes(control.EXIT)
        except OSError:
            pass
    if wait:
        for rank in ranks:
            rank.process.join(5.0)


def stop_in_background(ranks: list[RankProcess]) -> None:
    """:func:`stop` for released ranks, in a background thread: the run's result has all it
    needs of them, and the cell does not wait for their processes to end (a fifth of a warm
    4-rank cell's time). What they might still write goes nowhere. :func:`wait_stopped` waits
    for them; so does the interpreter's exit."""
    global _stopper, _waited_at_exit
    with _stopping_lock:
        _stopping.extend(_stand_in(rank) for rank in ranks)
        if not _waited_at_exit:
            atexit.register(wait_stopped)
            _waited_at_exit = True
        if _stopper is None:
            _stopper = threading.Thread(target=_stop_queued, name="commlab-stop", daemon=True)
            _stopper.start()


def wait_stopped(timeout: float | None = None) -> bool:
    """Wait until the ranks :func:`stop_in_background` was given are stopped (whether they
    are)."""
    with _stopping_lock:
        stopper = _stopper
    if stopper is not None:
        stopper.join(timeout)
        return not stopper.is_alive()
    return True


def _stand_in(rank: RankProcess) -> RankProcess:
    """A copy of ``rank`` to stop, with an output of its own: the run's result reads the
    rank's meanwhile."""
    copy = RankProcess(rank.rank)
    copy.process, copy.control, copy.readers = rank.process, rank.control, rank.readers
    copy.report = rank.report
    return copy


def _stop_queued() -> None:
    global _stopper
    while True:
        with _stopping_lock:  # the check and the thread's end in one hold: no rank is missed
            ranks, _stopping[:] = list(_stopping), []
            if not ranks:
                _stopper = None
                return
        stop(ranks)


_stopping: list[RankProcess] = []
_stopping_lock = threading.Lock()
_stopper: threading.Thread | None = None
_waited_at_exit = False


def stop(ranks: list[RankProcess]) -> None:
    """Kill what still runs, collect the last output, close every pipe and process."""
    started = [rank for rank in ranks if rank.process is not None]
    for rank in started:
        if rank.process.is_alive():
            rank.killed = True
            rank.process.kill()
    for rank in started:
        rank.process.join(5.0)
        if rank.exitcode is None and rank.report is None:
            rank.exitcode = rank.process.exitcode
    capture.drain([p for rank in ranks for p in rank.pipes()], until_eof=True)
    for rank in ranks:
        for conn in [rank.control, *rank.readers.values()]:
            if conn is not None:
                conn.close()
        if rank.process is not None:
            rank.process.close()
