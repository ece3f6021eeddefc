"""One scratch folder per grading run, and the removal of those that a killed run left behind.

A run that is killed (SIGKILL, out of memory, a timeout from outside) never reaches its
``finally``. Its folder is named ``commlab-grading-<pid>-<start>-...`` after the process that
made it, so that the next run can tell that process is gone and remove the folder.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

import psutil

PREFIX = "commlab-grading-"


def _start_time(pid: int) -> str:
    return f"{psutil.Process(pid).create_time():.0f}"


def make_run_folder(parent: Path | None = None) -> Path:
    """A new folder for this run's scratch (kernels' folders, the course template, logs)."""
    parent = Path(parent or tempfile.gettempdir())
    parent.mkdir(parents=True, exist_ok=True)
    me = os.getpid()
    return Path(tempfile.mkdtemp(prefix=f"{PREFIX}{me}-{_start_time(me)}-", dir=parent))


def _owner_alive(folder: Path) -> bool:
    try:
        pid, started = folder.name[len(PREFIX):].split("-")[:2]
        return _start_time(int(pid)) == started
    except (ValueError, psutil.Error):
        return False


def remove_stale(parent: Path | None = None) -> list[Path]:
    """Remove the run folders in ``parent`` whose process is gone; say so, one line each."""
    removed = []
    for folder in sorted(Path(parent or tempfile.gettempdir()).glob(f"{PREFIX}*")):
        if folder.is_dir() and not _owner_alive(folder):
            shutil.rmtree(folder, ignore_errors=True)
            print(f"removed {folder}, left by a grading run that was stopped before it could "
                  "clean up", file=sys.stderr)
            removed.append(folder)
    return removed
