"""Waiting for something another process does: a server's answer, a line in its log."""

from __future__ import annotations

import http.client
import time
import urllib.error
import urllib.request
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


def answers(url: str) -> int | None:
    """The HTTP status ``url`` answers with (an error status too), or None while nothing
    answers there."""
    try:
        with urllib.request.urlopen(url, timeout=10) as answer:
            return answer.status
    except urllib.error.HTTPError as error:
        return error.code
    except (urllib.error.URLError, ConnectionError, http.client.HTTPException, TimeoutError):
        return None


def until_answering(url: str, timeout: float, alive: Callable[[], bool] = lambda: True
                    ) -> int | None:
    """The status of ``url``'s first answer, asked while ``alive()``; None if none came.

    Jupyter's server prints its token URL before it listens: it checks that the port is free,
    prints the URL, and binds the port once its event loop runs, so a request sent as soon as
    the URL is printed can be refused."""
    return until(lambda: answers(url), timeout, 0.2, alive)
