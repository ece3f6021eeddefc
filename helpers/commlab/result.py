"""What a run brings back into the notebook, and how it shows itself there."""

from __future__ import annotations

import dataclasses
import html
from typing import Any

from .palette import rank_color
from .trace import Call


@dataclasses.dataclass
class RunResult:
    """Everything each rank produced, as lists indexed by rank.

    Attributes:
        world_size: number of ranks.
        backend: ``"gloo"`` or ``"nccl"``: the branch the run took. On ``"nccl"`` the group is
            ``cpu:gloo,cuda:nccl``, which ``dist.get_backend()`` names (see
            :mod:`commlab.backend`).
        returns: what the function returned on each rank (tensors moved to the CPU, by value).
        stdout, stderr: what each rank printed.
        trace: each rank's ``torch.distributed`` calls, as lists of :class:`commlab.trace.Call`.
        warnings: Python warnings each rank raised (kept out of the cell's stderr).
        groups: the process groups each rank made (``new_group``), apart from its calls.
        network: set by a grader only: what the machine itself counted crossing the network,
            between the barriers the ranks passed (see ``grader/sandboxed/network.py``).
    """

    world_size: int
    backend: str
    returns: list[Any]
    stdout: list[str]
    stderr: list[str]
    trace: list[list[Call]]
    warnings: list[list[str]] = dataclasses.field(default_factory=list)
    network: Any = dataclasses.field(default=None, repr=False)
    groups: list[list[Call]] = dataclasses.field(default_factory=list, repr=False)

    def calls(self, op: str | None = None, rank: int | None = None) -> list[Call]:
        """The traced calls, optionally only those of one operation and/or one rank."""
        ranks = range(self.world_size) if rank is None else [rank]
        return [c for r in ranks for c in self.trace[r] if op is None or c.op == op]

    def bytes_sent(self) -> list[int]:
        """Bytes each rank sent, summed over its traced calls."""
        return [sum(c.bytes_sent for c in calls) for calls in self.trace]

    def bytes_received(self) -> list[int]:
        """Bytes each rank received, summed over its traced calls."""
        return [sum(c.bytes_received for c in calls) for calls in self.trace]

    # --- display ----------------------------------------------------------------------------

    def _blocks(self) -> list[tuple[int, str, str, str]]:
        """(rank, stdout, stderr, returned) for every rank, in rank order."""
        blocks = []
        for rank in range(self.world_size):
            value = self.returns[rank] if rank < len(self.returns) else None
            returned = "" if value is None else repr(value)
            blocks.append((rank, self.stdout[rank], self.stderr[rank], returned))
        return blocks

    def __repr__(self) -> str:
        return format_ranks(self._blocks())

    def _repr_html_(self) -> str:
        return format_ranks_html(self._blocks())


def format_ranks(blocks: list[tuple[int, str, str, str]]) -> str:
    """Each rank's output under a ``── rank N ──`` label, in rank order."""
    lines = []
    for rank, out, err, returned in blocks:
        lines.append(f"── rank {rank} ──")
        body = out.rstrip("\n")
        if err.strip():
            body = (body + "\n" if body else "") + err.rstrip("\n")
        if returned:
            body = (body + "\n" if body else "") + f"→ returned {returned}"
        lines.append(body if body else "(no output)")
    return "\n".join(lines)


def format_ranks_html(blocks: list[tuple[int, str, str, str]]) -> str:
    cells = []
    for rank, out, err, returned in blocks:
        color = rank_color(rank)
        body = html.escape(out.rstrip("\n"))
        if err.strip():
            body += ("\n" if body else "") + (
                f'<span style="color:#B00020">{html.escape(err.rstrip(chr(10)))}</span>')
        if returned:
            body += ("\n" if body else "") + f"→ returned {html.escape(returned)}"
        if not body:
            body = '<span style="color:#777">(no output)</span>'
        cells.append(
            f'<div style="border-left:4px solid {color};margin:2px 0;padding:0 6px">'
            f'<div style="font-weight:bold;color:{color}">rank {rank}</div>'
            f'<pre style="margin:0">{body}</pre></div>')
    return "<div>" + "".join(cells) + "</div>"
