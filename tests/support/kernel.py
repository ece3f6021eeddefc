"""A real Jupyter kernel that runs cells as a student's notebook would."""

from __future__ import annotations

import queue
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil
from jupyter_client.manager import KernelManager

from support.processes import descendants


@dataclass
class CellRun:
    """What one executed cell produced, as the notebook would show it."""

    status: str = ""
    stdout: str = ""
    stderr: str = ""
    text: list[str] = field(default_factory=list)  # text/plain of results and displays
    html: list[str] = field(default_factory=list)
    images: list[str] = field(default_factory=list)  # base64 PNGs
    error: dict | None = None
    seconds: float = 0.0

    @property
    def shown(self) -> str:
        return self.stdout + "".join(self.text)


class Kernel:
    """A real ipykernel, driven over the Jupyter messaging protocol."""

    def __init__(self, env: dict[str, str] | None = None, cwd: str | None = None):
        """``env``: the kernel's environment, when not this process's; ``cwd``: its working
        directory (a notebook's folder, as Lab gives it), when not this process's.

        Its channels are Unix sockets in a folder of its own (the grader's kernels' transport):
        over TCP, Jupyter picks five free ports and the kernel binds them a moment later, and
        under this suite's load a rank's connection can take one in between (seen once: the
        kernel failed with "Address already in use" and hung)."""
        kwargs = {key: value for key, value in (("env", env), ("cwd", cwd)) if value is not None}
        self.sockets = Path(tempfile.mkdtemp(prefix="kernel-"))
        self.manager = KernelManager(kernel_name="python3", transport="ipc",
                                     ip=str(self.sockets / "s"))
        self.manager.start_kernel(**kwargs)
        self.client = self.manager.client()
        self.client.start_channels()
        try:
            self.client.wait_for_ready(timeout=60)
        except RuntimeError:
            self.shutdown()
            raise

    @property
    def pid(self) -> int:
        return self.manager.provisioner.process.pid

    def execute(self, code: str, timeout: float = 60, interrupt_after: float | None = None
                ) -> CellRun:
        run = CellRun()
        start = time.monotonic()
        msg_id = self.client.execute(code)
        interrupted = False
        while True:
            if interrupt_after is not None and not interrupted and (
                    time.monotonic() - start > interrupt_after):
                self.manager.interrupt_kernel()
                interrupted = True
            if time.monotonic() - start > timeout:
                raise TimeoutError(f"cell did not finish within {timeout} s:\n{code}")
            try:
                msg = self.client.get_iopub_msg(timeout=0.1)
            except queue.Empty:
                continue
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            kind, content = msg["msg_type"], msg["content"]
            if kind == "stream":
                if content["name"] == "stdout":
                    run.stdout += content["text"]
                else:
                    run.stderr += content["text"]
            elif kind in ("execute_result", "display_data"):
                run.text.append(content["data"].get("text/plain", ""))
                run.html.append(content["data"].get("text/html", ""))
                if "image/png" in content["data"]:
                    run.images.append(content["data"]["image/png"])
            elif kind == "error":
                run.error = content
            elif kind == "status" and content["execution_state"] == "idle":
                break
        run.status = self._reply_to(msg_id)["content"]["status"]
        run.seconds = time.monotonic() - start
        return run

    def _reply_to(self, msg_id: str) -> dict:
        """The shell reply to ``msg_id``. Others may come first: on a slow start,
        ``start_new_kernel`` asks for kernel_info more than once and leaves the extra replies."""
        deadline = time.monotonic() + 10
        while True:
            reply = self.client.get_shell_msg(timeout=max(deadline - time.monotonic(), 0.01))
            if reply["parent_header"].get("msg_id") == msg_id:
                return reply

    def children(self) -> list[psutil.Process]:
        """The kernel's descendants, less multiprocessing's long-lived helpers."""
        return descendants(self.pid)

    def shutdown(self) -> None:
        self.client.stop_channels()
        self.manager.shutdown_kernel()
        shutil.rmtree(self.sockets, ignore_errors=True)


def wait_for_no_children(kernel: Kernel, seconds: float = 5.0) -> list[psutil.Process]:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        left = kernel.children()
        if not left:
            return []
        time.sleep(0.05)
    return left
