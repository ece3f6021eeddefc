"""Which processes a run left behind."""

from __future__ import annotations

import psutil

# multiprocessing's forkserver and resource tracker start with the first run and live as long as
# the process that started them: they are not a run's leftovers.
_LONG_LIVED = ("forkserver", "resource_tracker")


def descendants(pid: int | None = None) -> list[psutil.Process]:
    """The live descendants of ``pid`` (default: this process), less the long-lived helpers."""
    found = []
    for proc in psutil.Process(pid).children(recursive=True):
        try:
            # a notebook's forkserver is forked from its kernel: its name says what it is
            cmdline = " ".join([proc.name(), *proc.cmdline()])
            if proc.status() == psutil.STATUS_ZOMBIE:
                continue
        except psutil.Error:
            continue
        if not any(name in cmdline for name in _LONG_LIVED):
            found.append(proc)
    return found


def forkserver_children() -> list[psutil.Process]:
    """The live processes this process's forkserver forked (ranks, and ranks started ahead),
    which :func:`descendants` leaves out with the forkserver (they share its command line)."""
    from multiprocessing import forkserver

    pid = forkserver._forkserver._forkserver_pid
    if pid is None:
        return []
    return [proc for proc in psutil.Process(pid).children()
            if proc.status() != psutil.STATUS_ZOMBIE]
