"""A rank's stdout and stderr, from the file descriptors it writes to the text the notebook shows.

In a rank (:func:`redirect`), file descriptors 1 and 2 go to pipes, so C++ prints and
``os.write(1, ...)`` are caught as well as ``print``, unbuffered, so nothing printed before a
hang or a crash is lost. In the launcher, :class:`Output` keeps what each rank's pipes bring, up
to :data:`RANK_OUTPUT_BYTES` per stream, and :func:`drain` empties the pipes when the ranks stop.
Under torchrun, :func:`captured` does the same redirection around the function, in-process.
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from typing import Any

# Output kept per rank and stream; the rest is counted, not stored.
RANK_OUTPUT_BYTES = 1 << 20
STREAMS = ("stdout", "stderr")


# --- in the rank ------------------------------------------------------------------------------

def redirect(out_pipe: Any, err_pipe: Any) -> None:
    """Send file descriptors 1 and 2 to the launcher's pipes, for the rest of the process."""
    os.dup2(out_pipe.fileno(), 1)
    os.dup2(err_pipe.fileno(), 2)
    out_pipe.close()
    err_pipe.close()
    _unbuffered_streams()


def _unbuffered_streams() -> None:
    # Every print reaches the launcher at once, even right before a hang.
    sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), encoding="utf-8",
                                  errors="backslashreplace", write_through=True)
    sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), encoding="utf-8",
                                  errors="backslashreplace", write_through=True)


def flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001 - a closed stream has nothing left to say
            pass


@contextlib.contextmanager
def captured() -> Iterator[dict[str, str]]:
    """Catch fds 1 and 2 (Python and C++ writes alike) into the dict yielded, keyed by stream."""
    texts: dict[str, str] = {}
    flush()
    saved_streams = sys.stdout, sys.stderr
    saved = {fd: os.dup(fd) for fd in (1, 2)}
    files = {fd: tempfile.TemporaryFile() for fd in (1, 2)}
    try:
        for fd, file in files.items():
            os.dup2(file.fileno(), fd)
        _unbuffered_streams()
        yield texts
    finally:
        flush()
        sys.stdout, sys.stderr = saved_streams
        for fd, name in zip((1, 2), STREAMS):
            os.dup2(saved[fd], fd)
            os.close(saved[fd])
            files[fd].seek(0)
            texts[name] = files[fd].read().decode("utf-8", errors="replace")
            files[fd].close()


# --- in the launcher --------------------------------------------------------------------------

class Output:
    """What one rank printed, each stream bounded to :data:`RANK_OUTPUT_BYTES`."""

    def __init__(self) -> None:
        self.kept = {name: bytearray() for name in STREAMS}
        self.dropped = dict.fromkeys(STREAMS, 0)

    def take(self, stream: str, data: bytes) -> None:
        room = max(RANK_OUTPUT_BYTES - len(self.kept[stream]), 0)
        self.kept[stream] += data[:room]
        self.dropped[stream] += max(len(data) - room, 0)

    def text(self, stream: str) -> str:
        text = self.kept[stream].decode("utf-8", errors="replace")
        if self.dropped[stream]:
            text += f"\n[... {self.dropped[stream]} more bytes of {stream} not kept ...]\n"
        return text


def read(output: Output, stream: str, reader: Any) -> bool:
    """Take what the pipe holds now; ``False`` once it is closed (the rank has gone)."""
    try:
        data = os.read(reader.fileno(), 65536)
    except OSError as exc:
        return exc.errno in (errno.EAGAIN, errno.EWOULDBLOCK)
    if not data:
        return False
    output.take(stream, data)
    return True


def drain(pipes: list[tuple[Output, str, Any]], until_eof: bool) -> None:
    """Collect output already written; after a kill, everything up to end of file (2 s at most)."""
    deadline = time.monotonic() + 2.0
    for output, stream, reader in pipes:
        if reader.closed:
            continue
        while time.monotonic() < deadline and reader.poll(0.05 if until_eof else 0):
            if not read(output, stream, reader):
                break
