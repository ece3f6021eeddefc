"""Run the course's make targets as a student or maintainer would, in this checkout or a copy."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
VENV = ROOT / ".venv"


def make(*args: str, cwd: Path = ROOT, timeout: float = 600,
         path_first: Path | None = None) -> subprocess.CompletedProcess:
    """``make ARGS`` in ``cwd``; what it printed and its status. ``path_first``: a folder of
    programs found before the machine's own (stand-ins).

    An outer ``make test`` hands its command-line variables to every make below it through
    MAKEFLAGS: drop them, so that each test says exactly what it runs.
    """
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    if path_first is not None:
        env["PATH"] = f"{path_first}{os.pathsep}{env.get('PATH', '')}"
    return subprocess.run(["make", "--no-print-directory", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


def tracked_copy(dest: Path) -> Path:
    """A copy of the files git tracks (and of this checkout's uncommitted ones), as a fresh
    clone would have them, that uses this checkout's .venv (pass ``VENV=`` to make)."""
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"],
                            cwd=ROOT, capture_output=True, text=True, check=True).stdout
    for name in listed.splitlines():
        source = ROOT / name
        if source.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)
    # make reinstalls when the pins look newer than the venv's stamp, and would then install
    # the copy's commlab into this checkout's venv: the copy's pins are the venv's, say so
    stamp = (VENV / ".installed").stat().st_mtime
    for pinned in ("requirements.txt", "requirements-dev.txt", "pyproject.toml"):
        os.utime(dest / pinned, (stamp - 1, stamp - 1))
    return dest
