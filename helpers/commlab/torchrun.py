"""Running a chapter's function unchanged under ``torchrun``, across processes or machines.

When this process already is one rank of a ``torchrun`` job (``RANK`` and ``WORLD_SIZE`` in the
environment), ``commlab.run`` starts nothing: it calls the function here, on this rank, with the
same tracing and output capture, then shares every rank's output and trace with every rank, so
the result looks exactly as it does in a notebook.
"""

from __future__ import annotations

import contextlib
import io
import os
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from . import report, trace, worker
from .errors import RankError
from .result import RunResult


def launched_by_torchrun() -> bool:
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ and not os.environ.get(
        "COMMLAB_WORKER")


def run_here(fn: Callable[..., Any], *, args: tuple, backend: str, timeout: float,
             init_process_group: bool, debug: bool, trace_values: bool) -> RunResult:
    """Run ``fn`` on this torchrun rank; see the module docstring."""
    from .launch import choose_backend

    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", world_size))
    if debug:
        os.environ["TORCH_DISTRIBUTED_DEBUG"] = "DETAIL"
    chosen = choose_backend(backend, local_world)
    if chosen == "nccl":
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
    worker.set_current_device(device)
    owns_group = not dist.is_initialized()
    if owns_group and init_process_group:
        dist.init_process_group(chosen, timeout=timedelta(seconds=timeout))

    recorder = trace.Recorder(rank, keep_values=trace_values)
    undo = trace.install(recorder)
    out, err = io.StringIO(), io.StringIO()
    value, failure = None, None
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            value = fn(rank, world_size, *args)
    except Exception as exc:  # noqa: BLE001 - shared with every rank below
        failure = f"{type(exc).__name__}: {exc}"
    finally:
        undo()
    mine = {"returned": worker.to_cpu(value), "stdout": out.getvalue(),
            "stderr": err.getvalue(), "trace": recorder.calls, "failure": failure}
    everyone: list[Any] = [None] * world_size
    dist.all_gather_object(everyone, mine)
    result = RunResult(world_size, dist.get_backend(), [e["returned"] for e in everyone],
                       [e["stdout"] for e in everyone], [e["stderr"] for e in everyone],
                       [e["trace"] for e in everyone], [[] for _ in everyone])
    if owns_group and init_process_group:
        dist.destroy_process_group()
    failures = {r: e["failure"] for r, e in enumerate(everyone) if e["failure"]}
    if failures:
        lines = [f"{report.rank_list([r]).capitalize()} raised {text}"
                 for r, text in failures.items()]
        raise RankError("\n".join(lines) + "\n\nWhat the ranks printed:\n" + repr(result),
                        failures, result)
    return result
