"""Start the rank processes from a warm forkserver, and stop and close them.

Why not ``mp.spawn`` as the seeds do: spawn re-imports ``__main__`` in each child, and a function
defined in a notebook cell is not there (``Can't get attribute 'example' on <module
'__main__'>``). Why not plain fork: a forked child of a kernel that used CUDA can't use CUDA, and
fork copies the kernel's threads and state. Why not torch elastic's ``start_processes``: it
spawns (seconds per call) and has no live per-rank board. So the workers come from a
forkserver, a clean process with torch preloaded (about a second, once per kernel), and the
function travels to them by value with cloudpickle. Each call after the first starts its ranks
in milliseconds.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from typing import Any

import torch.multiprocessing as mp

from . import capture, control, status, worker

# Workers are modules the forkserver imports once, so each rank starts with torch loaded (and
# the functional collectives, which the trace wraps in every rank). torch._dynamo too: every
# torch.optim optimizer imports it on first use (its constructor and its step), which cost each
# rank of each run 1.4 s on an idle 2-core machine and 10 s at a load of 8, past a test's
# 8 s; it also brings DTensor and FSDP2's modules (commlab.preload_dynamo: without the empty
# cache folder its import makes).
PRELOAD = ["torch", "torch.distributed", "torch.distributed._functional_collectives",
           "commlab.preload_dynamo", "cloudpickle", "commlab.worker"]


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
        ctx.set_forkserver_preload(PRELOAD)
        _start_forkserver_quietly()
    return ctx


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
    try:
        with _sigint_ignored():
            forkserver.ensure_running()
    finally:
        if previous is None:
            del os.environ["TORCH_CPP_LOG_LEVEL"]


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


@contextlib.contextmanager
def _main_module_hidden():
    """Keep a worker from re-running the script that called ``run``.

    multiprocessing re-imports the parent's ``__main__`` in every spawned or forkserver child so
    that functions defined there can be found. Ours travel by value, so the re-import is pure
    cost, and a script without an ``if __name__ == "__main__"`` guard would launch again from
    inside each rank. Hiding ``__file__`` and ``__spec__`` while a process starts turns it off.
    """
    main = sys.modules.get("__main__")
    saved = {k: main.__dict__[k] for k in ("__file__", "__spec__") if k in main.__dict__} \
        if main is not None else {}
    try:
        for key in saved:
            if key == "__spec__":
                main.__spec__ = None
            else:
                del main.__dict__[key]
        yield
    finally:
        for key, value in saved.items():
            main.__dict__[key] = value


def start(spec: worker.LaunchSpec, ranks: list[RankProcess]) -> status.Board:
    """Start a process for each of ``ranks``; each gets the spec, its pipes and its entry on
    the board. ``ranks`` is filled as they start, so that :func:`stop` finds every one of them
    even if starting is interrupted."""
    ctx = mp_context()
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


def release(ranks: list[RankProcess]) -> None:
    """Every rank finished: keep what they printed, then let them tear the group down."""
    capture.drain([p for rank in ranks for p in rank.pipes()], until_eof=False)
    for rank in ranks:
        try:
            rank.control.send_bytes(control.EXIT)
        except OSError:
            pass
    for rank in ranks:
        rank.process.join(5.0)


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
