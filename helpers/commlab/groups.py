"""Process groups in a run: which ranks ran which calls together, and what each group moved.

Every traced call knows the global ranks of the group it ran in (``Call.group_ranks``), so a
run's trace says which groups were used, by which calls, and how many bytes moved in each.
:func:`bytes_by_group` counts them; :func:`draw_groups` draws the ranks as a grid (a device
mesh's layout) with one coloured frame per group and a line per group saying what it did.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from .palette import rank_color

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from .result import RunResult
    from .trace import Call

# Group frames take these colours (Paul Tol's "muted" scheme), apart from the ranks' own, so a
# frame never reads as "this rank's data".
GROUP_COLORS = ("#332288", "#117733", "#882255", "#44AA99", "#999933", "#AA4499", "#88CCEE",
                "#DDCC77")


def calls_by_group(result: RunResult) -> dict[tuple[int, ...], list[Call]]:
    """Every traced call of every rank, under the global ranks of the group it ran in, groups in
    order of first use (by rank 0's trace first, then the others')."""
    groups: dict[tuple[int, ...], list[Call]] = {}
    for calls in result.trace:
        for call in calls:
            groups.setdefault(tuple(call.group_ranks), []).append(call)
    return groups


def bytes_by_group(result: RunResult) -> dict[tuple[int, ...], list[int]]:
    """Bytes each rank sent in the calls it made on each group.

    Returns:
        ``{group ranks: [bytes sent by rank 0, by rank 1, ...]}`` with one entry per global rank
        (0 for ranks outside the group).

    Example:
        >>> bytes_by_group(result)[(0, 2)]
        [16, 0, 16, 0]
    """
    table: dict[tuple[int, ...], list[int]] = {}
    for group, calls in calls_by_group(result).items():
        sent = [0] * result.world_size
        for call in calls:
            sent[call.rank] += call.bytes_sent
        table[group] = sent
    return table


def describe_groups(result: RunResult) -> list[str]:
    """One line per group: its ranks, the calls made on it (per rank) and the bytes each
    member sent, e.g. ``ranks [0, 1]: all_reduce x2; 96 B sent per rank``."""
    lines = []
    sent = bytes_by_group(result)
    for group, calls in calls_by_group(result).items():
        members = len(group) or 1
        counts = Counter(call.op for call in calls)
        ops = ", ".join(f"{op} x{count // members}" if count // members > 1 else op
                        for op, count in counts.items())
        per_rank = sorted({sent[group][r] for r in group})
        amount = (f"{per_rank[0]} B sent per rank" if len(per_rank) == 1
                  else "B sent per rank: " + ", ".join(f"{r}: {sent[group][r]}" for r in group))
        lines.append(f"ranks {list(group)}: {ops}; {amount}")
    return lines


def _cell_of(rank: int, shape: tuple[int, int]) -> tuple[int, int]:
    return divmod(rank, shape[1])


def _frame(ax, group: tuple[int, ...], shape: tuple[int, int], color: str, number: int,
           whole: bool) -> None:
    """A rectangle round the group's ranks when they fill one, else a line through them.

    Frames along a row sit a little outside the ranks, frames along a column closer, so that a
    rank in a row group and a column group (a mesh's two dimensions) shows both frames.
    """
    from matplotlib.patches import FancyBboxPatch

    cells = [_cell_of(r, shape) for r in group]
    rows, cols = [c[0] for c in cells], [c[1] for c in cells]
    box = {(r, c) for r in range(min(rows), max(rows) + 1) for c in range(min(cols), max(cols) + 1)}
    label = {"color": color, "fontsize": 10, "fontweight": "bold",
             "bbox": {"facecolor": "white", "edgecolor": "none", "pad": 1}}
    if box != set(cells):
        ax.plot(cols, rows, "-", color=color, linewidth=6, alpha=0.5, solid_capstyle="round")
        ax.text(sum(cols) / len(cols), sum(rows) / len(rows), f"G{number}", ha="center",
                va="center", **label)
        return
    across, down = (0.12, 0.06) if len(set(rows)) == 1 and not whole else (0.2, 0.2)
    if whole:
        across = down = 0.0
    left, right = min(cols) - 0.5 + across, max(cols) + 0.5 - across
    top, bottom = min(rows) - 0.5 + down, max(rows) + 0.5 - down
    ax.add_patch(FancyBboxPatch((left, top), right - left, bottom - top,
                                boxstyle="round,pad=0,rounding_size=0.08", fill=False,
                                edgecolor=color, linewidth=2.5))
    if whole:
        ax.text(left + 0.06, top, f"G{number}", ha="left", va="center", **label)
    elif len(set(rows)) == 1:
        ax.text((left + right) / 2, top, f"G{number}", ha="center", va="center", **label)
    else:
        ax.text(left, (top + bottom) / 2, f"G{number}", ha="center", va="center", **label)


def draw_groups(result: RunResult, shape: tuple[int, int] | None = None,
                title: str | None = None) -> Figure:
    """Draw the ranks of a run as a grid and frame every group its calls ran on.

    Args:
        result: what ``commlab.run`` returned.
        shape: ``(rows, columns)`` of the grid, the device mesh's shape (rank ``r`` sits in row
            ``r // columns``); default one row.
        title: the figure's title.

    Returns:
        A figure: the ranks as boxes in their colours, one frame per group (``G1``, ``G2``, ...
        in a colour of its own; a line through the ranks when they do not fill a rectangle of
        the grid), and beside them what ran on each group and the bytes each member sent.

    Raises:
        ValueError: ``shape`` does not hold exactly the run's ranks.
    """
    from matplotlib.patches import FancyBboxPatch

    from .figure_parts import RunFigure

    shape = shape or (1, result.world_size)
    if shape[0] * shape[1] != result.world_size:
        raise ValueError(f"shape {shape} holds {shape[0] * shape[1]} ranks, but the run had "
                         f"{result.world_size}: pass shape=(rows, columns) with "
                         f"rows * columns == {result.world_size}.")
    groups = [g for g in calls_by_group(result) if g]
    lines = describe_groups(result)
    fig = RunFigure(figsize=(11, 4.2), dpi=100)
    grid = fig.add_axes((0.02, 0.06, 0.42, 0.84))
    grid.set_xlim(-0.55, shape[1] - 0.45)
    grid.set_ylim(shape[0] - 0.45, -0.55)
    grid.set_aspect("equal")
    grid.set_axis_off()
    for rank in range(result.world_size):
        row, col = _cell_of(rank, shape)
        grid.add_patch(FancyBboxPatch((col - 0.25, row - 0.18), 0.5, 0.36,
                                      boxstyle="round,pad=0.02", facecolor=rank_color(rank),
                                      edgecolor="none"))
        grid.text(col, row, f"rank {rank}", ha="center", va="center", fontsize=11,
                  color="white", fontweight="bold")
    for i, group in enumerate(groups):
        _frame(grid, group, shape, GROUP_COLORS[i % len(GROUP_COLORS)], i + 1,
               whole=len(group) == result.world_size)
    text = fig.add_axes((0.46, 0.06, 0.52, 0.84))
    text.set_axis_off()
    for i, line in enumerate(line for line in lines if not line.startswith("ranks []")):
        text.text(0, 1 - 0.13 * i, f"G{i + 1}  {line}", color=GROUP_COLORS[i % len(GROUP_COLORS)],
                  fontsize=9, va="top", family="monospace", wrap=True)
    fig.suptitle(title or "Process groups of the run: one frame per group", fontsize=12)
    return fig
