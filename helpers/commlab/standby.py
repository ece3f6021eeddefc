"""Ranks started before the run that needs them, kept waiting in a pool.

Forking a rank from the forkserver copies the page tables of everything the forkserver preloaded
(torch, and ``torch._dynamo`` for the optimizers), and a run's ranks are forked one after the
other before any of them can build its group: for a warm 4-rank cell that was half of its time.
So once a run is over, a background thread starts the ranks of the next one; they wait, each on
its control pipe, until a run hands them their rank and launch
(:func:`commlab.worker.standby`). The cell that started the run does not wait for them, and the
next cell usually comes seconds later; a run that finds the pool short starts the rest itself.

A waiting rank has run no line of a notebook's code (it learns the notebook's environment, path
and folder with its launch, as any rank does; a notebook's forkserver is its kernel as the import
cell left it, less the notebook's ``__main__``: :mod:`commlab.kernel_forkserver`); it takes no
CPU, and ends when its launcher ends (its control pipe closes) or :meth:`Pool.close` closes it.

This module only keeps the pool; :mod:`commlab.processes` says how a rank is started and closed.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, TypeVar

Started = TypeVar("Started")

# A run of more ranks than this starts the rest itself: a pool is for the course's usual runs.
MAX_WAITING = 8


class Pool(Generic[Started]):
    """Started ranks waiting for a run, refilled in a background thread.

    Args:
        start: starts one waiting rank (may block while the forkserver forks it, or while it
            is still importing torch).
        alive: whether a waiting rank is still there to be used.
        close: ends a waiting rank that will not be used and releases what it holds.
    """

    def __init__(self, start: Callable[[], Started], alive: Callable[[Started], bool],
                 close: Callable[[Started], None]):
        self._start, self._alive, self._close = start, alive, close
        self._lock = threading.Lock()
        self._waiting: list[Started] = []
        self._wanted = 0
        self._filler: threading.Thread | None = None

    def take(self) -> Started | None:
        """A waiting rank, or None when none is ready."""
        while True:
            with self._lock:
                if not self._waiting:
                    return None
                started = self._waiting.pop(0)
            if self._alive(started):
                return started
            self._close(started)

    def keep(self, count: int) -> None:
        """Have ``count`` ranks (at most :data:`MAX_WAITING`) wait for the next run; those
        missing are started in the background, and this returns at once."""
        with self._lock:
            self._wanted = min(count, MAX_WAITING)
            if self._filler is not None or len(self._waiting) >= self._wanted:
                return
            self._filler = threading.Thread(target=self._fill, name="commlab-standby",
                                            daemon=True)
            self._filler.start()

    def hold(self) -> None:
        """Start no more ranks until the next :meth:`keep` (a run is starting and running,
        and needs the machine); a start under way still ends in the pool."""
        with self._lock:
            self._wanted = 0

    def renew(self, stale: Callable[[Started], bool]) -> None:
        """End the waiting ranks that ``stale`` says are, and start others in their place
        (unless a run is on: :meth:`hold`)."""
        with self._lock:
            dropped = [started for started in self._waiting if stale(started)]
            self._waiting = [started for started in self._waiting if not stale(started)]
            if self._filler is None and len(self._waiting) < self._wanted:
                self._filler = threading.Thread(target=self._fill, name="commlab-standby",
                                                daemon=True)
                self._filler.start()
        for started in dropped:
            self._close(started)

    def waiting(self) -> list[Started]:
        """The ranks waiting now (a copy)."""
        with self._lock:
            return list(self._waiting)

    def settle(self, timeout: float | None = None) -> bool:
        """Wait until the background thread has stopped starting ranks (whether it did)."""
        with self._lock:
            filler = self._filler
        if filler is not None:
            filler.join(timeout)
            return not filler.is_alive()
        return True

    def close(self) -> None:
        """End every waiting rank; later runs start their ranks themselves until the next
        :meth:`keep`."""
        with self._lock:
            self._wanted = 0
        self.settle()
        with self._lock:
            waiting, self._waiting = self._waiting, []
        for started in waiting:
            self._close(started)

    def _fill(self) -> None:
        while True:
            with self._lock:  # the check and the thread's end in one hold: keep() never misses
                if len(self._waiting) >= self._wanted:
                    self._filler = None
                    return
            try:
                started = self._start()
            except BaseException:  # noqa: BLE001 - the next run starts its ranks itself
                with self._lock:
                    self._filler = None
                return
            with self._lock:
                self._waiting.append(started)
