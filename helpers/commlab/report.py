"""Turning what the ranks left behind into messages a student can act on."""

from __future__ import annotations

import linecache
import re
import signal
from typing import Any

# Errors a rank raises only because a peer went away: they are consequences, not causes.
_PEER_LOSS = ("Connection closed by peer", "Connection reset by peer", "Broken pipe",
              "connection reset", "Connection refused", "failed to recv", "failed to send")


def rank_list(ranks: list[int]) -> str:
    """``[0, 1, 2, 5]`` -> ``"ranks 0-2, 5"``; ``[3]`` -> ``"rank 3"``."""
    ranks = sorted(ranks)
    if len(ranks) == 1:
        return f"rank {ranks[0]}"
    parts, start = [], None
    for i, r in enumerate(ranks):
        if start is None:
            start = r
        if i + 1 == len(ranks) or ranks[i + 1] != r + 1:
            parts.append(f"{start}" if start == r else
                         f"{start}, {r}" if r == start + 1 else f"{start}-{r}")
            start = None
    return "ranks " + ", ".join(parts)


def is_peer_loss(message: str) -> bool:
    return any(p.lower() in message.lower() for p in _PEER_LOSS)


def _where(filename: str) -> str:
    """``notebook cell`` for a notebook cell, else ``File "..."``.

    IPython's own tracebacks say ``Cell In[4]``, but that number changes with every execution,
    and a message that names it would differ between two runs of the same notebook.
    """
    try:
        shell = get_ipython()  # type: ignore[name-defined]  # noqa: F821
        if shell.compile.format_code_name(filename):
            return "notebook cell"
    except Exception:  # noqa: BLE001 - not in IPython
        pass
    return f'File "{filename}"'


def format_traceback(info: dict[str, Any]) -> str:
    """The failing rank's own frames, with source lines looked up here, where the notebook's
    cells are known."""
    lines = []
    for filename, lineno, name, line in info["frames"]:
        lines.append(f"  {_where(filename)}, line {lineno}, in {name}")
        source = (linecache.getline(filename, lineno) or line or "").strip()
        if source:
            lines.append(f"    {source}")
    if info.get("raised_inside"):
        lines.append(f"  (raised inside {info['raised_inside']})")
    lines.append(f"{info['type']}: {shorten(info['message'])}")
    return "\n".join(lines)


def shorten(message: str) -> str:
    """Drop the tensor-options dump that TORCH_DISTRIBUTED_DEBUG=DETAIL repeats in every
    fingerprint; the shapes and dtypes that differ are still named."""
    message = re.sub(r", TensorDeviceTypes=TensorOptions\(.*?memory_format=\([^)]*\)\)", "",
                     message)
    return message.replace(".Collectives differ", ".\nCollectives differ")


def signal_name(exitcode: int | None) -> str:
    if exitcode is None:
        return "an unknown cause"
    if exitcode < 0:
        try:
            return signal.Signals(-exitcode).name
        except ValueError:
            return f"signal {-exitcode}"
    return f"exit code {exitcode}"


def crash_cause(exitcode: int | None, stderr: str, where: str | None) -> str:
    """A likely cause for a rank that died without a Python exception, and what to try."""
    text = stderr.lower()
    if "enforce" in text or "mismatch" in text or "invalid tensor size" in text or (
            exitcode == -signal.SIGABRT and where):
        return ("likely cause: the ranks passed tensors of different shapes or dtypes (or called "
                "different collectives) in the same call, and gloo stops the process when the "
                "sizes disagree. Print each rank's tensor.shape and dtype before the call, or run "
                "with debug=True to get an error that names them.")
    if exitcode == -signal.SIGKILL:
        return ("likely cause: the process was killed from outside, often by the out-of-memory "
                "killer. Try smaller tensors or fewer ranks.")
    if exitcode == -signal.SIGSEGV:
        return ("likely cause: a crash inside a library, for example a tensor changed or freed "
                "while an async_op=True call still used it. Call .wait() on the work handle "
                "before touching the tensor.")
    if exitcode is not None and exitcode >= 0:
        return ("likely cause: the function ended the process (os._exit or a library calling "
                "exit) instead of returning. Return from the function instead.")
    return "Run again with debug=True for more detail."


def last_stderr_lines(stderr: str, count: int = 3) -> str:
    lines = [ln for ln in stderr.strip().splitlines() if ln.strip()]
    return "\n".join("    " + ln for ln in lines[-count:])


def describe_position(phase: int, op: str | None, index: int) -> str:
    """Where a rank was, from its status entry, in words."""
    from .worker import FAILED, FINISHED, IN_CALL, RUNNING

    if phase == IN_CALL and op:
        return f"in {op} #{index}"
    if phase == RUNNING:
        after = f" (its last call: {op} #{index})" if op and index else ""
        return f"running its own code, outside any collective{after}"
    if phase == FINISHED:
        return "finished"
    if phase == FAILED:
        return "failed"
    return "starting up"
