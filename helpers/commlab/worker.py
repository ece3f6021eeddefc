"""The code that runs inside each rank's process.

A worker is forked from a clean forkserver that has torch preloaded, so it starts in a few
milliseconds and can use CUDA even when the notebook's kernel already did. It:

1. sends its stdout and stderr (file descriptors 1 and 2, so C++ output too) to pipes the
   launcher reads, unbuffered, so nothing printed before a hang or a crash is lost;
2. takes the notebook's environment, ``sys.path`` and working directory;
3. installs the trace, *then* unpickles the student's function, so that it finds the traced
   ``torch.distributed`` functions;
4. sets up the process group (unless the student does it), calls ``fn(rank, world_size, *args)``;
5. reports ``("done", ...)`` or ``("failed", ...)`` on its control pipe and waits for the
   launcher's word before tearing the group down, so that a rank that finishes early never
   closes connections a slower peer still needs.

If the launcher goes away (the kernel died or was interrupted), the control pipe closes and the
worker exits at once: no rank outlives the cell that started it.
"""

from __future__ import annotations

import io
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

from . import trace as tracing

# Phases a worker writes into the shared status array (three ints per rank: phase, op, index).
STARTING, RUNNING, IN_CALL, FINISHED, FAILED = 0, 1, 2, 3, 4

_DEVICE: torch.device | None = None

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
_TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__))


def current_device() -> torch.device | None:
    """The device of the rank this process is running, or ``None`` outside a rank."""
    return _DEVICE


def set_current_device(device: torch.device | None) -> None:
    global _DEVICE
    _DEVICE = device


def main(spec: dict[str, Any], rank: int, control: Any, out_pipe: Any, err_pipe: Any,
         status: Any) -> None:
    """Entry point of a worker process (see the module docstring)."""
    # The launcher decides what happens on the stop button; a worker must not print its own
    # KeyboardInterrupt traceback into the cell.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _redirect_output(out_pipe, err_pipe)
    _adopt_notebook_state(spec, rank)
    caught_warnings: list[str] = []
    _capture_warnings(caught_warnings)

    exit_allowed = threading.Event()
    threading.Thread(target=_watch_launcher, args=(control, exit_allowed), daemon=True).start()

    recorder = tracing.Recorder(rank, status, keep_values=spec["trace_values"])
    tracing.install(recorder)
    world_size = spec["world_size"]
    try:
        fn, args = cloudpickle.loads(spec["payload"])
        device = _pick_device(spec["backend"], rank)
        set_current_device(device)
        if spec["init_process_group"]:
            import torch.distributed as dist

            dist.init_process_group(spec["backend"], rank=rank, world_size=world_size,
                                    timeout=timedelta(seconds=spec["pg_timeout"]))
        status[3 * rank] = RUNNING
        value = fn(rank, world_size, *args)
        status[3 * rank] = FINISHED
        report = ("done", _pack(rank, value, recorder, caught_warnings))
    except BaseException as exc:  # noqa: BLE001 - every failure goes back to the notebook
        status[3 * rank] = FAILED
        report = ("failed", _describe_failure(exc, recorder, caught_warnings))
    _flush()
    control.send(report)
    exit_allowed.wait()
    if spec["backend"] == "nccl":
        # NCCL wants an orderly shutdown; for gloo, exiting closes every socket just as well
        # and much sooner.
        _teardown()
    _flush()
    os._exit(0)


# --- set-up ------------------------------------------------------------------------------------

def _redirect_output(out_pipe: Any, err_pipe: Any) -> None:
    os.dup2(out_pipe.fileno(), 1)
    os.dup2(err_pipe.fileno(), 2)
    out_pipe.close()
    err_pipe.close()
    # Unbuffered text streams: every print reaches the launcher at once, even before a hang.
    sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), encoding="utf-8",
                                  errors="backslashreplace", write_through=True)
    sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), encoding="utf-8",
                                  errors="backslashreplace", write_through=True)


def _adopt_notebook_state(spec: dict[str, Any], rank: int) -> None:
    """Make the worker see what the notebook sees: environment, import path, directory."""
    os.environ.clear()
    os.environ.update(spec["environ"])
    os.environ.update(spec["rank_environ"])
    os.environ["RANK"] = str(rank)
    os.environ["LOCAL_RANK"] = str(rank)
    # torch read TORCH_DISTRIBUTED_DEBUG when the forkserver imported it: read it again.
    import torch.distributed as dist

    dist.set_debug_level_from_env()
    sys.path[:] = spec["sys_path"]
    try:
        os.chdir(spec["cwd"])
    except OSError:
        pass


def _capture_warnings(sink: list[str]) -> None:
    def keep(message, category, filename, lineno, file=None, line=None):
        sink.append(warnings.formatwarning(message, category, filename, lineno, line).strip())

    warnings.showwarning = keep


def _pick_device(backend: str, rank: int) -> torch.device:
    if backend == "nccl":
        torch.cuda.set_device(rank)
        return torch.device("cuda", rank)
    return torch.device("cpu")


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


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001
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


def _pack(rank: int, value: Any, recorder: tracing.Recorder, caught: list[str]) -> bytes:
    try:
        returned = cloudpickle.dumps(to_cpu(value))
    except Exception as exc:  # noqa: BLE001
        raise ReturnNotSendable(
            f"rank {rank} returned a {type(value).__name__} that can't be sent back to the "
            f"notebook ({type(exc).__name__}: {exc}). Return tensors, numbers, strings or "
            "lists/dicts of them instead.") from None
    return cloudpickle.dumps({"returned": returned, "trace": recorder.calls,
                              "warnings": caught})


class ReturnNotSendable(Exception):
    """What a rank returned can't be pickled."""


def _describe_failure(exc: BaseException, recorder: tracing.Recorder,
                      caught: list[str]) -> bytes:
    """The exception as plain data: type, message, and the frames worth showing a student."""
    frames = traceback.extract_tb(exc.__traceback__)
    own = [f for f in frames if not _is_library_frame(f.filename)]
    inside = next((f.name for f in reversed(frames) if _is_library_frame(f.filename)
                   and f.filename.startswith(_TORCH_DIR)), None)
    last = recorder.calls[-1] if recorder.calls else None
    in_call = last.label if last is not None and last.error else None
    info = {
        "type": type(exc).__name__,
        "message": str(exc),
        "frames": [(f.filename, f.lineno, f.name, f.line) for f in (own or frames)],
        "raised_inside": (in_call or inside) if own and frames[-1] not in own else None,
        "in_call": in_call,
    }
    try:
        return cloudpickle.dumps({**info, "trace": recorder.calls, "warnings": caught})
    except Exception:  # noqa: BLE001 - a trace that can't be pickled must not hide the error
        return cloudpickle.dumps({**info, "trace": [], "warnings": caught})


_LIBRARY_DIRS = tuple({_PACKAGE_DIR, _TORCH_DIR, sysconfig.get_paths()["stdlib"],
                       sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]})


def _is_library_frame(filename: str) -> bool:
    """Frames of commlab, torch, the standard library and installed packages: not the student's."""
    path = os.path.abspath(filename)
    return path.startswith(_LIBRARY_DIRS) or "site-packages" in path
