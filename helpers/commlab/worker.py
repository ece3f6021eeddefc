"""The code that runs inside each rank's process.

A worker is forked from a clean forkserver that has torch preloaded, so it starts in a few
milliseconds and can use CUDA even when the notebook's kernel already did. It:

1. sends its stdout and stderr to the launcher (:func:`commlab.capture.redirect`);
2. takes the notebook's environment, ``sys.path`` and working directory (:class:`LaunchSpec`);
3. installs the trace, *then* unpickles the student's function, so that it finds the traced
   ``torch.distributed`` functions;
4. sets up the process group (unless the student does it), calls ``fn(rank, world_size, *args)``;
5. sends one :class:`RankReport` on its control pipe and waits for the launcher's word before
   tearing the group down, so that a rank that finishes early never closes connections a slower
   peer still needs.

If the launcher goes away (the kernel died or was interrupted), the control pipe closes and the
worker exits at once: no rank outlives the cell that started it.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import sys
import sysconfig
import threading
import traceback
import warnings
from datetime import timedelta
from typing import Any

import cloudpickle
import torch

from . import backend, capture, status
from . import trace as tracing
from .errors import ReturnNotSendable

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


@dataclasses.dataclass
class RankFailure:
    """An exception a rank raised, as plain data: the frames worth showing a student."""

    type: str
    message: str
    frames: list[tuple[str, int, str, str | None]]
    raised_inside: str | None = None
    in_call: str | None = None


@dataclasses.dataclass
class RankReport:
    """What a rank sends back once: what it returned, or how it failed, and its trace."""

    returned: Any = None
    trace: list[tracing.Call] = dataclasses.field(default_factory=list)
    warnings: list[str] = dataclasses.field(default_factory=list)
    failure: RankFailure | None = None

    @property
    def done(self) -> bool:
        return self.failure is None


def main(spec: LaunchSpec, rank: int, control: Any, out_pipe: Any, err_pipe: Any,
         board: status.RankBoard) -> None:
    """Entry point of a worker process (see the module docstring)."""
    # The launcher decides what happens on the stop button; a worker must not print its own
    # KeyboardInterrupt traceback into the cell.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    capture.redirect(out_pipe, err_pipe)
    _adopt_notebook_state(spec, rank)
    caught_warnings: list[str] = []
    _capture_warnings(caught_warnings)

    exit_allowed = threading.Event()
    threading.Thread(target=_watch_launcher, args=(control, exit_allowed), daemon=True).start()

    recorder = tracing.Recorder(rank, board, keep_values=spec.trace_values)
    tracing.install(recorder)
    try:
        value = _call(spec, rank, board)
        board.set_phase(status.FINISHED)
        message = _done_message(rank, value, recorder, caught_warnings)
    except BaseException as exc:  # noqa: BLE001 - every failure goes back to the notebook
        board.set_phase(status.FAILED)
        message = _pickled_failure(exc, recorder, caught_warnings)
    capture.flush()
    control.send_bytes(message)
    exit_allowed.wait()
    if spec.backend == "nccl":
        # NCCL wants an orderly shutdown; for gloo, exiting closes every socket just as well
        # and much sooner.
        _teardown()
    capture.flush()
    os._exit(0)


def _call(spec: LaunchSpec, rank: int, board: status.RankBoard) -> Any:
    fn, args = cloudpickle.loads(spec.payload)
    backend.set_current_device(backend.pick_device(spec.backend, rank, spec.world_size))
    if spec.init_process_group:
        import torch.distributed as dist

        dist.init_process_group(spec.group_backend, rank=rank, world_size=spec.world_size,
                                timeout=timedelta(seconds=spec.pg_timeout))
    board.set_phase(status.RUNNING)
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
    sys.path[:] = spec.sys_path
    try:
        os.chdir(spec.cwd)
    except OSError:
        pass


def _capture_warnings(sink: list[str]) -> None:
    def keep(message, category, filename, lineno, file=None, line=None):
        sink.append(warnings.formatwarning(message, category, filename, lineno, line).strip())

    warnings.showwarning = keep


def _watch_launcher(control: Any, exit_allowed: threading.Event) -> None:
    """Wait for the launcher's word; if it is anything but "exit", or the pipe closes, leave now."""
    try:
        message = control.recv()
    except (EOFError, OSError):
        message = None
    if message == "exit":
        exit_allowed.set()
    else:
        os._exit(3)


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


def _done_message(rank: int, value: Any, recorder: tracing.Recorder, caught: list[str]
                  ) -> bytes:
    """The report of a rank that returned, pickled once; what can't be pickled is refused here,
    where the error can still name the rank."""
    value = to_cpu(value)
    try:
        return cloudpickle.dumps(RankReport(value, recorder.calls, caught))
    except Exception as exc:  # noqa: BLE001
        raise ReturnNotSendable(
            f"rank {rank} returned a {type(value).__name__} that can't be sent back to the "
            f"notebook ({type(exc).__name__}: {exc}). Return tensors, numbers, strings or "
            "lists/dicts of them instead.") from None


def _pickled_failure(exc: BaseException, recorder: tracing.Recorder, caught: list[str]) -> bytes:
    failure = describe_failure(exc, recorder.calls)
    try:
        return cloudpickle.dumps(RankReport(None, recorder.calls, caught, failure))
    except Exception:  # noqa: BLE001 - a trace that can't be pickled must not hide the error
        return cloudpickle.dumps(RankReport(None, [], caught, failure))


def describe_failure(exc: BaseException, calls: list[tracing.Call]) -> RankFailure:
    """The exception as plain data: type, message, and the frames worth showing a student."""
    frames = traceback.extract_tb(exc.__traceback__)
    own = [f for f in frames if not _is_library_frame(f.filename)]
    inside = next((f.name for f in reversed(frames) if _is_library_frame(f.filename)
                   and f.filename.startswith(_TORCH_DIR)), None)
    last = calls[-1] if calls else None
    in_call = last.label if last is not None and last.error else None
    return RankFailure(
        type=type(exc).__name__, message=str(exc),
        frames=[(f.filename, f.lineno, f.name, f.line) for f in (own or frames)],
        raised_inside=(in_call or inside) if own and frames[-1] not in own else None,
        in_call=in_call)


_LIBRARY_DIRS = tuple({_PACKAGE_DIR, _TORCH_DIR, sysconfig.get_paths()["stdlib"],
                       sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]})


def _is_library_frame(filename: str) -> bool:
    """Frames of commlab, torch, the standard library and installed packages: not the student's."""
    path = os.path.abspath(filename)
    return path.startswith(_LIBRARY_DIRS) or "site-packages" in path
