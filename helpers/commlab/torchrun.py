"""Running a chapter's function unchanged under ``torchrun``, across processes or machines.

When this process already is one rank of a ``torchrun`` job (``RANK`` and ``WORLD_SIZE`` in the
environment), ``commlab.run`` starts nothing: it calls the function here, on this rank, with the
same backend choice (:mod:`commlab.backend`), tracing and fd-level output capture
(:mod:`commlab.capture`), then shares every rank's output and trace with every rank, so the
result looks exactly as it does in a notebook.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import torch.distributed as dist

from . import backend as backends
from . import capture, explain, trace
from .result import RunResult
from .worker import install_trace, to_cpu


def launched_by_torchrun() -> bool:
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ and not os.environ.get(
        "COMMLAB_WORKER")


def run_here(fn: Callable[..., Any], *, args: tuple, backend: str, timeout: float,
             init_process_group: bool, debug: bool, trace_values: bool) -> RunResult:
    """Run ``fn`` on this torchrun rank; see the module docstring."""
    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", world_size))
    if debug:
        os.environ["TORCH_DISTRIBUTED_DEBUG"] = "DETAIL"
    # No rank returns from init_process_group before every rank has built the group.
    os.environ["TORCH_DIST_INIT_BARRIER"] = "1"
    chosen = backends.choose_backend(backend, local_world)
    backends.set_current_device(backends.pick_device(chosen, local_rank, local_world))
    owns_group = not dist.is_initialized() and init_process_group
    if owns_group:
        dist.init_process_group(backends.group_backend(chosen, local_world),
                                timeout=timedelta(seconds=timeout))
    mine = _call_traced(fn, rank, world_size, args, trace_values)
    everyone: list[Any] = [None] * world_size
    dist.all_gather_object(everyone, mine)
    result = RunResult(world_size, chosen, [e["returned"] for e in everyone],
                       [e["stdout"] for e in everyone], [e["stderr"] for e in everyone],
                       [e["trace"] for e in everyone], [[] for _ in everyone])
    if owns_group:
        dist.destroy_process_group()
    failures = {r: e["failure"] for r, e in enumerate(everyone) if e["failure"]}
    if failures:
        raise explain.torchrun_failure(failures, result)
    return result


def _call_traced(fn: Callable[..., Any], rank: int, world_size: int, args: tuple,
                 trace_values: bool) -> dict[str, Any]:
    """Call ``fn`` here with the trace installed and fds 1 and 2 captured."""
    recorder = trace.Recorder(rank, keep_values=trace_values)
    undo = install_trace(recorder)
    value, failure = None, None
    try:
        with capture.captured() as printed:
            value = fn(rank, world_size, *args)
    except Exception as exc:  # noqa: BLE001 - shared with every rank
        failure = f"{type(exc).__name__}: {exc}"
    finally:
        undo()
    return {"returned": to_cpu(value), "stdout": printed.get("stdout", ""),
            "stderr": printed.get("stderr", ""), "trace": recorder.calls, "failure": failure}
