"""Draw a ring all-reduce step by step, from the send/recv calls of a traced implementation.

A ring all-reduce on n ranks makes 2(n-1) steps. In each, every rank sends one chunk to its
neighbour and receives one from its other neighbour. The first n-1 steps are a reduce-scatter:
a rank adds the chunk it receives to its own copy of that chunk and passes the sum on, so the
chunk a rank sends at step s is the sum of s ranks' data. The last n-1 steps are an all-gather:
the finished sums travel on until every rank holds all of them.

:func:`draw_ring` shows one panel per step, the ranks on a circle, and on each arrow the chunk
that travelled, with its values. A chunk holding one rank's data has that rank's colour; a sum
of several is grey and hatched, with a row of coloured squares naming the ranks it adds up.
"""

from __future__ import annotations

import math
from typing import Any

import matplotlib as mpl
from matplotlib.figure import Figure
from matplotlib.patches import FancyArrowPatch, Rectangle

from . import figure_parts
from .drawing import check_result
from .errors import DrawError
from .p2p import Message, p2p_messages
from .palette import rank_color
from .picture_content import Piece, Segment, calls_made

# A chunk with more elements than this is drawn as one box naming its dtype and shape.
MAX_CHUNK_CELLS = 8

_TOP = 0.98  # title and two lines of subtitle
_PHASE_H = 0.32  # "reduce-scatter" / "all-gather" over their columns
_STEP_H = 0.28  # "step k" over each column
_BOTTOM = 0.42  # legend
_LEFT = 0.8  # rank labels
_RIGHT = 0.12
_GAP = 0.08


def draw_ring(result: Any, *, title: str | None = None) -> Figure:
    """Draw a traced ring all-reduce, one panel per step, with the chunks that travel.

    The run's function must implement the ring with ``send``/``recv``, ``isend``/``irecv`` or
    ``batch_isend_irecv``: in every step each rank sends one chunk to the same neighbour
    (rank + 1, or rank - 1 for every rank). With the 2(n-1) steps of ring all-reduce, the top row
    shows the reduce-scatter steps and the bottom row the all-gather steps, and each chunk is
    marked with the ranks whose data it sums (a rank adds what it receives to its own chunk
    before passing it on). With another number of steps, panels follow each other in order and
    chunks are coloured by their sender only.

    Args:
        result: what :func:`commlab.run` returned for the ring implementation.
        title: replaces the default title.

    Returns:
        The figure (12 x 7 inches at 100 dpi).

    Raises:
        DrawError: (a ``ValueError``) if the run has fewer than 2 ranks, made no point-to-point
            calls, or if some step is not a ring (a rank sends twice or not at all, or to a rank
            that is not its neighbour).

    Example:
        >>> result = commlab.run(my_ring_all_reduce, world_size=4)  # doctest: +SKIP
        >>> commlab.draw_ring(result)  # doctest: +SKIP
    """
    check_result(result)
    n = result.world_size
    if n < 2:
        raise DrawError("A ring needs at least 2 ranks and this run had 1: run the ring "
                        "all-reduce with world_size=4 to draw it.")
    messages = p2p_messages(result)
    if not messages:
        raise DrawError(
            f"draw_ring draws the send/recv (or isend/irecv, batch_isend_irecv) calls of a ring "
            f"all-reduce, and this run made none: it made {calls_made(result)}. For a collective, "
            "use commlab.draw(result).")
    steps, direction = ring_steps(messages, n)
    sums = contributors(steps, n, direction)
    return _render(steps, sums, n, direction, title)


def ring_steps(messages: list[Message], n: int) -> tuple[list[list[Message]], int]:
    """Messages grouped by step, checked to form a ring; and the direction (+1 or -1)."""
    count = max(m.step for m in messages)
    steps = [sorted((m for m in messages if m.step == k), key=lambda m: m.src)
             for k in range(1, count + 1)]
    direction = (messages[0].dst - messages[0].src) % n
    how = ("draw_ring draws a ring: in every step each rank sends one chunk to its neighbour "
           "(every rank to rank + 1, or every rank to rank - 1).")
    for k, step in enumerate(steps, start=1):
        senders = [m.src for m in step]
        if senders != list(range(n)):
            idle = sorted(set(range(n)) - set(senders))
            problem = (f"rank(s) {', '.join(map(str, idle))} sent nothing" if idle
                       else "a rank sent more than once")
            raise DrawError(f"In step {k}, {problem}. {how} Use commlab.draw(result, "
                            f"'send #{k}') to see step {k} on its own.")
        for m in step:
            if (m.dst - m.src) % n != direction or direction not in (1, n - 1):
                raise DrawError(f"In step {k}, rank {m.src} sent to rank {m.dst}, which is not "
                                f"its neighbour in the ring. {how} Use commlab.draw(result, "
                                f"'send #{k}') to see step {k} on its own.")
    return steps, 1 if direction == 1 else -1


def is_all_reduce(steps: list[list[Message]], n: int) -> bool:
    """Whether the steps have the shape of ring all-reduce: 2(n-1) of them."""
    return len(steps) == 2 * (n - 1)


def contributors(steps: list[list[Message]], n: int, direction: int) -> list[list[tuple]]:
    """For each step and sender, the ranks whose data the sent chunk adds up.

    In the reduce-scatter half the chunk a rank sends is its own data plus the chunk it received
    the step before; in the all-gather half every chunk is the full sum. Without the 2(n-1)
    steps of ring all-reduce, a chunk is credited to its sender only.
    """
    everyone = tuple(range(n))
    sums: list[list[tuple]] = []
    for k, step in enumerate(steps):
        row = []
        for m in step:
            if not is_all_reduce(steps, n):
                row.append((m.src,))
            elif k >= n - 1:
                row.append(everyone)
            elif k == 0:
                row.append((m.src,))
            else:
                previous = sums[k - 1][(m.src - direction) % n]
                row.append(tuple(sorted({m.src, *previous})))
        sums.append(row)
    return sums


def _render(steps: list[list[Message]], sums: list[list[tuple]], n: int, direction: int,
            title: str | None) -> Figure:
    width, height = figure_parts.FIGSIZE
    with mpl.rc_context(figure_parts.STYLE):
        fig, ax = figure_parts.new_figure()
        count = len(steps)
        phases = is_all_reduce(steps, n)
        default = f"Ring all-reduce on {n} ranks: {count} steps" if phases else (
            f"Ring of {n} ranks: {count} steps")
        figure_parts.draw_title(ax, title if title is not None else default,
                          _subtitle(steps[0][0].info.nbytes, count, n, direction, phases))

        # Rows in the order the chunks travel, so that every arrow points down one row; the
        # first rank comes again, faded, under the last, where the ring closes.
        order = list(range(n)) if direction == 1 else [(-r) % n for r in range(n)]
        top = height - _TOP - (_PHASE_H if phases else 0.0) - _STEP_H
        row_h = (top - _BOTTOM) / (n + 0.5)
        col_w = (width - _LEFT - _RIGHT) / count
        row_y = {r: top - (i + 0.5) * row_h for i, r in enumerate(order)}
        ghost_y = top - (n + 0.25) * row_h
        for r in order:
            figure_parts.rank_badge(ax, _LEFT - 0.14, row_y[r], f"rank {r}", r, 10.0, "right")
        ax.text(_LEFT - 0.14, ghost_y, f"rank {order[0]}\n(again)", ha="right", va="center",
                fontsize=8, fontweight="bold", color=figure_parts.MUTED_COLOR, linespacing=1.0,
                gid="ring-closes")
        _draw_columns(ax, count, col_w, top)
        if phases:
            _draw_phases(ax, n, col_w, top)
        # One cell width for all chunks, set by the longest value, so that they line up.
        longest = max((len(v) for step in steps for m in step
                       for v in _labels(m)), default=1)
        for k, step in enumerate(steps):
            x = _LEFT + k * col_w
            for m, ranks in zip(step, sums[k]):
                y_to = row_y[m.dst] if m.dst != order[0] else ghost_y
                _draw_message(ax, m, ranks, k, x + _GAP / 2, col_w - _GAP, row_y[m.src],
                              y_to, row_h, longest)
        extra = [("combined", "sum of several ranks (the squares under it name them)")] \
            if phases else []
        extra.append(("arrow", "chunk sent to the next rank"))
        figure_parts.draw_legend(ax, n, _BOTTOM / 2, extra)
    return fig


def _subtitle(nbytes: int, count: int, n: int, direction: int, phases: bool) -> str:
    neighbour = "rank + 1" if direction == 1 else "rank - 1"
    subtitle = (f"In each step (a column) every rank sends one chunk of {nbytes} B to "
                f"{neighbour}, {nbytes * count} B per rank in all; "
                "an arrow leads to the rank that receives it.")
    if phases:
        return subtitle + ("\nReduce-scatter: each rank adds the chunk it receives to its own "
                           "and passes the sum on. All-gather: the full sums travel on.")
    return subtitle + (f"\nThis is not the 2(n-1) = {2 * (n - 1)} steps of ring all-reduce, "
                       "so chunks are coloured by their sender only.")


def _draw_columns(ax: Any, count: int, col_w: float, top: float) -> None:
    """One shaded column per step, with "step k" over it."""
    for k in range(count):
        x = _LEFT + k * col_w
        ax.add_artist(Rectangle((x + _GAP / 2, _BOTTOM), col_w - _GAP, top + _STEP_H
                               - _BOTTOM, facecolor=figure_parts.PANEL_COLOR, edgecolor="none"))
        size = figure_parts.fit_text(f"step {k + 1}", col_w - _GAP, 10.0, 5.0)
        if size:
            ax.text(x + col_w / 2, top + _STEP_H / 2, f"step {k + 1}", ha="center",
                    va="center", fontsize=size, fontweight="bold", color=figure_parts.TEXT_COLOR,
                    gid=f"step:{k + 1}")


def _draw_phases(ax: Any, n: int, col_w: float, top: float) -> None:
    """"reduce-scatter" over the first n-1 columns, "all-gather" over the next n-1."""
    for p, name in enumerate(("reduce-scatter", "all-gather")):
        x0 = _LEFT + p * (n - 1) * col_w + _GAP / 2
        x1 = x0 + (n - 1) * col_w - _GAP
        y = top + _STEP_H + _PHASE_H / 2
        ax.add_artist(Rectangle((x0, y - _PHASE_H / 2 + 0.04), x1 - x0, _PHASE_H - 0.08,
                               facecolor="#E4E4E4", edgecolor="none"))
        size = figure_parts.fit_text(name, x1 - x0, 11.0, 5.0)
        if size:
            ax.text((x0 + x1) / 2, y, name, ha="center", va="center", fontsize=size,
                    fontweight="bold", color=figure_parts.TEXT_COLOR, gid=f"phase:{name}")


def _chunk(m: Message, ranks: tuple = ()) -> Piece:
    values = m.payload if m.payload is not None else m.received
    return Piece("chunk", m.info, values, [Segment(0, math.prod(m.info.shape), ranks)])


def _labels(m: Message) -> list[str]:
    piece = _chunk(m)
    if piece.placeholder or piece.numel > MAX_CHUNK_CELLS:
        return []
    return [v for row in figure_parts.cell_values(piece) for v in row]


def _draw_message(ax: Any, m: Message, ranks: tuple, k: int, x: float, w: float, y: float,
                  y_to: float, row_h: float, longest: int) -> None:
    """The chunk rank ``m.src`` sends in step ``k``, and an arrow to the row of its receiver."""
    piece = _chunk(m, ranks)
    numel = piece.numel
    combined = len(ranks) > 1
    face = figure_parts.COMBINED_COLOR if combined else rank_color(ranks[0])
    hatch = figure_parts.COMBINED_HATCH if combined else None
    gid = f"{k + 1}:{m.src}"
    room = w * 0.7  # the rest of the column is for the arrow
    cy = y + 0.08 * row_h  # leave room below for the squares naming the ranks summed
    if piece.placeholder or numel > MAX_CHUNK_CELLS:
        text = str(m.info)
        cw, h = min(room, max(0.5, 0.075 * len(text))), min(0.34, row_h * 0.42)
        left = x + 0.06
        ax.add_artist(Rectangle((left, cy - h / 2), cw, h, facecolor=face, hatch=hatch,
                               hatchcolor=figure_parts.HATCH_COLOR, edgecolor="#444444",
                               linewidth=0.9, gid=f"chunk:{gid}"))
        size = figure_parts.fit_text(text, cw * 0.95, 8.0, 4.0)
        if size:
            ax.text(left + cw / 2, cy, text, ha="center", va="center", fontsize=size,
                    color=figure_parts.text_color(face), gid=f"chunk-label:{gid}")
        chunk_w = cw
    else:
        labels = _labels(m)
        h = min(0.36, row_h * 0.42)
        cw = min(max(h, 0.075 * longest + 0.06), (room - 0.06) / len(labels))
        size = figure_parts.value_size(cw, h, longest, combined, 10.0)
        left = x + 0.06
        for i, text in enumerate(labels):
            ax.add_artist(Rectangle((left + i * cw, cy - h / 2), cw, h, facecolor=face,
                                   edgecolor="white", linewidth=1.0, hatch=hatch,
                                   hatchcolor=figure_parts.HATCH_COLOR, gid=f"cell:{gid}:{i}"))
            if size >= 4.0:
                ax.text(left + (i + 0.5) * cw, cy, text, ha="center", va="center_baseline",
                        fontsize=size, color=figure_parts.text_color(face),
                        fontweight="bold" if combined else "normal", gid=f"value:{gid}:{i}")
        chunk_w = cw * len(labels)
        ax.add_artist(Rectangle((left, cy - h / 2), chunk_w, h, facecolor="none",
                               edgecolor="#444444", linewidth=0.9, gid=f"chunk:{gid}"))
    if combined:
        square = min(0.09, chunk_w / len(ranks), row_h * 0.14)
        for i, r in enumerate(ranks):
            ax.add_artist(Rectangle((left + i * square, cy - h / 2 - square - 0.02), square,
                                   square, facecolor=rank_color(r), edgecolor="white",
                                   linewidth=0.5, gid=f"sum:{gid}:{r}"))
    ax.add_artist(FancyArrowPatch(
        (left + chunk_w + 0.03, cy), (x + w - 0.04, y_to + 0.08 * row_h), arrowstyle="-|>",
        mutation_scale=10, color=rank_color(m.src), linewidth=1.5, shrinkA=0, shrinkB=0,
        gid=f"arrow:{k + 1}:{m.src}->{m.dst}"))
