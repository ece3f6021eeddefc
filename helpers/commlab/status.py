"""The status board: where each rank is, shared live between the ranks and the launcher.

The board holds three ints per rank in shared memory: the rank's phase, the index of the call it
is in (or last made) in :data:`commlab.trace.OPS`, and that call's per-op number.
A rank writes its own entry (:class:`RankBoard`, through the worker and the trace's recorder);
the launcher reads every entry without asking the ranks, so it can tell "rank 2 is in
all_reduce #2" even of a rank that is stuck in C++ or about to be killed.
"""

from __future__ import annotations

import mmap
import struct
from typing import Any

from .trace import OPS

STARTING, RUNNING, IN_CALL, FINISHED, FAILED = 0, 1, 2, 3, 4
# One board entry: (phase, index into OPS, per-op call number).
Position = tuple[int, int, int]
_ENTRY = struct.Struct("iii")


class Board:
    """The launcher's view of every rank's entry.

    Each entry is a shared page of its own when the ranks are forked from the launcher (a
    grader's rank host): a rank then keeps its own page and unmaps the others
    (:meth:`RankBoard.keep_only_own`), so that no rank can read or write another's. A rank
    started from the forkserver brings its own entry (``slots``, see :func:`new_slot`), made
    before it knew its rank; spawned ranks share one array, sent to each with its process.
    """

    def __init__(self, ctx: Any, world_size: int, slots: list[Any] | None = None):
        self.world_size = world_size
        if slots is not None:
            self.pages = []
            self.entries = [(slot, 0) for slot in slots]
        elif ctx.get_start_method() == "fork":
            self.pages: list[Any] = [mmap.mmap(-1, mmap.PAGESIZE) for _ in range(world_size)]
            self.entries = [(page, 0) for page in self.pages]
        else:
            self.pages = []
            array = ctx.RawArray("i", 3 * world_size)
            self.entries = [(array, _ENTRY.size * r) for r in range(world_size)]

    def for_rank(self, rank: int) -> RankBoard:
        """The entry one rank writes (sent to the rank when its process starts)."""
        buffer, offset = self.entries[rank]
        return RankBoard(buffer, offset, self, rank)

    def position(self, rank: int) -> Position:
        buffer, offset = self.entries[rank]
        return _ENTRY.unpack_from(buffer, offset)

    def phase(self, rank: int) -> int:
        return self.position(rank)[0]

    def started(self, rank: int) -> bool:
        """Whether the rank has joined its group and started its function."""
        return self.phase(rank) != STARTING

    def running_own_code(self, rank: int) -> bool:
        """Whether the rank is starting or running its own code (not waiting in a call)."""
        return self.phase(rank) in (STARTING, RUNNING)

    def snapshot(self) -> list[Position]:
        """Every rank's entry now (taken before a kill: a killed rank can't say where it was)."""
        return [self.position(r) for r in range(self.world_size)]


def new_slot(ctx: Any) -> Any:
    """One rank's entry, in memory shared with the process about to be started with it."""
    return ctx.RawArray("i", 3)


class RankBoard:
    """One rank's own entry; the trace's recorder publishes its calls through it."""

    def __init__(self, buffer: Any, offset: int, board: Board, rank: int):
        self.buffer, self.offset, self.board, self.rank = buffer, offset, board, rank

    def set_phase(self, phase: int) -> None:
        _, op, index = _ENTRY.unpack_from(self.buffer, self.offset)
        _ENTRY.pack_into(self.buffer, self.offset, phase, op, index)

    def entering(self, op: str, index: int) -> None:
        self._publish(IN_CALL, op, index)

    def leaving(self, op: str, index: int) -> None:
        self._publish(RUNNING, op, index)

    def _publish(self, phase: int, op: str, index: int) -> None:
        # one write of the whole entry: a reader never sees IN_CALL with the previous call
        _ENTRY.pack_into(self.buffer, self.offset, phase, OPS.index(op), index)

    def __getstate__(self):  # sent to a forkserver's rank: its entry, not the whole board
        return {**self.__dict__, "board": None}

    def keep_only_own(self) -> None:
        """In a rank forked from the launcher: unmap every other rank's page."""
        for rank, page in enumerate(self.board.pages):
            if rank != self.rank:
                page.close()
        self.board = None


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
