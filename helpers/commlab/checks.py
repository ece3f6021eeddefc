"""Checks for the chapters' test cells: every failure tells the student what was expected, on
which rank, with which world size, and never shows a hidden test's source.

A test cell runs the student's function through :func:`run` (which turns any rank failure or hang
into an ``AssertionError`` within :data:`GRADING_TIMEOUT`) and then states what it expects:

    result = checks.run(case, 3, args=(2,), src=2)
    checks.expect_per_rank(result, [expected] * 3, what="the tensor after my_broadcast", src=2)
    checks.expect_not_used(result, "broadcast", src=2)

Keyword arguments such as ``src=2`` are context: they are printed in failure messages.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from .errors import CommlabError
from .launch import run as _run
from .result import RunResult

# A hanging rank costs at most this much of nbgrader's 30 s cell timeout, and since the first
# failure ends the test cell, a cell never waits twice.
GRADING_TIMEOUT = 8.0


def _context(world_size: int | None, context: dict[str, Any]) -> str:
    parts = [f"world_size={world_size}"] if world_size is not None else []
    parts += [f"{key}={value!r}" for key, value in context.items()]
    return f" ({', '.join(parts)})" if parts else ""


def run(fn: Callable[..., Any], world_size: int, *, args: tuple = (),
        timeout: float = GRADING_TIMEOUT, init_process_group: bool = True,
        backend: str = "gloo", **context: Any) -> RunResult:
    """``commlab.run`` for test cells: a rank that raises, dies or hangs fails the test with the
    world size and ``context`` in the message.

    Grading runs on gloo by default, so that a class is graded the same on every machine, with
    or without GPUs.
    """
    try:
        return _run(fn, world_size, args=args, timeout=timeout,
                    init_process_group=init_process_group, backend=backend)
    except CommlabError as err:
        raise AssertionError(
            f"Your code failed when run on {world_size} ranks{_context(None, context)}.\n"
            f"{type(err).__name__}: {err}") from None


def rank_tensor(rank: int, shape: tuple[int, ...] = (4,), dtype: torch.dtype = torch.float32
                ) -> torch.Tensor:
    """A tensor whose values say which rank made it: ``rank * 100 + 0, 1, 2, ...``.

    Complex dtypes get the same numbers as imaginary parts, so a swapped real and imaginary part
    shows too.
    """
    values = torch.arange(math.prod(shape), dtype=torch.float64).reshape(shape) + 100 * rank
    if dtype.is_complex:
        return torch.complex(values, -values).to(dtype)
    return values.to(dtype)


def same(got: Any, expected: Any) -> bool:
    """Equal values of the same kind: tensors by shape, dtype and value (floats to 1e-5),
    lists, tuples and dicts item by item, anything else by ``==``."""
    if isinstance(expected, torch.Tensor):
        if not isinstance(got, torch.Tensor) or got.shape != expected.shape or (
                got.dtype != expected.dtype):
            return False
        if expected.dtype.is_floating_point or expected.dtype.is_complex:
            return bool(torch.allclose(got, expected, rtol=1e-5, atol=1e-6))
        return bool(torch.equal(got, expected))
    if isinstance(expected, (list, tuple)):
        return (isinstance(got, (list, tuple)) and len(got) == len(expected)
                and all(same(g, e) for g, e in zip(got, expected)))
    if isinstance(expected, dict):
        return (isinstance(got, dict) and got.keys() == expected.keys()
                and all(same(got[k], expected[k]) for k in expected))
    if isinstance(expected, float) and isinstance(got, (int, float)):
        return math.isclose(got, expected, rel_tol=1e-5, abs_tol=1e-6)
    return bool(got == expected)


def _show(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"{value!r} (shape {tuple(value.shape)}, {str(value.dtype).replace('torch.', '')})"
    return repr(value)


def expect(got: Any, expected: Any, *, what: str, rank: int | None = None,
           world_size: int | None = None, **context: Any) -> None:
    """Fail with a student-facing message unless ``got`` is ``expected``."""
    if not same(got, expected):
        where = f"On rank {rank}" if rank is not None else "Here"
        raise AssertionError(f"{where}{_context(world_size, context)}, {what} should be\n"
                             f"    {_show(expected)}\nbut it is\n    {_show(got)}")


def expect_per_rank(result: RunResult, expected: list[Any], *, what: str = "the returned value",
                    **context: Any) -> None:
    """Each rank returned ``expected[rank]``."""
    if len(expected) != result.world_size:
        raise ValueError(f"expected has {len(expected)} entries for {result.world_size} ranks")
    for rank, (got, want) in enumerate(zip(result.returns, expected)):
        expect(got, want, what=what, rank=rank, world_size=result.world_size, **context)


def expect_used(result: RunResult, op: str, *, ranks: list[int] | None = None,
                **context: Any) -> None:
    """Every rank in ``ranks`` (default: all) called ``dist.<op>`` at least once."""
    for rank in ranks if ranks is not None else range(result.world_size):
        if not result.calls(op, rank):
            made = sorted({c.op for c in result.trace[rank]}) or ["no torch.distributed call"]
            raise AssertionError(
                f"On rank {rank}{_context(result.world_size, context)}, your code should call "
                f"dist.{op}, but it made: {', '.join(made)}.")


def expect_not_used(result: RunResult, *ops: str, **context: Any) -> None:
    """No rank called any of ``ops``: the exercise builds them from something simpler."""
    for rank in range(result.world_size):
        for op in ops:
            if result.calls(op, rank):
                raise AssertionError(
                    f"On rank {rank}{_context(result.world_size, context)}, your code called "
                    f"dist.{op}; this exercise asks you to build it without dist.{op}.")


def expect_only(result: RunResult, allowed: set[str], **context: Any) -> None:
    """Every call each rank made is one of ``allowed`` (e.g. ``{"send", "recv"}``)."""
    for rank in range(result.world_size):
        other = sorted({c.op for c in result.trace[rank]} - set(allowed))
        if other:
            raise AssertionError(
                f"On rank {rank}{_context(result.world_size, context)}, your code called "
                f"{', '.join('dist.' + o for o in other)}; this exercise allows only "
                f"{', '.join('dist.' + a for a in sorted(allowed))}.")


def expect_bytes(result: RunResult, *, sent: list[int] | None = None,
                 received: list[int] | None = None, **context: Any) -> None:
    """Each rank sent and received exactly these many bytes (over all its traced calls): what
    the algorithm should move, no more (a ring that passes whole tensors around fails)."""
    for label, wanted, actual in (("sent", sent, result.bytes_sent()),
                                  ("received", received, result.bytes_received())):
        if wanted is None:
            continue
        for rank, (want, got) in enumerate(zip(wanted, actual)):
            if want != got:
                raise AssertionError(
                    f"On rank {rank}{_context(result.world_size, context)}, your code {label} "
                    f"{got} bytes, but the algorithm needs to move exactly {want} bytes"
                    + (f" ({got / want:.2f} times as many as needed)." if want else "."))
