"""Running a notebook's cells on a kernel from the trusted side: nbgrader's sanitizing
preprocessors, every cell sent to a warm kernel, nbgrader's output limits. The notebook that
comes back is the one the grader's client received: the student's code never writes it.

The student's own notebook runs on a sandboxed kernel (for the feedback page: their outputs);
the scoring notebook runs on the scoring kernel (see :mod:`grader.trusted.scoring_notebook`)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from nbclient.exceptions import DeadKernelError
from nbgrader.preprocessors import (
    CheckCellMetadata,
    ClearOutput,
    DeduplicateIds,
    Execute,
    LimitOutput,
    OverwriteCells,
    OverwriteKernelspec,
)

from .kernels import Kernel


def resources(chapter: str, student: str, db_url: str) -> dict:
    """What nbgrader's preprocessors read about the notebook they work on."""
    return {"nbgrader": {"notebook": chapter, "assignment": chapter, "student": student,
                         "db_url": db_url}}


def sanitize(notebook, config, info: dict):
    """nbgrader autograde's first pass: clear outputs, restore test and locked cells (and add
    missing ones) from the gradebook, set the course's kernel."""
    config.OverwriteCells.add_missing_cells = True
    for step in (ClearOutput, DeduplicateIds, OverwriteKernelspec, OverwriteCells,
                 CheckCellMetadata):
        notebook, info = step(config=config).preprocess(notebook, info)
    return notebook


def limit_outputs(notebook, config, info: dict):
    """nbgrader autograde's output limits (lines per output, traceback length)."""
    for step in (LimitOutput, CheckCellMetadata):
        notebook, info = step(config=config).preprocess(notebook, info)
    return notebook


# Seconds an interrupted cell's kernel gets to finish its outputs (see _Client)
INTERRUPT_GRACE = 30


class _Client(Execute):
    """nbgrader's Execute (an error output for a cell that timed out, errors allowed), on a
    kernel started elsewhere; it remembers which cells it interrupted at the cell limit."""

    interrupted: set[int]
    current: int = -1

    async def _async_handle_timeout(self, timeout, cell=None):
        self.interrupted.add(self.current)
        # The interrupted cell's last messages come once the kernel has stopped what it ran
        # (commlab stops its ranks first), which a loaded machine can take longer than
        # nbclient's few seconds for: past those, nbclient raises CellTimeoutError, a
        # TimeoutError that would end the whole submission instead of this cell.
        self.iopub_timeout = max(self.iopub_timeout, INTERRUPT_GRACE)
        return await super()._async_handle_timeout(timeout, cell)


@dataclass
class Execution:
    """How running the cells ended, as the trusted side saw it."""

    died: bool = False  # the kernel ended, or spoke in a way the grader cannot read
    over_limit: bool = False
    interrupted: set[int] = field(default_factory=set)
    seconds: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


async def run_in(notebook, kernel: Kernel, config, limit: float,
                 skip: Callable[[object], bool] = lambda cell: False,
                 phase: Callable[[object], str] = lambda cell: "cells") -> Execution:
    """Execute every code cell of ``notebook`` but those ``skip`` names, in place, on
    ``kernel``, within ``limit`` seconds in all; the kernel keeps running. Each cell's seconds
    count for its ``phase``."""
    client = _Client(km=kernel.km, config=config)
    client.nb, client.kc, client.owns_km = notebook, kernel.kc, False
    client.interrupted = set()
    client.reset_execution_trackers()
    done = Execution(interrupted=client.interrupted)

    async def every_cell() -> None:
        reply = await client.async_wait_for_reply(client.kc.kernel_info())
        notebook.metadata["language_info"] = reply["content"]["language_info"]
        for index, cell in enumerate(notebook.cells):
            if cell.cell_type != "code" or skip(cell):
                continue
            began, client.current = time.perf_counter(), index
            await client.async_execute_cell(cell, index, store_history=True)
            seconds = time.perf_counter() - began
            done.seconds[phase(cell)] = done.seconds.get(phase(cell), 0.0) + seconds

    try:
        await asyncio.wait_for(every_cell(), timeout=limit)
    except DeadKernelError:
        done.died = True
    except TimeoutError:
        done.over_limit = True
    except Exception as exc:  # noqa: BLE001 - a kernel whose messages break the protocol
        # (student code can write anything into its kernel's sockets): treated as a dead kernel
        done.died = True
        done.notes.append(f"the kernel sent what the grader cannot read "
                          f"({type(exc).__name__}: {str(exc)[:100]})")
    return done


async def run_cells(notebook, kernel: Kernel, config, limit: float,
                    cells_done: asyncio.Event | None = None,
                    skip: Callable[[object], bool] = lambda cell: False) -> Execution:
    """:func:`run_in` on a student's kernel, then stop it, and every process the student's
    code started. ``cells_done`` is set when the last cell has run, before the kernel is
    stopped."""
    try:
        done = await run_in(notebook, kernel, config, limit, skip)
    finally:
        if cells_done is not None:
            cells_done.set()
        began = time.perf_counter()
        await kernel.stop()
    done.seconds["kernel stop"] = time.perf_counter() - began
    return done
