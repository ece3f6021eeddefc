"""Wait for the ranks: until all are done, one failed or died (with a grace period for the
others to report), or they hung past the timeout.

``timeout`` counts from the moment every rank is up (process started, group joined), so that a
slow start on a busy machine is not blamed on the student's code; starting has its own bound,
:data:`STARTUP_LIMIT`. While it waits, the watcher collects each rank's output and its report.
"""

from __future__ import annotations

import time
from multiprocessing import connection
from typing import Any

from . import capture, control, worker
from .processes import RankProcess
from .status import Board

# After a rank fails, the others get time to report their own errors before they are stopped:
# until no report came for GRACE_AFTER_FAILURE seconds while every rank left is waiting in a
# call (a rank still running its own code may be about to fail the same way), and never more
# than GRACE_MAX seconds. Enough for every rank to hit the same bug, even on a loaded machine.
GRACE_AFTER_FAILURE = 0.5
GRACE_MAX = 3.0
STARTUP_LIMIT = 60.0
# While some rank is still starting, or after a failure, look at the board this often.
_POLL = 0.05


class Watch:
    """One wait over a run's ranks; :meth:`wait` says whether they hung past the timeout."""

    def __init__(self, ranks: list[RankProcess], board: Board, timeout: float,
                 barriers: control.Barriers | None = None, data_reports: bool = False):
        self.ranks, self.board, self.timeout = ranks, board, timeout
        self.barriers = barriers or control.Barriers()
        self.data_reports = data_reports
        self.frames = {rank.rank: control.Frames(rank.control) for rank in ranks}
        self.waiting: dict[Any, tuple[RankProcess, str]] = {}
        for rank in ranks:
            self.waiting[rank.control] = (rank, "control")
            self.waiting[rank.process.sentinel] = (rank, "exit")
            for stream, reader in rank.readers.items():
                self.waiting[reader] = (rank, stream)

    def wait(self) -> bool:
        """Read output and reports until every rank reported, failed, died or time ran out.

        Returns:
            True when the ranks hung: time ran out and no rank had failed.
        """
        started_by = time.monotonic() + STARTUP_LIMIT
        deadline = first_failure = last_news = None
        while not all(rank.over for rank in self.ranks):
            now = time.monotonic()
            if deadline is None and self._all_up():
                deadline = now + self.timeout
            if first_failure is not None and self._grace_over(now, first_failure, last_news):
                return False
            remaining = (deadline if deadline is not None else started_by) - now
            if remaining <= 0:
                return not any_failed(self.ranks)
            if first_failure is not None or deadline is None:
                remaining = min(remaining, _POLL)
            if self._take_news(remaining):
                last_news = time.monotonic()
            if first_failure is None and any_failed(self.ranks):
                first_failure = last_news = time.monotonic()
        return False

    def _grace_over(self, now: float, first_failure: float, last_news: float) -> bool:
        quiet = now - last_news >= GRACE_AFTER_FAILURE and not self._busy()
        return quiet or now - first_failure >= GRACE_MAX

    def _take_news(self, timeout: float) -> bool:
        """Handle what is ready within ``timeout``; whether a rank reported or exited."""
        news = False
        for ready in connection.wait(list(self.waiting), timeout=timeout):
            rank, kind = self.waiting[ready]
            if kind in capture.STREAMS:
                if not capture.read(rank.output, kind, ready):
                    del self.waiting[ready]
                continue
            if kind == "control" and self._receive(rank):
                continue  # barriers, or part of a message: the rank goes on, and its pipe
            del self.waiting[ready]
            news = True
            if kind == "exit":
                _note_exit(rank)
        self.barriers.release_ready(self.ranks)
        return news

    def _all_up(self) -> bool:
        """Whether every rank has started its function (or already reported or died)."""
        return all(rank.over or self.board.started(rank.rank) for rank in self.ranks)

    def _busy(self) -> bool:
        """Whether a rank that has not reported is still running its own code."""
        return any(not rank.over and self.board.running_own_code(rank.rank)
                   for rank in self.ranks)


    def _receive(self, rank: RankProcess) -> bool:
        """Take what a rank's control pipe holds; whether the rank goes on talking (barriers,
        or a message not yet whole) rather than its report came (or its pipe closed: it died,
        or it sent what cannot be read, which is its failure)."""
        try:
            messages = self.frames[rank.rank].read()
        except ValueError as exc:
            messages = [control.REPORT + b"?" + str(exc).encode()]
        if messages is None:
            return False
        for message in messages:
            kind, body = message[:1], message[1:]
            if kind == control.BARRIER:
                self.barriers.arrive(rank.rank, body.decode(errors="replace"))
                continue
            try:
                if kind != control.REPORT:
                    raise ValueError(f"an unknown message ({message[:20]!r}) on its control "
                                     "pipe")
                if body.startswith(b"?"):
                    raise ValueError(body[1:].decode())
                rank.report = worker.read_report(body, self.data_reports)
            except Exception as exc:  # noqa: BLE001 - what cannot be read is the rank's failure
                rank.report = worker.RankReport(failure=worker.RankFailure(
                    type(exc).__name__, f"rank {rank.rank} sent back what cannot be read: "
                    f"{str(exc)[:300]}", []))
            return False
        return True


def _note_exit(rank: RankProcess) -> None:
    rank.process.join(0)
    rank.exitcode = rank.process.exitcode
    if rank.exitcode is None:  # the sentinel fired before join could see it
        rank.exitcode = -1


def any_failed(ranks: list[RankProcess]) -> bool:
    return any(rank.failed for rank in ranks)


def all_done(ranks: list[RankProcess]) -> bool:
    return all(rank.done for rank in ranks)
