"""Warm kernels: a Jupyter kernel started in its own scratch folder (sandboxed when possible),
with torch and commlab imported and commlab's rank launcher started, ready before the
submission that will use it is."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import zmq
import zmq.asyncio
from jupyter_client.manager import AsyncKernelManager

# Runs before the student's first cell, without a history entry or an output, and binds no
# name in the student's namespace: a notebook that forgets ``import torch`` still fails. A real
# rank function on two ranks: the forkserver starts and a group forms, as the first cell's will.
WARM_UP = "__import__('commlab').run(lambda rank, world_size: None, world_size=2)"
LOG_LINES = 8  # of a kernel's log, in the message when it cannot start


class KernelStartError(RuntimeError):
    """A kernel could not start or warm up; the message says which, why, and what to try."""
# A Unix socket's path holds at most 107 bytes; the kernel's sockets are <folder>/s-<port>.
SOCKET_PATH_LIMIT = 100
START_LIMIT = 120  # seconds; a busy machine can take tens of seconds to import torch
# A message from a kernel larger than this disconnects it: a student's kernel can send anything,
# and the grader must not hold gigabytes for it (nbgrader keeps far less of any output).
MAX_MESSAGE_BYTES = 64 * 2**20


class WrappedKernelManager(AsyncKernelManager):
    """A kernel manager whose kernel command goes through ``wrap`` (the sandbox)."""

    wrap: Callable[[list[str]], list[str]] | None = None

    def format_kernel_cmd(self, extra_arguments: list[str] | None = None) -> list[str]:
        command = super().format_kernel_cmd(extra_arguments)
        return self.wrap(command) if self.wrap else command


@dataclass
class Kernel:
    km: WrappedKernelManager
    kc: object
    folder: Path
    context: zmq.asyncio.Context | None = None
    seconds_to_start: float = 0.0
    notes: list[str] = field(default_factory=list)

    async def stop(self) -> None:
        """Kill the kernel and every process the student's code started, and wait until they
        are gone. In the sandbox they all descend from the kernel (the namespace's first
        process adopts orphans); without it, a process that left the session escapes."""
        self.kc.stop_channels()
        if not self.km.has_kernel:
            return
        process = self.km.provisioner.process if self.km.provisioner else None
        family = []
        if process is not None:
            try:
                family = psutil.Process(process.pid).children(recursive=True)
                os.killpg(process.pid, signal.SIGKILL)  # the kernel has a session of its own
            except (psutil.Error, ProcessLookupError, PermissionError):
                pass
        for member in family:
            try:
                member.kill()
            except psutil.Error:
                pass
        await self.km.shutdown_kernel(now=True)
        await asyncio.to_thread(psutil.wait_procs, family, timeout=30)
        if self.context is not None:
            self.context.destroy(linger=0)


def matplotlib_cache() -> Path:
    """The folder of matplotlib's font list, found as ``matplotlib.get_cachedir()`` finds it but
    without importing matplotlib (0.4 s of CPU in every `make grade`, whose process draws
    nothing). Where that folder cannot be used, matplotlib takes a new temporary one instead,
    which holds no font list either."""
    if os.environ.get("MPLCONFIGDIR"):
        return Path(os.environ["MPLCONFIGDIR"])
    if sys.platform.startswith(("linux", "freebsd")):
        return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache", "matplotlib")
    return Path.home() / ".matplotlib"  # macOS (grading on Windows is through WSL2: Linux)


def copy_font_list(folder: Path) -> Path:
    """Put matplotlib's font list in ``folder`` (a sandboxed process's MPLCONFIGDIR): where the
    sandbox hides the home folder, matplotlib would build it again, for seconds, and say so on
    stderr, which zeroes the test cell that first draws."""
    folder.mkdir(exist_ok=True)
    for fonts in matplotlib_cache().glob("fontlist-*.json"):
        shutil.copy(fonts, folder)
    return folder


async def start(folder: Path, wrap: Callable[[Path], Callable] | None,
                env: dict[str, str], warm_up: str = WARM_UP,
                what: str = "a student's kernel",
                before_warm_up: Callable[[], object] = lambda: None) -> Kernel:
    """Start a kernel whose sockets (IPC transport) and working folder are ``folder``, and run
    ``warm_up`` in it; raise :class:`KernelStartError` if either fails."""
    began = time.perf_counter()
    folder.mkdir(parents=True)
    env = {**env, "MPLCONFIGDIR": str(copy_font_list(folder / ".matplotlib"))}
    sockets = folder / "s"
    if len(str(sockets)) > SOCKET_PATH_LIMIT:
        raise KernelStartError(f"Grading stopped: the kernels' sockets would be {sockets}-N, "
                               "longer than a socket path may be. Set TMPDIR to a shorter "
                               "folder (e.g. TMPDIR=/tmp) and grade again.")
    context = zmq.asyncio.Context()
    context.setsockopt(zmq.MAXMSGSIZE, MAX_MESSAGE_BYTES)
    km = WrappedKernelManager(kernel_name="python3", transport="ipc", ip=str(sockets),
                              connection_file=str(folder / "kernel.json"), context=context)
    km.wrap = wrap(folder) if wrap else None
    # what the kernel and the ranks print outside cells goes to a log (kept with --keep)
    with open(folder / "kernel.log", "wb") as log:
        await km.start_kernel(cwd=str(folder), env=env, stdout=log, stderr=subprocess.STDOUT,
                              extra_arguments=["--HistoryManager.hist_file=:memory:"])
    kc = km.client()
    kc.start_channels()
    kernel = Kernel(km, kc, folder, context=context)
    try:
        await kc.wait_for_ready(timeout=START_LIMIT)
        before_warm_up()
        reply = await kc.execute_interactive(warm_up, silent=True, store_history=False,
                                             timeout=START_LIMIT, output_hook=lambda _: None)
    except Exception as exc:  # noqa: BLE001 - said in words below
        await kernel.stop()
        raise KernelStartError(_why(folder, what, f"it did not start ({exc})")) from None
    except BaseException:
        await kernel.stop()
        raise
    if reply["content"]["status"] != "ok":
        await kernel.stop()
        content = reply["content"]
        raise KernelStartError(_why(
            folder, what, "it started, but could not run a function on two ranks "
            f"({content.get('ename')}: {content.get('evalue')})"))
    kernel.seconds_to_start = time.perf_counter() - began
    return kernel


def _why(folder: Path, what: str, reason: str) -> str:
    """One plain sentence on a kernel that could not start, the end of its log, what to try."""
    log = folder / "kernel.log"
    lines = log.read_text(errors="replace").strip().splitlines()[-LOG_LINES:] \
        if log.exists() else []
    tail = "\n".join(f"    {line}" for line in lines) or "    (it wrote nothing)"
    return (f"Grading stopped: {what} ({folder.name}) could not be used: {reason}. The last "
            f"lines of its log:\n{tail}\nWhat to try: run `{sys.executable} -m ipykernel_launcher"
            " --help` to check that this Python can start a kernel; if the log shows a mount, "
            "unshare or `not found` error, the sandbox is at fault here: grade with "
            "--no-sandbox inside the instructor image started with --network none "
            "(docs/security.md, \"Grading without namespaces\"). What was graded before this "
            "is kept.")

