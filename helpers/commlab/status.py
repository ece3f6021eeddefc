"""The status board: where each rank is, shared live between the ranks and the launcher.

The board is an array of three ints per rank in shared memory: the rank's phase, the index of
the call it is in (or last made) in :data:`commlab.trace.OPS`, and that call's per-op number.
A rank writes its own entry (:class:`RankBoard`, through the worker and the trace's recorder);
the launcher reads every entry without asking the ranks, so it can tell "rank 2 is in
all_reduce #2" even of a rank that is stuck in C++ or about to be killed.
"""

from __future__ import annotations

from typing import Any

from .trace import OPS

STARTING, RUNNING, IN_CALL, FINISHED, FAILED = 0, 1, 2, 3, 4
# One board entry: (phase, index into OPS, per-op call number).
Position = tuple[int, int, int]
_WIDTH = 3


class Board:
    """The launcher's view of every rank's entry."""

    def __init__(self, ctx: Any, world_size: int):
        self.world_size = world_size
        self.array = ctx.RawArray("i", _WIDTH * world_size)

    def for_rank(self, rank: int) -> RankBoard:
        """The entry one rank writes (sent to the rank when its process starts)."""
        return RankBoard(self.array, rank)

    def phase(self, rank: int) -> int:
        return self.array[_WIDTH * rank]

    def started(self, rank: int) -> bool:
        """Whether the rank has joined its group and started its function."""
        return self.phase(rank) != STARTING

    def running_own_code(self, rank: int) -> bool:
        """Whether the rank is starting or running its own code (not waiting in a call)."""
        return self.phase(rank) in (STARTING, RUNNING)

    def snapshot(self) -> list[Position]:
        """Every rank's entry now (taken before a kill: a killed rank can't say where it was)."""
        return [tuple(self.array[_WIDTH * r:_WIDTH * r + _WIDTH])
                for r in range(self.world_size)]


class RankBoard:
    """One rank's own entry; the trace's recorder publishes its calls through it."""

    def __init__(self, array: Any, rank: int):
        self.array, self.base = array, _WIDTH * rank

    def set_phase(self, phase: int) -> None:
        self.array[self.base] = phase

    def entering(self, op: str, index: int) -> None:
        self._publish(IN_CALL, op, index)

    def leaving(self, op: str, index: int) -> None:
        self._publish(RUNNING, op, index)

    def _publish(self, phase: int, op: str, index: int) -> None:
        # The phase goes last, so a reader never sees IN_CALL with the previous call's name.
        self.array[self.base + 1] = OPS.index(op)
        self.array[self.base + 2] = index
        self.array[self.base] = phase


def describe(position: Position) -> str:
    """Where a rank was, from its board entry, in words: ``"in all_reduce #2"``."""
    phase, op_index, index = position
    op = OPS[op_index] if 0 <= op_index < len(OPS) else None
    if phase == IN_CALL and op:
        return f"in {op} #{index}"
    if phase == RUNNING:
        after = f" (its last call: {op} #{index})" if op and index else ""
        return f"running its own code, outside any collective{after}"
    if phase == FINISHED:
        return "finished"
    if phase == FAILED:
        return "failed"
    return "starting up"
