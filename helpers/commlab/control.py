"""The control pipe between a rank and its launcher: what each says to the other, and when.

Each message is bytes whose first byte says what it is:

- launcher to rank: ``S`` + the rank and its launch (first, to a rank started before its run:
  :func:`start_message`), ``P`` + the rank's private input (next, when the launch has private
  inputs: each rank is sent its own and no other), ``G`` + a tag (every rank reached that
  barrier), ``X`` (every rank reported: tear down and exit);
- rank to launcher: ``B`` + a tag (this rank reached a barrier), ``R`` + its report (once, at the
  end).

Barriers through the launcher let ranks wait for each other without a collective, so that a
collective one rank skips can never meet another rank's next one, and without the rendezvous
store, so that code in a rank cannot tell a barrier from its own use of the store. A launcher
may also look at the ranks at each barrier (a grader counts what crossed the network there).
"""

from __future__ import annotations

import os
import struct
import threading
from collections.abc import Callable
from typing import Any

START, PRIVATE, GO, EXIT, BARRIER, REPORT = b"S", b"P", b"G", b"X", b"B", b"R"
# What a rank's report may weigh; anything longer is refused as the rank's failure.
MAX_REPORT_BYTES = 64 * 2**20
_LENGTH = struct.Struct("!i")  # how multiprocessing's connections frame a message
_RANK = struct.Struct("!i")


def start_message(rank: int, launch: bytes) -> bytes:
    """What a rank started ahead is sent to begin: its rank, and its launch (pickled)."""
    return START + _RANK.pack(rank) + launch


def read_start(message: bytes) -> tuple[int, bytes]:
    """The rank and the pickled launch in a :func:`start_message`."""
    if message[:1] != START or len(message) < 1 + _RANK.size:
        raise LauncherGone("the launcher sent no launch")
    (rank,) = _RANK.unpack_from(message, 1)
    return rank, message[1 + _RANK.size:]


class Frames:
    """The launcher's reader of one rank's control pipe: it takes what the pipe holds now and
    returns the whole messages in it, never waiting for the rest of one (a rank that announces
    a long message and sends nothing more cannot make the launcher wait)."""

    def __init__(self, connection: Any):
        self.fd = connection.fileno()
        self.buffer = bytearray()

    def read(self) -> list[bytes] | None:
        """The messages complete so far (None: the pipe closed). Raises ValueError for a
        message longer than :data:`MAX_REPORT_BYTES`."""
        try:
            data = os.read(self.fd, 1 << 20)
        except BlockingIOError:
            data = None
        except OSError:
            return None
        if data == b"":
            return None
        self.buffer += data or b""
        messages = []
        while len(self.buffer) >= _LENGTH.size:
            (length,) = _LENGTH.unpack_from(self.buffer)
            if not 0 <= length <= MAX_REPORT_BYTES:
                raise ValueError(f"a message of {length} bytes, more than the "
                                 f"{MAX_REPORT_BYTES} a report may hold")
            if len(self.buffer) < _LENGTH.size + length:
                break
            messages.append(bytes(self.buffer[_LENGTH.size:_LENGTH.size + length]))
            del self.buffer[:_LENGTH.size + length]
        return messages


class LauncherGone(RuntimeError):
    """The launcher stopped (the kernel died, or the run was stopped)."""


class RankChannel:
    """A rank's end of its control pipe (see the module docstring)."""

    def __init__(self, connection: Any):
        self.connection = connection
        self._passed: set[str] = set()
        self._changed = threading.Condition()
        self.exit_allowed = threading.Event()
        self._reader: threading.Thread | None = None
        self._first: dict[bytes, bytes] = {}  # the launch and private input the thread took

    def read_start(self) -> tuple[int, bytes]:
        """The rank and pickled launch a rank started ahead is sent (:func:`start_message`)."""
        return read_start(START + self._take(START))

    def read_private(self) -> bytes:
        """This rank's private input, the first message after any launch."""
        return self._take(PRIVATE)

    def _take(self, kind: bytes) -> bytes:
        if self._reader is None:
            message = self._receive()
            if message[:1] != kind:
                raise LauncherGone(f"the launcher sent {message[:1]!r}, not {kind!r}")
            return message[1:]
        with self._changed:
            self._changed.wait_for(lambda: kind in self._first)
            return self._first.pop(kind)

    def start(self) -> None:
        """Listen for the launcher from now on (a thread: the rank's code goes on)."""
        self._reader = threading.Thread(target=self._listen, name="commlab-control",
                                        daemon=True)
        self._reader.start()

    def barrier(self, tag: str, timeout: float | None = None) -> bool:
        """Wait until every rank reached the barrier ``tag`` (or ``timeout`` seconds passed:
        False)."""
        self.arrive(tag)
        with self._changed:
            passed = self._changed.wait_for(lambda: tag in self._passed, timeout)
            self._passed.discard(tag)
        return passed

    def arrive(self, tag: str) -> None:
        """Reach the barrier ``tag`` without waiting for the others."""
        self.connection.send_bytes(BARRIER + tag.encode())

    def report(self, data: bytes) -> None:
        self.connection.send_bytes(REPORT + data)

    def _receive(self) -> bytes:
        try:
            return self.connection.recv_bytes()
        except (EOFError, OSError):
            raise LauncherGone("the launcher stopped") from None

    def _listen(self) -> None:
        """Barriers passed and the word to exit; anything else, or the pipe closing, ends the
        rank at once: no rank outlives the cell that started it."""
        while True:
            try:
                message = self._receive()
            except LauncherGone:
                os._exit(3)
            kind, body = message[:1], message[1:]
            if kind == GO:
                with self._changed:
                    self._passed.add(body.decode())
                    self._changed.notify_all()
            elif kind == EXIT:
                self.exit_allowed.set()
                return
            elif kind in (START, PRIVATE) and kind not in self._first:
                with self._changed:
                    self._first[kind] = body
                    self._changed.notify_all()
            else:
                os._exit(3)


class Barriers:
    """The launcher's side: which ranks reached which barrier, and releasing them."""

    def __init__(self, on_barrier: Callable[[str], None] | None = None):
        self.arrived: dict[str, set[int]] = {}
        self.on_barrier = on_barrier

    def arrive(self, rank: int, tag: str) -> None:
        self.arrived.setdefault(tag, set()).add(rank)

    def release_ready(self, ranks: list[Any]) -> None:
        """Release every barrier that each rank still running has reached: a rank that already
        reported or died is not coming (if it failed, the launch is ending anyway)."""
        running = {rank.rank for rank in ranks if not rank.over}
        for tag, arrived in list(self.arrived.items()):
            if running and running <= arrived:
                del self.arrived[tag]
                if self.on_barrier is not None:
                    self.on_barrier(tag)
                for rank in ranks:
                    if rank.rank in arrived and not rank.over:
                        try:
                            rank.control.send_bytes(GO + tag.encode())
                        except OSError:
                            pass


# --- the current rank's channel ------------------------------------------------------------------

_channel: RankChannel | None = None


def install(channel: RankChannel | None) -> None:
    global _channel
    _channel = channel


# Barriers whose tag starts so mark where one stretch of a rank's work ends and the next starts
# (the function's start, each test case): a grader counts the network between them.
WINDOW = "window:"


def in_rank() -> bool:
    """Whether this process is a rank started by ``commlab.run`` (it has a control pipe)."""
    return _channel is not None


def barrier(tag: str, timeout: float | None = None) -> bool:
    """Inside a rank started by ``commlab.run``: wait until every rank reached ``tag``, or
    ``timeout`` seconds. Returns whether they all did (False at once outside such a rank)."""
    if _channel is None:
        return False
    return _channel.barrier(tag, timeout)


def arrive(tag: str) -> None:
    """Inside a rank: reach the barrier ``tag`` without waiting (nothing outside a rank)."""
    if _channel is not None:
        _channel.arrive(tag)
