"""Stopping a server a test started in a session of its own (``start_new_session=True``): the
whole process group, asked first, killed after a grace period."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess


def stop_session(process: subprocess.Popen | None, grace: float = 30) -> None:
    """SIGTERM to ``process``'s group (a server stops its children on it), SIGKILL to the group
    if it has not ended within ``grace`` seconds; nothing if it has ended already."""
    if process is None or process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
