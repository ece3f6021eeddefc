"""Waiting for something another process does: a server's answer, a line in its log."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def until(check: Callable[[], T | None], timeout: float, every: float,
          alive: Callable[[], bool] = lambda: True) -> T | None:
    """What ``check()`` gives once it gives something other than None, asked every ``every``
    seconds for at most ``timeout`` seconds and while ``alive()``; None if it never did."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and alive():
        found = check()
        if found is not None:
            return found
        time.sleep(every)
    return None
