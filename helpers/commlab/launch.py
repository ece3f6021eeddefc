"""``commlab.run``: run a function on N ranks from a notebook cell, and always come back.

Why not ``mp.spawn`` as the seeds do: spawn re-imports ``__main__`` in each child, and a function
defined in a notebook cell is not there (``Can't get attribute 'example' on <module
'__main__'>``). Why not plain fork: a forked child of a kernel that used CUDA can't use CUDA, and
fork copies the kernel's threads and state. So the workers come from a forkserver, a clean
process with torch preloaded (about a second, once per kernel), and the function travels to them
by value with cloudpickle. Each call after the first starts its ranks in milliseconds.

The launcher owns everything a run creates (processes, pipes, the rendezvous store on a port the
operating system picks) and releases all of it in a ``finally``, whatever happens: success, a
rank that raises or dies, a hang past ``timeout``, or the stop button.
"""

from __future__ import annotations

import contextlib
import errno
import math
import os
import socket
import sys
import time
from collections.abc import Callable
from datetime import timedelta
from multiprocessing import connection
from typing import Any

import cloudpickle
import torch
import torch.multiprocessing as mp

from . import report, torchrun, worker
from .errors import CollectiveTimeout, CommlabError, RankCrashed, RankError
from .result import RunResult
from .trace import OPS

DEFAULT_TIMEOUT = 10.0
# After a rank fails, the others get time to report their own errors before they are stopped:
# until no report came for GRACE_AFTER_FAILURE seconds while every rank left is waiting in a
# call (a rank still running its own code may be about to fail the same way), and never more
# than GRACE_MAX seconds. Enough for every rank to hit the same bug, even on a loaded machine.
GRACE_AFTER_FAILURE = 0.5
GRACE_MAX = 3.0
# ``timeout`` counts from the moment every rank is up (process started, group joined), so that a
# slow start on a busy machine is not blamed on the student's code; starting has its own bound.
STARTUP_LIMIT = 60.0
# Output kept per rank and stream; the rest is counted, not stored.
OUTPUT_LIMIT = 1 << 20
# Workers are modules the forkserver imports once, so each rank starts with torch loaded.
_PRELOAD = ["torch", "torch.distributed", "cloudpickle", "commlab.worker"]


def run(fn: Callable[..., Any], world_size: int = 4, *, args: tuple = (),
        backend: str = "auto", timeout: float = DEFAULT_TIMEOUT,
        init_process_group: bool = True, debug: bool = False,
        trace_values: bool = True) -> RunResult:
    """Run ``fn(rank, world_size, *args)`` on ``world_size`` ranks and bring back what they did.

    Args:
        fn: the function each rank runs. It may be defined in a notebook cell, be a closure or a
            lambda, and use the notebook's globals.
        world_size: number of ranks (processes).
        args: extra arguments passed to ``fn`` after ``rank`` and ``world_size``.
        backend: ``"auto"`` (NCCL with one GPU per rank when there are enough GPUs, else gloo on
            the CPU), ``"gloo"`` or ``"nccl"``. Inside ``fn``, ``commlab.device()`` is the
            rank's device, so the same code runs on both.
        timeout: seconds the ranks get to finish; past it every rank is stopped and
            :class:`CollectiveTimeout` says which call each rank was waiting in.
        init_process_group: ``False`` leaves ``dist.init_process_group()`` to ``fn``, which
            finds ``MASTER_ADDR``, ``MASTER_PORT``, ``RANK`` and ``WORLD_SIZE`` in its
            environment, as under ``torchrun``.
        debug: sets ``TORCH_DISTRIBUTED_DEBUG=DETAIL``, which turns hangs and crashes from
            mismatched collectives into immediate errors that name the mismatch (slower).
        trace_values: copy small tensors before and after each call into the trace, for
            pictures and checks.

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
    chosen = choose_backend(backend, world_size)
    payload = _pickle_function(fn, args)
    return _Launch(payload, world_size, chosen, timeout, init_process_group, debug,
                   trace_values).run()


# --- checks before anything starts ----------------------------------------------------------

def _check_arguments(fn: Any, world_size: Any, args: Any, timeout: Any) -> None:
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


def gpu_count() -> int:
    """GPUs this process may use (counted without initialising CUDA where torch can)."""
    try:
        return torch.cuda.device_count() if torch.cuda.is_available() else 0
    except Exception:  # noqa: BLE001 - a broken driver means no GPUs for us
        return 0


def choose_backend(backend: str, world_size: int) -> str:
    """``"nccl"`` or ``"gloo"`` for ``backend`` on this machine; refuses what can't work."""
    if backend not in ("auto", "gloo", "nccl"):
        raise ValueError(f"backend must be 'auto', 'gloo' or 'nccl', got {backend!r}.")
    gpus = gpu_count()
    nccl = torch.distributed.is_nccl_available()
    if backend == "auto":
        return "nccl" if nccl and gpus >= world_size else "gloo"
    if backend == "nccl" and (not nccl or gpus < world_size):
        have = f"{gpus} GPU{'s' if gpus != 1 else ''}" + ("" if nccl else " and no NCCL")
        raise ValueError(
            f"backend='nccl' needs one GPU per rank: world_size={world_size}, but this machine "
            f"has {have}. Use backend='auto' (it picks gloo on the CPU here) or a world_size of "
            f"at most {gpus}." if nccl and gpus else
            f"backend='nccl' needs one GPU per rank: world_size={world_size}, but this machine "
            f"has {have}. Use backend='auto', which picks gloo on the CPU here.")
    return backend


def _pickle_function(fn: Callable, args: tuple) -> bytes:
    try:
        return cloudpickle.dumps((fn, args))
    except Exception as exc:  # noqa: BLE001
        raise TypeError(
            f"the function or its arguments can't be sent to the ranks ({type(exc).__name__}: "
            f"{exc}). Something it uses (an open file, a lock, a generator, a process group) "
            "can't be copied to another process: create it inside the function instead.") from None


# --- the launch --------------------------------------------------------------------------------

def _context() -> Any:
    method = "forkserver" if "forkserver" in mp.get_all_start_methods() else "spawn"
    ctx = mp.get_context(method)
    if method == "forkserver":
        ctx.set_forkserver_preload(_PRELOAD)
        _start_forkserver_quietly()
    return ctx


def _start_forkserver_quietly() -> None:
    """Start the forkserver (once per kernel) with c10d's C++ log level at ERROR.

    torch reads ``TORCH_CPP_LOG_LEVEL`` when it is imported, which for our workers happens once,
    in the forkserver; its warnings would otherwise land in every rank's stderr.
    """
    from multiprocessing import forkserver

    previous = os.environ.get("TORCH_CPP_LOG_LEVEL")
    if previous is None:
        os.environ["TORCH_CPP_LOG_LEVEL"] = "ERROR"
    try:
        forkserver.ensure_running()
    finally:
        if previous is None:
            del os.environ["TORCH_CPP_LOG_LEVEL"]


def _loopback_interface() -> str | None:
    try:
        names = [name for _, name in socket.if_nameindex()]
    except OSError:
        return None
    return next((n for n in ("lo", "lo0") if n in names), None)


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


class _Rank:
    """The launcher's side of one rank."""

    def __init__(self, rank: int):
        self.rank = rank
        self.process: Any = None
        self.control: Any = None
        self.readers: dict[str, Any] = {}
        self.output = {"stdout": bytearray(), "stderr": bytearray()}
        self.dropped = {"stdout": 0, "stderr": 0}
        self.report: tuple[str, dict] | None = None
        self.exitcode: int | None = None
        self.killed = False  # stopped by the launcher, not dead by itself

    def take(self, stream: str, data: bytes) -> None:
        room = OUTPUT_LIMIT - len(self.output[stream])
        self.output[stream] += data[:max(room, 0)]
        self.dropped[stream] += max(len(data) - max(room, 0), 0)

    def text(self, stream: str) -> str:
        text = self.output[stream].decode("utf-8", errors="replace")
        if self.dropped[stream]:
            text += f"\n[... {self.dropped[stream]} more bytes of {stream} not kept ...]\n"
        return text

    @property
    def dead(self) -> bool:
        return self.exitcode is not None


class _Launch:
    def __init__(self, payload: bytes, world_size: int, backend: str, timeout: float,
                 init_process_group: bool, debug: bool, trace_values: bool):
        self.world_size = world_size
        self.backend = backend
        self.timeout = timeout
        self.ranks = [_Rank(r) for r in range(world_size)]
        self.spec = {
            "payload": payload,
            "world_size": world_size,
            "backend": backend,
            "init_process_group": init_process_group,
            "trace_values": trace_values,
            # gloo must never give up before the launcher does: the launcher's message is better.
            "pg_timeout": timeout + 60,
            "environ": dict(os.environ),
            "sys_path": list(sys.path),
            "cwd": os.getcwd(),
        }
        self.rank_environ = {
            "MASTER_ADDR": "127.0.0.1",
            "WORLD_SIZE": str(world_size),
            "LOCAL_WORLD_SIZE": str(world_size),
            # Every rank connects to the store the launcher owns, as under torchrun's agent.
            "TORCHELASTIC_USE_AGENT_STORE": "True",
            "COMMLAB_WORKER": "1",
            "TORCH_CPP_LOG_LEVEL": "INFO" if debug else os.environ.get("TORCH_CPP_LOG_LEVEL",
                                                                        "ERROR"),
        }
        if debug:
            self.rank_environ["TORCH_DISTRIBUTED_DEBUG"] = "DETAIL"
        loopback = _loopback_interface()
        if loopback and "GLOO_SOCKET_IFNAME" not in os.environ:
            self.rank_environ["GLOO_SOCKET_IFNAME"] = loopback
        self.status: Any = None
        self.timed_out = False

    def run(self) -> RunResult:
        store = torch.distributed.TCPStore("127.0.0.1", 0, None, True,
                                           timedelta(seconds=self.timeout + 60),
                                           wait_for_workers=False)
        self.rank_environ["MASTER_PORT"] = str(store.port)
        self.spec["rank_environ"] = self.rank_environ
        try:
            self._start()
            self._supervise()
            if self._all_done():
                self._release()
        finally:
            self._stop_all()
            del store  # closes the port
        return self._outcome()

    def _start(self) -> None:
        ctx = _context()
        self.status = ctx.RawArray("i", 3 * self.world_size)
        for state in self.ranks:
            parent_end, child_end = ctx.Pipe(duplex=True)
            readers, writers = {}, {}
            for stream in ("stdout", "stderr"):
                readers[stream], writers[stream] = ctx.Pipe(duplex=False)
            state.control, state.readers = parent_end, readers
            process = ctx.Process(
                target=worker.main, name=f"commlab-rank-{state.rank}", daemon=True,
                args=(self.spec, state.rank, child_end, writers["stdout"], writers["stderr"],
                      self.status))
            with _main_module_hidden():
                process.start()
            state.process = process
            # Only the child may hold the writing ends, so that its death reads as end of file.
            child_end.close()
            writers["stdout"].close()
            writers["stderr"].close()

    def _supervise(self) -> None:
        """Read output and reports until every rank reported, failed, died or time ran out."""
        waiting: dict[Any, tuple[_Rank, str]] = {}
        for state in self.ranks:
            waiting[state.control] = (state, "control")
            waiting[state.process.sentinel] = (state, "exit")
            for stream, reader in state.readers.items():
                waiting[reader] = (state, stream)
        started_by = time.monotonic() + STARTUP_LIMIT
        deadline = None
        first_failure = last_news = None
        while not all(s.report or s.dead for s in self.ranks):
            now = time.monotonic()
            if deadline is None and self._all_up():
                deadline = now + self.timeout
            if first_failure is not None:
                quiet = now - last_news >= GRACE_AFTER_FAILURE and not self._busy()
                if quiet or now - first_failure >= GRACE_MAX:
                    return
            remaining = (deadline if deadline is not None else started_by) - now
            if remaining <= 0:
                self.timed_out = not self._failed()
                return
            if first_failure is not None or deadline is None:
                remaining = min(remaining, 0.05)  # look at the ranks' phases again soon
            for ready in connection.wait(list(waiting), timeout=remaining):
                state, kind = waiting[ready]
                if kind in ("stdout", "stderr"):
                    if not self._read(state, kind, ready):
                        del waiting[ready]
                elif kind == "control":
                    del waiting[ready]
                    try:
                        kind_, body = ready.recv()
                        state.report = (kind_, cloudpickle.loads(body))
                    except (EOFError, OSError):
                        pass
                else:
                    del waiting[ready]
                    state.process.join(0)
                    state.exitcode = state.process.exitcode
                    if state.exitcode is None:  # sentinel fired before join could see it
                        state.exitcode = -1
                if kind in ("control", "exit"):
                    last_news = time.monotonic()
            if first_failure is None and self._failed():
                first_failure = last_news = time.monotonic()

    def _all_up(self) -> bool:
        """Whether every rank has started its function (or already reported or died)."""
        return all(s.report or s.dead or self.status[3 * s.rank] != worker.STARTING
                   for s in self.ranks)

    def _busy(self) -> bool:
        """Whether a rank that has not reported is still running its own code."""
        return any(not s.report and not s.dead
                   and self.status[3 * s.rank] in (worker.STARTING, worker.RUNNING)
                   for s in self.ranks)

    def _read(self, state: _Rank, stream: str, reader: Any) -> bool:
        try:
            data = os.read(reader.fileno(), 65536)
        except OSError as exc:
            if exc.errno in (errno.EAGAIN, errno.EWOULDBLOCK):
                return True
            return False
        if not data:
            return False
        state.take(stream, data)
        return True

    def _drain(self, until_eof: bool) -> None:
        """Collect output already written; after a kill, everything up to end of file."""
        deadline = time.monotonic() + 2.0
        for state in self.ranks:
            for stream, reader in state.readers.items():
                if reader.closed:
                    continue
                while time.monotonic() < deadline and reader.poll(0.05 if until_eof else 0):
                    if not self._read(state, stream, reader):
                        break

    def _failed(self) -> bool:
        return any((s.report and s.report[0] == "failed") or (s.dead and not s.report)
                   for s in self.ranks)

    def _all_done(self) -> bool:
        return all(s.report and s.report[0] == "done" for s in self.ranks)

    def _release(self) -> None:
        """Every rank finished: keep what they printed, then let them tear the group down."""
        self._drain(until_eof=False)
        for state in self.ranks:
            try:
                state.control.send("exit")
            except OSError:
                pass
        for state in self.ranks:
            state.process.join(5.0)

    def _stop_all(self) -> None:
        # Snapshot positions before the kill: a killed rank can't report where it was.
        self.positions = [tuple(self.status[3 * r:3 * r + 3]) if self.status is not None
                          else (0, 0, 0) for r in range(self.world_size)]
        for state in self.ranks:
            if state.process is not None and state.process.is_alive():
                state.killed = True
                state.process.kill()
        for state in self.ranks:
            if state.process is not None:
                state.process.join(5.0)
                if state.exitcode is None and state.report is None:
                    state.exitcode = state.process.exitcode
        self._drain(until_eof=True)
        for state in self.ranks:
            for conn in [state.control, *state.readers.values()]:
                if conn is not None:
                    conn.close()
            if state.process is not None:
                state.process.close()

    # --- what the notebook gets ---------------------------------------------------------------

    def _partial_result(self) -> RunResult:
        returns, traces, caught = [], [], []
        for state in self.ranks:
            body = state.report[1] if state.report else {}
            returned = body.get("returned")
            returns.append(cloudpickle.loads(returned) if returned is not None else None)
            traces.append(body.get("trace", []))
            caught.append(body.get("warnings", []))
        return RunResult(self.world_size, self.backend, returns,
                         [s.text("stdout") for s in self.ranks],
                         [s.text("stderr") for s in self.ranks], traces, caught)

    def _where(self, rank: int) -> str:
        phase, op, index = self.positions[rank]
        return report.describe_position(phase, OPS[op] if 0 <= op < len(OPS) else None, index)

    def _outcome(self) -> RunResult:
        result = self._partial_result()
        if self._all_done():
            return result
        if self.timed_out:
            raise self._timeout_error(result)
        raise self._failure_error(result)

    def _timeout_error(self, result: RunResult) -> CollectiveTimeout:
        where = {r: self._where(r) for r in range(self.world_size)}
        groups: dict[str, list[int]] = {}
        for r, text in where.items():
            groups.setdefault(text, []).append(r)
        stuck = [(text, ranks) for text, ranks in groups.items() if text.startswith("in ")]
        lines = []
        for text, ranks in sorted(groups.items(), key=lambda item: item[1][0]):
            if text == "finished":
                lines.append(f"{report.rank_list(ranks)} finished")
            else:
                verb = "is" if len(ranks) == 1 else "are"
                lines.append(f"{report.rank_list(ranks)} {verb} still {text}")
        hint = ("A rank waits in a collective until every rank of its group makes the same call. "
                "Check that every rank calls the same collectives in the same order (an `if rank "
                "== ...` around a collective is the usual culprit), or run with debug=True to "
                "have mismatched calls reported at once.")
        point_to_point = ("send", "recv", "isend", "irecv", "batch_isend_irecv")
        if stuck and all(text.split()[1] in point_to_point for text, _ in stuck):
            hint = ("A send completes only when its peer posts the matching recv (and the other "
                    "way round). Check that every send has a recv on the rank it names, in an "
                    "order both ranks reach: two ranks that both send first wait for each other "
                    "forever. Alternate by rank parity, or use isend/irecv or "
                    "batch_isend_irecv.")
        if not stuck:
            hint = ("No rank was waiting in a collective: the function itself took longer than "
                    "the timeout (an endless loop?). Give run() a larger timeout if the work is "
                    "really that long.")
        if all(text == "starting up" for text in where.values()):
            hint = (f"The ranks could not start within {STARTUP_LIMIT:g} s (a machine short of "
                    "memory or processes?). Try fewer ranks, or restart the kernel.")
        message = (f"the ranks did not finish within {self.timeout:g} s and were stopped.\n"
                   + "\n".join(f"  {line}" for line in lines) + "\n" + hint
                   + _outputs_section(result))
        return CollectiveTimeout(message, where, result)

    def _failure_error(self, result: RunResult) -> RankError:
        failed = [s for s in self.ranks if (s.report and s.report[0] == "failed")
                  or (s.dead and not s.report and not s.killed)]
        crashed = {s.rank: report.signal_name(s.exitcode) for s in failed if not s.report}
        # A rank that lost a peer fails too ("Connection closed by peer"): that is an echo of
        # the real failure, not a cause, unless nothing else failed.
        primary = [s for s in failed
                   if not (s.report and report.is_peer_loss(s.report[1]["message"]))] or failed
        failures, sections = {}, []
        by_text: dict[str, list[int]] = {}
        for state in primary:
            if state.report:
                text = report.format_traceback(state.report[1])
                failures[state.rank] = (f"{state.report[1]['type']}: "
                                        f"{report.shorten(state.report[1]['message'])}")
                by_text.setdefault(text, []).append(state.rank)
            else:
                where = self._where(state.rank)
                how = report.signal_name(state.exitcode)
                failures[state.rank] = f"killed by {how}" if state.exitcode < 0 else how
                last = report.last_stderr_lines(state.text("stderr"))
                crash_line = (f"{report.rank_list([state.rank]).capitalize()} died "
                              f"({'killed by ' if state.exitcode < 0 else ''}{how}) while "
                              f"{where}.\n"
                              + (f"  Its last lines on stderr:\n{last}\n" if last else "")
                              + "  " + report.crash_cause(state.exitcode, state.text("stderr"),
                                                          where if where.startswith("in ")
                                                          else None))
                sections.append(crash_line)
        for text, ranks in by_text.items():
            sections.append(f"{report.rank_list(ranks).capitalize()} raised:\n{text}")
        others = [s.rank for s in self.ranks if s.rank not in failures]
        if others:
            places: dict[str, list[int]] = {}
            for r in others:
                state = self.ranks[r]
                text = "finished" if state.report and state.report[0] == "done" else (
                    "stopped " + self._where(r) if not state.report else
                    "failed in turn: " + state.report[1]["message"].splitlines()[0][:120])
                places.setdefault(text, []).append(r)
            sections.append("The other ranks: " + "; ".join(
                f"{report.rank_list(rs)} {text}" for text, rs in places.items()) + ".")
        message = "\n\n".join(sections) + _outputs_section(result)
        if crashed:
            return RankCrashed(message, failures, result, crashed)
        return RankError(message, failures, result)


def _outputs_section(result: RunResult) -> str:
    if not any(out.strip() or err.strip() for out, err in zip(result.stdout, result.stderr)):
        return ""
    return "\n\nWhat the ranks printed:\n" + repr(result)
