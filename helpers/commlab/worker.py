"""The code that runs inside each rank's process.

A worker is forked from a clean forkserver that has torch preloaded, so it starts in a few
milliseconds and can use CUDA even when the notebook's kernel already did. It:

1. sends its stdout and stderr to the launcher (:func:`commlab.capture.redirect`);
2. lets a grader seal it (:data:`BEFORE_RANK`), and takes its private input if the launch has
   them (:mod:`commlab.control`);
3. takes the notebook's environment, ``sys.path`` and working directory (:class:`LaunchSpec`);
4. installs the trace, *then* unpickles the student's function, so that it finds the traced
   ``torch.distributed`` functions, sets up the process group (unless the function does it) and
   calls ``fn(rank, world_size, *args)``; for a grader, the group comes first and the function
   is unpickled only after a barrier, so that nothing of it runs before the grader counts;
5. sends one :class:`RankReport` on its control pipe and waits for the launcher's word before
   tearing the group down, so that a rank that finishes early never closes connections a slower
   peer still needs.

If the launcher goes away (the kernel died or was interrupted), the control pipe closes and the
worker exits at once: no rank outlives the cell that started it.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import pickle
import signal
import sys
import sysconfig
import traceback
import warnings
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import cloudpickle
import torch

from . import answers, backend, capture, control, functional, plain, rehearsal, status
from . import trace as tracing
from .errors import RankFailure, ReturnNotSendable

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
_TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__))


@dataclasses.dataclass
class LaunchSpec:
    """Everything a rank needs from the launcher, built once per run."""

    payload: bytes  # cloudpickle of (fn, args)
    world_size: int
    backend: str  # the branch: "gloo" or "nccl"
    group_backend: str  # what init_process_group is given (see commlab.backend)
    init_process_group: bool
    trace_values: bool
    pg_timeout: float
    environ: dict[str, str]  # the notebook's environment with the ranks' variables added
    sys_path: list[str]
    cwd: str
    private: bool = False  # each rank is sent a private input of its own (commlab.control)
    data_reports: bool = False  # reports as plain data (commlab.plain), for a grader
    windows: bool = False  # a barrier once the group is up, before the function is unpickled


# Set by a grader in the process that forks the ranks, before it forks them: called first thing
# in each rank with (rank, its board entry, the file descriptors it keeps), to seal it.
BEFORE_RANK: Callable[[int, status.RankBoard, list[int]], None] | None = None
# Set by a grader's seal in a rank whose resources it limited: the sentence that names the limit
# an exception says the rank reached ("" for any other), added to the failure's message.
EXPLAIN_FAILURE: Callable[[BaseException], str] | None = None
# This rank's private input, when the launch gave each rank one.
PRIVATE: bytes | None = None


@dataclasses.dataclass
class RankReport:
    """What a rank sends back once: what it returned, or how it failed, and its trace."""

    returned: Any = None
    trace: list[tracing.Call] = dataclasses.field(default_factory=list)
    warnings: list[str] = dataclasses.field(default_factory=list)
    failure: RankFailure | None = None
    groups: list[tracing.Call] = dataclasses.field(default_factory=list)
    # the rank imported torch._dynamo itself (see commlab.processes.DYNAMO_CHAPTERS)
    imported_dynamo: bool = False

    @property
    def done(self) -> bool:
        return self.failure is None


def install_trace(recorder: tracing.Recorder) -> Callable[[], None]:
    """Record every call this rank makes into ``recorder``: ``torch.distributed``'s functions
    (:mod:`commlab.trace`) and the functional collectives DTensor calls
    (:mod:`commlab.functional`). Returns an undo function."""
    undo_distributed = tracing.install(recorder)
    undo_functional = functional.install(recorder)

    def undo() -> None:
        undo_functional()
        undo_distributed()

    return undo


def main(spec: LaunchSpec, rank: int, connection: Any, out_pipe: Any, err_pipe: Any,
         board: status.RankBoard) -> None:
    """Entry point of a worker process (see the module docstring)."""
    global PRIVATE
    # The launcher decides what happens on the stop button; a worker must not print its own
    # KeyboardInterrupt traceback into the cell.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    capture.redirect(out_pipe, err_pipe)
    channel = control.RankChannel(connection)
    if BEFORE_RANK is not None:
        BEFORE_RANK(rank, board, [0, 1, 2, connection.fileno()])
    if spec.private:
        PRIVATE = channel.read_private()
    _adopt_notebook_state(spec, rank)
    caught_warnings: list[str] = []
    _capture_warnings(caught_warnings)
    channel.start()
    control.install(channel)

    recorder = tracing.Recorder(rank, board, keep_values=spec.trace_values)
    install_trace(recorder)
    _run_and_report(spec, rank, board, channel, recorder, caught_warnings)


def standby(connection: Any, out_pipe: Any, err_pipe: Any, slot: Any,
            rehearse: bool = False) -> None:
    """Entry point of a worker started before its run (:mod:`commlab.standby`): all that needs
    no launch is done while it waits (output, control thread, trace, and with ``rehearse`` a
    rehearsal of the run's first steps: :mod:`commlab.rehearsal`), then it takes the rank and
    launch the run sends and goes on as :func:`main`. If the launcher goes away first, it ends
    at once."""
    global PRIVATE
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    capture.redirect(out_pipe, err_pipe)
    channel = control.RankChannel(connection)
    channel.start()
    caught_warnings: list[str] = []
    _capture_warnings(caught_warnings)
    recorder = tracing.Recorder(-1)
    install_trace(recorder)
    if rehearse:
        rehearsal.rehearse(recorder)
    try:
        rank, launch = channel.read_start()
    except control.LauncherGone:
        os._exit(0)
    multiprocessing.current_process().name = f"commlab-rank-{rank}"
    spec: LaunchSpec = pickle.loads(launch)
    board = status.RankBoard(slot, 0, None, rank)
    recorder.belong_to(rank, board, spec.trace_values)
    if spec.private:
        PRIVATE = channel.read_private()
    _adopt_notebook_state(spec, rank)
    control.install(channel)
    _run_and_report(spec, rank, board, channel, recorder, caught_warnings)


def _run_and_report(spec: LaunchSpec, rank: int, board: status.RankBoard,
                    channel: control.RankChannel, recorder: tracing.Recorder,
                    caught_warnings: list[str]) -> None:
    """Run the function, send the report, wait for the launcher's word, exit."""
    had_dynamo = "torch._dynamo" in sys.modules
    try:
        value = _call(spec, rank, board)
        board.set_phase(status.FINISHED)
        message = _done_message(spec, rank, value, recorder, caught_warnings,
                                not had_dynamo and "torch._dynamo" in sys.modules)
    except BaseException as exc:  # noqa: BLE001 - every failure goes back to the notebook
        board.set_phase(status.FAILED)
        message = _failure_message(spec, exc, recorder, caught_warnings,
                                   not had_dynamo and "torch._dynamo" in sys.modules)
    capture.flush()
    channel.report(message)
    channel.exit_allowed.wait()
    if spec.backend == "nccl":
        # NCCL wants an orderly shutdown; for gloo, exiting closes every socket just as well
        # and much sooner.
        _teardown()
    capture.flush()
    os._exit(0)


def _call(spec: LaunchSpec, rank: int, board: status.RankBoard) -> Any:
    if not spec.windows:
        fn, args = cloudpickle.loads(spec.payload)
    backend.set_current_device(backend.pick_device(spec.backend, rank, spec.world_size))
    if spec.init_process_group:
        import torch.distributed as dist

        dist.init_process_group(spec.group_backend, rank=rank, world_size=spec.world_size,
                                timeout=timedelta(seconds=spec.pg_timeout))
    board.set_phase(status.RUNNING)
    if spec.windows:
        # a grader counts the network from here on: nothing of the function's, not even its
        # module-level code, has run before (and a hang in that code counts against `timeout`)
        control.barrier(control.WINDOW + "start")
        fn, args = cloudpickle.loads(spec.payload)
    return fn(rank, spec.world_size, *args)


# --- set-up ------------------------------------------------------------------------------------

def _adopt_notebook_state(spec: LaunchSpec, rank: int) -> None:
    """Make the worker see what the notebook sees: environment, import path, directory."""
    os.environ.clear()
    os.environ.update(spec.environ)
    os.environ["RANK"] = str(rank)
    os.environ["LOCAL_RANK"] = str(rank)
    # torch read TORCH_DISTRIBUTED_DEBUG when the forkserver imported it: read it again.
    import torch.distributed as dist

    dist.set_debug_level_from_env()
    _threads_as_under_torchrun(spec.world_size)
    sys.path[:] = spec.sys_path
    try:
        os.chdir(spec.cwd)
    except OSError:
        pass


def _threads_as_under_torchrun(world_size: int) -> None:
    """One compute thread per rank unless the notebook says otherwise, as torchrun arranges: it
    sets ``OMP_NUM_THREADS=1`` for each of several processes on one machine where the variable
    is not set. With torch's default, a thread per core in every rank, the ranks' threads
    outnumber the cores they share and wait for each other, spinning: chapter 17's solution
    then took 36 s of CPU rather than 28, chapter 13's 12 rather than 8, for the same results.
    torch read the variable when the forkserver imported it, so the rank's count is set here
    from the notebook's environment."""
    if world_size > 1 and "OMP_NUM_THREADS" not in os.environ:
        os.environ["OMP_NUM_THREADS"] = "1"
    threads = os.environ.get("OMP_NUM_THREADS", "")
    if threads.isdigit() and int(threads) > 0:
        torch.set_num_threads(int(threads))


def _capture_warnings(sink: list[str]) -> None:
    def keep(message, category, filename, lineno, file=None, line=None):
        sink.append(warnings.formatwarning(message, category, filename, lineno, line).strip())

    warnings.showwarning = keep


def _teardown() -> None:
    import torch.distributed as dist

    try:
        if dist.is_initialized():
            dist.destroy_process_group()
    except Exception:  # noqa: BLE001 - the run's results are already with the launcher
        pass


# --- reporting ---------------------------------------------------------------------------------

def to_cpu(value: Any) -> Any:
    """``value`` with every tensor in it detached and copied to the CPU."""
    if isinstance(value, torch.Tensor):
        return value.detach().to("cpu", copy=True)
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return type(value)(*(to_cpu(v) for v in value))
    if isinstance(value, (list, tuple)):
        return type(value)(to_cpu(v) for v in value)
    if isinstance(value, dict):
        return {k: to_cpu(v) for k, v in value.items()}
    return value


def _done_message(spec: LaunchSpec, rank: int, value: Any, recorder: tracing.Recorder,
                  caught: list[str], imported_dynamo: bool) -> bytes:
    """The report of a rank that returned, encoded once; what can't be sent is refused here,
    where the error can still name the rank."""
    report = RankReport(to_cpu(value), recorder.calls, caught, groups=recorder.groups,
                        imported_dynamo=imported_dynamo)
    if spec.data_reports:
        return plain.dumps(_report_fields(report), f"what rank {rank} returned")
    try:
        return cloudpickle.dumps(report)
    except Exception as exc:  # noqa: BLE001
        raise ReturnNotSendable(
            f"rank {rank} returned a {type(value).__name__} that can't be sent back to the "
            f"notebook ({type(exc).__name__}: {exc}). Return tensors, numbers, strings or "
            "lists/dicts of them instead.") from None


def _failure_message(spec: LaunchSpec, exc: BaseException, recorder: tracing.Recorder,
                     caught: list[str], imported_dynamo: bool) -> bytes:
    failure = describe_failure(exc, recorder.calls)
    for calls in (recorder.calls, []):  # a trace that can't be sent must not hide the error
        report = RankReport(None, calls, caught, failure, recorder.groups if calls else [],
                            imported_dynamo)
        try:
            if spec.data_reports:
                return plain.dumps(_report_fields(report), "the trace")
            return cloudpickle.dumps(report)
        except Exception:  # noqa: BLE001
            continue
    return cloudpickle.dumps(RankReport(None, [], [], failure))


def _report_fields(report: RankReport) -> dict[str, Any]:
    return {f.name: getattr(report, f.name) for f in dataclasses.fields(report)}


def read_report(data: bytes, data_reports: bool) -> RankReport:
    """A report as the launcher reads it: unpickled (the notebook's own function), or, for a
    grader, read as plain data and checked to be a report (:mod:`commlab.plain`)."""
    if not data_reports:
        return cloudpickle.loads(data)
    fields = plain.loads(data, control.MAX_REPORT_BYTES)
    expected = {f.name for f in dataclasses.fields(RankReport)}
    if not isinstance(fields, dict) or set(fields) != expected:
        raise plain.NotPlain("the rank's report is not one")
    report = RankReport(**fields)
    if not (isinstance(report.trace, list) and isinstance(report.groups, list)
            and all(isinstance(c, tracing.Call) for c in report.trace + report.groups)
            and isinstance(report.warnings, list)
            and all(isinstance(w, str) for w in report.warnings)
            and (report.failure is None or isinstance(report.failure, RankFailure))
            and isinstance(report.imported_dynamo, bool)):
        raise plain.NotPlain("the rank's report is not one")
    return report


def describe_failure(exc: BaseException, calls: list[tracing.Call]) -> RankFailure:
    """The exception as plain data: type, message, and the frames worth showing a student."""
    frames = traceback.extract_tb(exc.__traceback__)
    own = [f for f in frames if not _is_library_frame(f.filename)]
    if not own and frames and frames[-1].filename == answers.__file__:
        frames = []  # the student's cells, as grading defines them: the message names the cell
    inside = next((f.name for f in reversed(frames) if _is_library_frame(f.filename)
                   and f.filename.startswith(_TORCH_DIR)), None)
    last = calls[-1] if calls else None
    in_call = last.label if last is not None and last.error else None
    why = answers.explain_name_error(exc)  # a name the grading rule left undefined
    if not why and EXPLAIN_FAILURE is not None:
        why = EXPLAIN_FAILURE(exc)
    return RankFailure(
        type=type(exc).__name__, message=f"{exc}. {why}" if why else str(exc),
        frames=[(f.filename, f.lineno, f.name, f.line) for f in (own or frames)],
        raised_inside=(in_call or inside) if own and frames[-1] not in own else None,
        in_call=in_call)


_LIBRARY_DIRS = tuple({_PACKAGE_DIR, _TORCH_DIR, sysconfig.get_paths()["stdlib"],
                       sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]})


def _is_library_frame(filename: str) -> bool:
    """Frames of commlab, torch, the standard library and installed packages: not the student's."""
    path = os.path.abspath(filename)
    return path.startswith(_LIBRARY_DIRS) or "site-packages" in path
