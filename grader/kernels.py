"""Warm kernels: a Jupyter kernel started in its own scratch folder (sandboxed when possible),
with torch and commlab imported and commlab's rank launcher started, ready before the
submission that will use it is."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import psutil
from jupyter_client.manager import AsyncKernelManager

# Runs before the student's first cell, without a history entry or an output, and binds no
# name in the student's namespace: a notebook that forgets ``import torch`` still fails.
WARM_UP = "__import__('commlab').run(lambda: None, world_size=2)"
# A Unix socket's path holds at most 107 bytes; the kernel's sockets are <folder>/s-<port>.
SOCKET_PATH_LIMIT = 100
START_LIMIT = 120  # seconds; a busy machine can take tens of seconds to import torch


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
    seconds_to_start: float = 0.0
    warm_up_error: str = ""
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


def _matplotlib_cache(folder: Path) -> Path:
    """A matplotlib folder of the kernel's own, with the font list already built: where the
    sandbox hides the home folder, matplotlib would build it again and say so on stderr, which
    zeroes the test cell that first draws."""
    import matplotlib

    mine = folder / ".matplotlib"
    mine.mkdir()
    for fonts in Path(matplotlib.get_cachedir()).glob("fontlist-*.json"):
        shutil.copy(fonts, mine)
    return mine


async def start(folder: Path, wrap: Callable[[Path], Callable] | None,
                env: dict[str, str]) -> Kernel:
    """Start a kernel whose sockets (IPC transport) and working folder are ``folder``."""
    began = time.perf_counter()
    folder.mkdir(parents=True)
    env = {**env, "MPLCONFIGDIR": str(_matplotlib_cache(folder))}
    sockets = folder / "s"
    if len(str(sockets)) > SOCKET_PATH_LIMIT:
        raise RuntimeError(f"the kernel's sockets would be {sockets}-N, longer than a socket "
                           f"path may be; set TMPDIR to a shorter folder (e.g. /tmp)")
    km = WrappedKernelManager(kernel_name="python3", transport="ipc", ip=str(sockets),
                              connection_file=str(folder / "kernel.json"))
    km.wrap = wrap(folder) if wrap else None
    # what the kernel and the ranks print outside cells goes to a log (kept with --keep)
    with open(folder / "kernel.log", "wb") as log:
        await km.start_kernel(cwd=str(folder), env=env, stdout=log, stderr=subprocess.STDOUT,
                              extra_arguments=["--HistoryManager.hist_file=:memory:"])
    kc = km.client()
    kc.start_channels()
    kernel = Kernel(km, kc, folder)
    try:
        await kc.wait_for_ready(timeout=START_LIMIT)
        reply = await kc.execute_interactive(WARM_UP, silent=True, store_history=False,
                                             timeout=START_LIMIT, output_hook=lambda _: None)
    except BaseException:
        await kernel.stop()
        raise
    if reply["content"]["status"] != "ok":
        kernel.warm_up_error = f"{reply['content'].get('ename')}: {reply['content'].get('evalue')}"
    kernel.seconds_to_start = time.perf_counter() - began
    return kernel


async def start_in_background(folder: Path, wrap, env) -> asyncio.Task:
    return asyncio.ensure_future(start(folder, wrap, env))
