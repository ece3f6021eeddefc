"""Exceptions a run raises in the notebook. Each message says what happened, on which rank, and
what to try; each keeps what the ranks printed, in ``.result``."""

from __future__ import annotations

import dataclasses
from typing import Any


class CommlabError(Exception):
    """Base class of every error ``commlab`` raises on purpose."""


class RankError(CommlabError):
    """One or more ranks raised an exception (or, see :class:`RankCrashed`, died).

    Attributes:
        failures: rank -> a short description of what went wrong on that rank.
        result: a :class:`commlab.RunResult` with every rank's output up to the failure
            (``returns`` holds ``None`` for ranks that did not finish).
    """

    def __init__(self, message: str, failures: dict[int, str], result: Any):
        super().__init__(message)
        self.failures = failures
        self.result = result

    @property
    def ranks(self) -> list[int]:
        """The ranks that failed first (not those stopped because of them)."""
        return sorted(self.failures)


class RankCrashed(RankError):
    """A rank's process died without raising a Python exception (killed by a signal, or it
    called ``sys.exit``/``os._exit``).

    Attributes:
        signals: rank -> signal name (e.g. ``"SIGABRT"``) or exit code, for the ranks that died.
    """

    def __init__(self, message: str, failures: dict[int, str], result: Any,
                 signals: dict[int, str]):
        super().__init__(message, failures, result)
        self.signals = signals


class CollectiveTimeout(CommlabError, TimeoutError):
    """The ranks did not all finish within the run's ``timeout`` and were stopped.

    Attributes:
        waiting: rank -> where that rank was when it was stopped, e.g. ``"all_reduce #2"``,
            ``"your code"`` or ``"finished"``.
        result: a :class:`commlab.RunResult` with what every rank printed before it was stopped.
    """

    def __init__(self, message: str, waiting: dict[int, str], result: Any):
        super().__init__(message)
        self.waiting = waiting
        self.result = result


class ReturnNotSendable(CommlabError):
    """Raised on a rank whose function returned something that can't be pickled; the notebook
    sees it as that rank's :class:`RankError`."""


@dataclasses.dataclass
class RankFailure:
    """An exception a rank raised, as plain data: the frames worth showing a student (a rank
    sends it back in its report; :mod:`commlab.explain` words it)."""

    type: str
    message: str
    frames: list[tuple[str, int, str, str | None]]
    raised_inside: str | None = None
    in_call: str | None = None


class DrawError(ValueError):
    """A run or a call that cannot be drawn; the message says why and what to try."""
