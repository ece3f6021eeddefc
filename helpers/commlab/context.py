"""Pictures of context parallelism: attention over a sequence split across ranks.

Ring attention keeps each rank's queries in place and passes the key/value blocks around the
ring, one ``batch_isend_irecv`` per rank and step. :func:`kv_blocks` follows the blocks through a
run's trace (which rank's block each rank holds at each step) and :func:`draw_kv_ring` draws
them, one column per step, with the transfers between the columns.

Ulysses moves the sequence from a split by positions to a split by heads with an all-to-all.
:func:`draw_layout` shows which rank holds which (head, position) of the sequence, one panel per
stage, from tensors of position ids the ranks returned.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from .errors import DrawError
from .palette import RANK_COLORS, rank_color

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from .result import RunResult


def _batches(result: RunResult) -> list[list[Any]]:
    """Each rank's batch_isend_irecv calls, in order; the same number on every rank."""
    if not (hasattr(result, "trace") and hasattr(result, "world_size")):
        raise DrawError(f"draw_kv_ring takes the result of commlab.run(fn, world_size=...), not "
                        f"a {type(result).__name__}.")
    batches = [[c for c in calls if c.op == "batch_isend_irecv" and not c.error]
               for calls in result.trace]
    counts = sorted({len(b) for b in batches})
    if counts == [0]:
        raise DrawError("draw_kv_ring draws key/value blocks passed around a ring with "
                        "dist.batch_isend_irecv, and this run made no batch_isend_irecv call. "
                        "Draw the result of a ring attention run.")
    if len(counts) > 1:
        made = ", ".join(f"rank {r}: {len(b)}" for r, b in enumerate(batches))
        raise DrawError("In a ring every rank passes its block on at every step, but the ranks "
                        f"made different numbers of batch_isend_irecv calls ({made}).")
    return batches


def _source(call: Any) -> int:
    """The one rank a batch received from (its K and V blocks come from the same rank)."""
    sources = {peer for kind, peer, _ in call.ops or [] if kind == "irecv"}
    if len(sources) != 1:
        raise DrawError(f"batch_isend_irecv #{call.index} on rank {call.rank} received from "
                        f"{sorted(sources) or 'no rank'}; in a ring each rank receives its next "
                        "key/value block from one rank (rank - 1).")
    return sources.pop()


def kv_blocks(result: RunResult) -> list[list[int]]:
    """Whose key/value block each rank holds at each step of a traced ring.

    At step 0 every rank holds its own block; the ``s``-th ``batch_isend_irecv`` of a rank
    brings it, for step ``s + 1``, the block that the rank it received from held at step ``s``.

    Returns:
        ``blocks[step][rank]``: the rank whose block ``rank`` holds at ``step`` (one step more
        than the ranks made ``batch_isend_irecv`` calls).

    Raises:
        DrawError: the run made no ``batch_isend_irecv``, different numbers of them per rank,
            or a batch that received from more than one rank.
    """
    batches = _batches(result)
    blocks = [list(range(result.world_size))]
    for step in range(len(batches[0])):
        held = blocks[-1]
        blocks.append([held[_source(batches[rank][step])] for rank in range(result.world_size)])
    return blocks


def draw_kv_ring(result: RunResult, title: str | None = None) -> Figure:
    """Draw the key/value blocks of a ring attention run, one column per step.

    Args:
        result: what ``commlab.run`` returned for a function that passes key/value blocks
            around the ranks with one ``dist.batch_isend_irecv`` per rank and step.
        title: the figure's title.

    Returns:
        A figure with a row per rank (its queries stay there) and a column per step: each cell
        is the key/value block the rank attends to at that step, in the colour of the rank the
        block came from; an arrow from a cell to the next column is a block passed on during
        that step, labelled with the bytes of the batch.

    Raises:
        DrawError: see :func:`kv_blocks`.
    """
    from .figure_parts import RunFigure

    blocks = kv_blocks(result)
    n, steps = result.world_size, len(blocks)
    fig = RunFigure(figsize=(11, 1.9 + 0.75 * n), dpi=100)
    ax = fig.add_axes((0.13, 0.1, 0.85, 0.72))
    ax.set_xlim(-0.5, steps - 0.5)
    ax.set_ylim(n - 0.5, -0.75)
    ax.set_axis_off()
    _draw_kv_cells(ax, blocks)
    sizes = _draw_kv_transfers(ax, blocks, _batches(result))
    for rank in range(n):  # left of the first column, outside the axes
        ax.text(-0.52, rank, f"rank {rank}\n(queries {rank})", ha="right", va="center",
                fontsize=10, fontweight="bold", color=rank_color(rank))
    fig.suptitle(title or f"Ring attention on {n} ranks: {steps} steps, {steps - 1} transfers",
                 fontsize=12)
    each = f"each arrow carries {sizes.pop()} B" if len(sizes) == 1 else "arrows in bytes"
    fig.text(0.5, 0.9, "Each column is a step: a rank attends with its own queries to the "
             "key/value block in its cell, while the arrows' transfers\nbring the next step's "
             f"blocks ({each}). Colour: the rank the block came from.", ha="center", va="top",
             fontsize=9.5)
    return fig


def _draw_kv_cells(ax: Any, blocks: list[list[int]]) -> None:
    """A column per step, a cell per rank: the block it holds, in its owner's colour."""
    from matplotlib.patches import FancyBboxPatch

    from .figure_parts import text_color

    for step, held in enumerate(blocks):
        ax.text(step, -0.62, f"step {step}", ha="center", va="center", fontsize=11,
                fontweight="bold")
        for rank, owner in enumerate(held):
            face = rank_color(owner)
            ax.add_patch(FancyBboxPatch((step - 0.3, rank - 0.22), 0.6, 0.44,
                                        boxstyle="round,pad=0.02", facecolor=face,
                                        edgecolor="none"))
            ax.text(step, rank, f"K, V of rank {owner}", ha="center", va="center",
                    fontsize=10, color=text_color(face))


def _draw_kv_transfers(ax: Any, blocks: list[list[int]], batches: list[list[Any]]) -> set[int]:
    """An arrow for each block passed on during a step, from the sender's cell to the
    receiver's in the next column; labelled with its bytes unless all carry the same. Returns
    the sizes the arrows carry."""
    from matplotlib.patches import FancyArrowPatch

    sizes = {nbytes for calls in batches for call in calls for nbytes in call.sent_to.values()}
    for step, per_rank in enumerate(zip(*batches)):
        for call in per_rank:
            for peer, nbytes in call.sent_to.items():
                color = rank_color(blocks[step][call.rank])
                ax.add_patch(FancyArrowPatch((step + 0.32, call.rank), (step + 0.68, peer),
                                             arrowstyle="-|>", mutation_scale=12, color=color,
                                             linewidth=1.6, shrinkA=0, shrinkB=0))
                if len(sizes) > 1:  # else the subtitle says it once
                    ax.text(step + 0.5, (call.rank + peer) / 2 - 0.12, f"{nbytes} B",
                            ha="center", va="bottom", fontsize=8, color="#444444")
    return sizes


def draw_layout(per_rank: list[Any], heads: int, seq_len: int, titles: list[str],
                title: str | None = None) -> Figure:
    """Draw which rank holds which (head, position) of a sequence, one panel per stage.

    Args:
        per_rank: what each rank returned: a list (or tuple) of tensors, one per panel, whose
            values are position ids ``head * seq_len + position``; a rank holds the cells whose
            ids its tensor contains, in any shape or order.
        heads, seq_len: the size of the grid drawn in each panel.
        titles: one title per panel, e.g. ``["before", "after"]``.
        title: the figure's title.

    Returns:
        A figure with one grid per panel: a row per head, a column per position, each cell in
        the colour (and with the number) of the rank that holds it; a cell no rank holds is
        white.

    Raises:
        DrawError: a rank returned a different number of tensors than ``titles`` has, or an id
            outside the grid.
    """
    from .figure_parts import RunFigure

    _check_layout(per_rank, titles)
    inches = 0.9 + (0.3 * heads + 0.6) * len(titles)
    fig = RunFigure(figsize=(11, inches), dpi=100)
    top, bottom = 0.55 / inches, 0.35 / inches  # the title above, the caption below
    height = (1 - top - bottom) / len(titles)
    for panel, name in enumerate(titles):
        low = 1 - top - height * (panel + 1)
        ax = fig.add_axes((0.1, low + 0.2 * height, 0.86, 0.68 * height))
        _draw_layout_panel(ax, _holders(per_rank, panel, name, heads, seq_len), heads, seq_len,
                           name)
    fig.text(0.1, 0.1 * bottom, "columns: positions in the sequence; a cell's colour and "
             "number: the rank that holds it", fontsize=9, va="bottom")
    fig.suptitle(title or "Which rank holds which head and position", fontsize=12)
    return fig


def _check_layout(per_rank: list[Any], titles: list[str]) -> None:
    """Raise a DrawError unless every rank of 1 to 8 gave one tensor per panel."""
    world_size = len(per_rank)
    if not 1 <= world_size <= len(RANK_COLORS):
        raise DrawError(f"draw_layout draws 1 to {len(RANK_COLORS)} ranks, not {world_size}.")
    for rank, tensors in enumerate(per_rank):
        if not isinstance(tensors, (list, tuple)) or len(tensors) != len(titles):
            raise DrawError(f"Rank {rank} returned {type(tensors).__name__}; draw_layout needs "
                            f"from every rank a list of {len(titles)} tensors of position ids, "
                            "one per panel title.")


def _holders(per_rank: list[Any], panel: int, name: str, heads: int,
             seq_len: int) -> list[list[int | None]]:
    """``holder[head][position]``: the rank whose tensor of ``panel`` holds that cell's id, or
    None."""
    holder: list[list[int | None]] = [[None] * seq_len for _ in range(heads)]
    for rank, tensors in enumerate(per_rank):
        for cell in torch.as_tensor(tensors[panel]).reshape(-1).tolist():
            head, position = divmod(int(cell), seq_len)
            if not (0 <= head < heads and cell == int(cell)):
                raise DrawError(f"Rank {rank} holds the id {cell} in panel {name!r}, outside "
                                f"a grid of {heads} heads x {seq_len} positions (ids are "
                                "head * seq_len + position).")
            holder[head][position] = rank
    return holder


def _draw_layout_panel(ax: Any, holder: list[list[int | None]], heads: int, seq_len: int,
                       name: str) -> None:
    """One panel: a row per head, a column per position, each cell in its holder's colour."""
    from matplotlib.patches import Rectangle

    from .figure_parts import text_color

    ax.set_xlim(0, seq_len)
    ax.set_ylim(heads, 0)
    for head in range(heads):
        for position in range(seq_len):
            rank = holder[head][position]
            face = "white" if rank is None else rank_color(rank)
            ax.add_patch(Rectangle((position, head), 1, 1, facecolor=face,
                                   edgecolor="white", linewidth=1.5))
            if rank is not None and seq_len <= 32:
                ax.text(position + 0.5, head + 0.5, str(rank), ha="center", va="center",
                        fontsize=8, color=text_color(face))
    ax.set_yticks([h + 0.5 for h in range(heads)], [f"head {h}" for h in range(heads)])
    step = max(1, seq_len // 16)
    ax.set_xticks([p + 0.5 for p in range(0, seq_len, step)], list(range(0, seq_len, step)))
    ax.tick_params(length=0, labelsize=8)
    for side in ax.spines.values():
        side.set_visible(False)
    ax.set_title(name, fontsize=10.5, loc="left")
