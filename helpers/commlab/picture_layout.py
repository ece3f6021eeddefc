"""Lay out and draw a :class:`~commlab.picture_content.Picture` with matplotlib.

:func:`render` turns a picture into a :class:`matplotlib.figure.Figure` of a fixed size, with
one column per rank and the rows "before" and "after": panels, cells, arrows. What every picture
shares (the figure, fonts, colours, title, badges, legend) is in :mod:`commlab.figure_parts`.
Everything is laid out in inches, so the same picture always gives the same image.

Over 400 lines: laying out and drawing panels, pieces and arrows is one job.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import matplotlib as mpl
from matplotlib.figure import Figure
from matplotlib.patches import FancyArrowPatch, Rectangle

from .figure_parts import (
    COMBINED_COLOR,
    COMBINED_HATCH,
    FIGSIZE,
    HATCH_COLOR,
    MUTED_COLOR,
    PANEL_COLOR,
    STYLE,
    TEXT_COLOR,
    cell_values,
    draw_legend,
    draw_title,
    fit_text,
    new_figure,
    rank_badge,
    text_color,
    value_size,
)
from .palette import rank_color
from .picture_content import Panel, Picture, Piece, Segment
from .trace import VALUE_LIMIT

# --- geometry and rendering ---------------------------------------------------------------------

# Vertical budget of a 7-inch figure, from the top.
_TITLE_H = 0.70
_HEAD_H = 0.34
_ROW_H = 2.25
_BAND_H = 1.02
_LEFT = 0.62
_RIGHT = 0.18
_PANEL_GAP = 0.12
_PANEL_HEADER_H = 0.24
_PANEL_NOTE_H = 0.26
_MAX_CELL = 0.34
_PIECE_GAP = 0.07
_PLACEHOLDER_GRID = (2, 5)


@dataclasses.dataclass
class PieceBox:
    """Where a piece was drawn (inches from the bottom left) and its cell size."""

    x: float
    y: float  # bottom
    w: float
    h: float
    cw: float
    ch: float

    def segment_span(self, piece: Piece, segment: Segment) -> tuple[float, float]:
        """The horizontal extent of a segment, where arrows leave or arrive."""
        if piece.placeholder or segment.stop <= segment.start:
            return (self.x, self.x + self.w)
        cols = piece.grid[1]
        first_row, last_row = segment.start // cols, (segment.stop - 1) // cols
        if first_row != last_row:
            return (self.x, self.x + self.w)
        return (self.x + (segment.start % cols) * self.cw,
                self.x + ((segment.stop - 1) % cols + 1) * self.cw)


def arrangement(panel: Panel, layout: str) -> str:
    """``"rows"``, ``"columns"`` or ``"either"`` (single elements) for a panel's pieces.

    See :func:`draw` for what ``"auto"`` chooses.
    """
    if layout != "auto":
        return layout
    if len(panel.pieces) < 2 or panel.pieces[0].placeholder:
        return "rows"
    rows, cols = panel.pieces[0].grid
    if rows * cols == 1:
        return "either"
    return "columns" if rows > cols else "rows"


def place_pieces(pieces: list[Piece], how: str, x: float, y: float, w: float,
                 h: float, labelled: bool, valign: str = "center",
                 longest: int = 1) -> list[PieceBox]:
    """Lay pieces out stacked (``"rows"``) or side by side in the box.

    ``valign`` (``"top"``, ``"center"`` or ``"bottom"``) puts them against the edge that faces
    the arrows, so that the arrows start and end close to the data. Cells widen to fit labels
    of ``longest`` characters (complex values), so their text stays as large as the rest.
    """
    k = len(pieces)
    shapes = [_PLACEHOLDER_GRID if p.placeholder else p.grid for p in pieces]
    widest = max(_MAX_CELL, 0.085 * longest + 0.08)
    if how == "rows":
        label_w = 0.3 if labelled else 0.0
        units_h = sum(r for r, _ in shapes)
        gap = min(_PIECE_GAP, 0.35 * h / max(units_h, 1)) if k > 1 else 0.0
        ch = (h - gap * (k - 1)) / units_h
        cw = (w - label_w) / max(c for _, c in shapes)
    else:
        label_h = 0.17 if labelled else 0.0
        units_w = sum(c for _, c in shapes)
        gap = min(_PIECE_GAP, 0.35 * w / max(units_w, 1)) if k > 1 else 0.0
        cw = (w - gap * (k - 1)) / units_w
        ch = (h - label_h) / max(r for r, _ in shapes)
    cw, ch = min(cw, widest), min(ch, _MAX_CELL)
    cw = min(cw, max(2.4 * ch, 0.085 * longest + 0.08))  # no thin slivers
    ch = min(ch, 1.2 * cw)
    if how == "rows":
        total_w = label_w + max(c for _, c in shapes) * cw
        total_h = sum(r for r, _ in shapes) * ch + gap * (k - 1)
        left = x + (w - total_w) / 2 + label_w
    else:
        total_w = sum(c for _, c in shapes) * cw + gap * (k - 1)
        total_h = label_h + max(r for r, _ in shapes) * ch
        left = x + (w - total_w) / 2
    top = {"top": y + h, "bottom": y + total_h}.get(valign, y + (h + total_h) / 2)
    boxes = []
    if how == "rows":
        for rows, cols in shapes:
            boxes.append(PieceBox(left, top - rows * ch, cols * cw, rows * ch, cw, ch))
            top -= rows * ch + gap
    else:
        top -= label_h
        for rows, cols in shapes:
            boxes.append(PieceBox(left, top - rows * ch, cols * cw, rows * ch, cw, ch))
            left += cols * cw + gap
    return boxes


def draw_piece(ax: Any, piece: Piece, box: PieceBox, gid: str) -> None:
    """Cells filled by provenance with their values, or one labelled box for a large tensor."""
    if piece.placeholder:
        _draw_placeholder(ax, piece, box, gid)
        return
    rows, cols = piece.grid
    labels = cell_values(piece)
    longest = max(len(s) for row in labels for s in row)
    bold = any(s.combined for s in piece.segments)
    size = value_size(box.cw, box.ch, longest, bold)
    owner = [None] * piece.numel
    for segment in piece.segments:
        for flat in range(segment.start, min(segment.stop, piece.numel)):
            owner[flat] = segment
    for r in range(rows):
        for c in range(cols):
            segment = owner[r * cols + c]
            cx, cy = box.x + c * box.cw, box.y + box.h - (r + 1) * box.ch
            face = _face(segment)
            ax.add_artist(Rectangle(
                (cx, cy), box.cw, box.ch, facecolor=face,
                edgecolor="#CCCCCC" if face == "white" else "white", linewidth=1.0,
                hatch=COMBINED_HATCH if segment and segment.combined else None,
                hatchcolor=HATCH_COLOR, gid=f"cell:{gid}:{r}:{c}"))
            if size >= 4.0:
                ax.text(cx + box.cw / 2, cy + box.ch / 2, labels[r][c], ha="center",
                        va="center_baseline", fontsize=size,
                        color=MUTED_COLOR if segment is None or segment.undefined
                        else text_color(face),
                        fontweight="bold" if segment and segment.combined else "normal",
                        gid=f"value:{gid}:{r}:{c}")
    for segment in piece.segments:
        if len(piece.segments) > 1 and segment.stop > segment.start:
            _outline_segment(ax, piece, box, segment)
    ax.add_artist(Rectangle((box.x, box.y), box.w, box.h, facecolor="none",
                           edgecolor="#444444", linewidth=0.9, gid=f"piece:{gid}"))


def _face(segment: Segment | None) -> str:
    if segment is None or segment.undefined:
        return "white"
    return COMBINED_COLOR if segment.combined else rank_color(segment.sources[0])


def _outline_segment(ax: Any, piece: Piece, box: PieceBox, segment: Segment) -> None:
    cols = piece.grid[1]
    first_row, last_row = segment.start // cols, (segment.stop - 1) // cols
    if segment.start % cols == 0 and segment.stop % cols == 0:
        x0, x1 = box.x, box.x + box.w
    elif first_row == last_row:
        x0, x1 = box.segment_span(piece, segment)
    else:
        return  # a block that wraps rows has no rectangular outline
    top = box.y + box.h - first_row * box.ch
    bottom = box.y + box.h - (last_row + 1) * box.ch
    ax.add_artist(Rectangle((x0, bottom), x1 - x0, top - bottom, facecolor="none",
                           edgecolor="#333333", linewidth=2.0, gid="split"))


def _draw_placeholder(ax: Any, piece: Piece, box: PieceBox, gid: str) -> None:
    numel = max(piece.numel, 1)
    top = box.y + box.h
    for segment in piece.segments:
        height = box.h * (segment.stop - segment.start) / numel
        if height <= 0:
            continue
        ax.add_artist(Rectangle(
            (box.x, top - height), box.w, height, facecolor=_face(segment), edgecolor="white",
            linewidth=1.0, hatch=COMBINED_HATCH if segment.combined else None,
            hatchcolor=HATCH_COLOR, gid=f"band:{gid}:{segment.start}"))
        top -= height
    ax.add_artist(Rectangle((box.x, box.y), box.w, box.h, facecolor="none", edgecolor="#444444",
                           linewidth=0.9, gid=f"placeholder:{gid}"))
    if piece.numel == 0:
        why = "empty"
    elif piece.values is None:
        why = (f"over {VALUE_LIMIT} elements:\nvalues not traced" if piece.numel > VALUE_LIMIT
               else "values not traced")
    else:
        why = "too large to print"
    text = f"{piece.info}\n{why}"
    size = fit_text(text, box.w * 0.92, 9.0, 4.5)
    if size:
        ax.text(box.x + box.w / 2, box.y + box.h / 2, text, ha="center", va="center",
                fontsize=size, color=TEXT_COLOR, linespacing=1.15,
                bbox={"boxstyle": "round,pad=0.2", "facecolor": "white", "alpha": 0.85,
                      "edgecolor": "none"}, gid=f"placeholder-label:{gid}")


def header_text(panel: Panel, width: float, largest: float = 9.0) -> tuple[str, float | None]:
    """The panel's header with dtype and shape when they fit, e.g. ``tensor: float32[1, 5]``."""
    # "0-d int64" says more to a student than torch's "int64[]"
    infos = {str(p.info) if p.info.shape else f"0-d {p.info.dtype}" for p in panel.pieces}
    candidates = [panel.header]
    if panel.header and len(infos) == 1:
        info = infos.pop()
        count = len(panel.pieces)
        listed = any(p.item is not None for p in panel.pieces)
        candidates.insert(0, f"{panel.header}: {count} × {info}" if listed
                          else f"{panel.header}: {info}")
    for text in candidates:
        size = fit_text(text, width, largest, 7.5 if text != panel.header else 6.0)
        if size:
            return text, size
    return candidates[-1], fit_text(candidates[-1], width, largest, 4.0)


def draw_panel(ax: Any, panel: Panel, row: str, rank: int, x: float, y: float, w: float,
               h: float, layout: str, combined_label: str, valign: str = "center",
               longest: int = 1) -> list[PieceBox]:
    """One rank's cell in one row: header, pieces, and a note or reduction label below."""
    ax.add_artist(Rectangle((x, y), w, h, facecolor=PANEL_COLOR, edgecolor="none"))
    header, size = header_text(panel, w - 0.1)
    if header and size:
        ax.text(x + w / 2, y + h - _PANEL_HEADER_H / 2 - 0.02, header, ha="center",
                va="center", fontsize=size, color=MUTED_COLOR, gid=f"header:{row}:{rank}")
    has_combined = any(s.combined for p in panel.pieces for s in p.segments)
    note = "\n".join(t for t in (panel.note if panel.pieces else "",
                                 combined_label if has_combined else "") if t)
    note_h = _PANEL_NOTE_H * (1 + note.count("\n")) if note else 0.08
    inner_x, inner_w = x + 0.06, w - 0.12
    inner_y, inner_h = y + note_h, h - _PANEL_HEADER_H - note_h
    if not panel.pieces:
        size = fit_text(panel.note, inner_w, 9.0, 4.5)
        if size:
            ax.text(x + w / 2, y + h / 2, panel.note, ha="center", va="center",
                    fontsize=size, color=MUTED_COLOR, style="italic", gid=f"note:{row}:{rank}")
        return []
    how = arrangement(panel, layout)
    labelled = len(panel.pieces) > 1 and all(p.item is not None for p in panel.pieces)
    options = ("columns", "rows") if how == "either" else (how,)
    placed = [(place_pieces(panel.pieces, option, inner_x, inner_y, inner_w, inner_h,
                            labelled, valign, longest), option) for option in options]
    # Single elements read the same either way: take whichever gives the larger cells.
    boxes, how = max(placed, key=lambda p: min(p[0][0].cw, p[0][0].ch) + 0.001 * (
        p[1] == "columns"))
    for piece, box in zip(panel.pieces, boxes):
        draw_piece(ax, piece, box, f"{row}:{rank}:{piece.name}")
        if labelled:
            _item_label(ax, piece, box, how)
    if note:
        size = fit_text(note, inner_w, 8.5, 4.5)
        if size:
            ax.text(x + w / 2, y + note_h / 2 + 0.02, note, ha="center", va="center",
                    fontsize=size, color=TEXT_COLOR, linespacing=1.1,
                    gid=f"{'combined' if has_combined else 'note'}:{row}:{rank}")
    return boxes


def _item_label(ax: Any, piece: Piece, box: PieceBox, how: str) -> None:
    text = f"[{piece.item}]"
    if how == "rows":
        size = min(8.0, box.h * 72 * 0.85, 0.26 * 72 / (0.62 * len(text)))
        if size >= 4.0:
            ax.text(box.x - 0.04, box.y + box.h / 2, text, ha="right", va="center",
                    fontsize=size, color=MUTED_COLOR, gid=f"item:{piece.name}")
    else:
        size = min(8.0, 0.15 * 72, (box.w + 0.02) * 72 / (0.62 * len(text)))
        if size >= 4.0:
            ax.text(box.x + box.w / 2, box.y + box.h + 0.03, text, ha="center", va="bottom",
                    fontsize=size, color=MUTED_COLOR, gid=f"item:{piece.name}")


def _ports(ends: list[tuple[tuple[float, float], tuple, Any]],
           bounds: tuple[float, float]) -> dict[Any, float]:
    """Spread arrow ends over the blocks they belong to.

    Each end has the span of its block, a sort key and an id. Ends whose blocks share a span
    (blocks stacked as rows) are spread over it in key order; a block side by side with others
    keeps its arrows over itself. A narrow block (one cell) that many arrows reach gets a wider
    spread, within ``bounds``, so that the arrowheads do not pile up.
    """
    by_span: dict[tuple[float, float], list] = {}
    for span, key, ident in ends:
        by_span.setdefault((round(span[0], 3), round(span[1], 3)), []).append((key, ident))
    xs = {}
    for (x0, x1), members in by_span.items():
        members.sort(key=lambda m: m[0])
        wanted = min(0.2 * len(members), bounds[1] - bounds[0])
        if x1 - x0 < wanted:
            middle = min(max((x0 + x1) / 2, bounds[0] + wanted / 2), bounds[1] - wanted / 2)
            x0, x1 = middle - wanted / 2, middle + wanted / 2
        inset = min(0.05, (x1 - x0) * 0.1)
        for k, (_, ident) in enumerate(members):
            xs[ident] = x0 + inset + (k + 0.5) * (x1 - x0 - 2 * inset) / len(members)
    return xs


def draw_arrows(ax: Any, picture: Picture, boxes: dict, y_from: float, y_to: float,
                panel_x: dict[int, tuple[float, float]]) -> None:
    """One arrow per movement, from the sender's block down to the receiver's block."""
    starts, ends = {}, {}
    for rank in range(picture.world_size):
        out = [a for a in picture.arrows if a.src == rank]
        starts.update(_ports([(_span(picture.before, boxes["before"], a.src, a.src_piece,
                                     a.src_segment),
                               (a.src_piece, a.src_segment, a.dst, a.dst_piece), id(a))
                              for a in out], panel_x[rank]))
        into = [a for a in picture.arrows if a.dst == rank]
        ends.update(_ports([(_span(picture.after, boxes["after"], a.dst, a.dst_piece,
                                   a.dst_segment),
                             (a.dst_piece, a.dst_segment, a.src, a.src_piece), id(a))
                            for a in into], panel_x[rank]))
    remote = sum(not a.local for a in picture.arrows)
    width = 1.6 if remote <= 16 else 1.1 if remote <= 32 else 0.8
    # Local copies first, so that the messages between ranks are drawn on top.
    for arrow in sorted(picture.arrows, key=lambda a: (not a.local, a.src, a.dst)):
        color = rank_color(arrow.src)
        ax.add_artist(FancyArrowPatch(
            (starts[id(arrow)], y_from), (ends[id(arrow)], y_to), arrowstyle="-|>",
            mutation_scale=9 if width < 1.2 else 11, shrinkA=0, shrinkB=0, color=color,
            linewidth=width, alpha=0.95, linestyle=(0, (1.2, 1.6)) if arrow.local else "-",
            gid=f"{'copy' if arrow.local else 'arrow'}:{arrow.src}->{arrow.dst}"))


def _span(panels: dict[int, Panel], boxes: dict, rank: int, piece: int,
          segment: int) -> tuple[float, float]:
    p = panels[rank].pieces[piece]
    return boxes[rank][piece].segment_span(p, p.segments[segment])


def render(picture: Picture, layout: str = "auto") -> Figure:
    """Lay out and draw a :class:`Picture` on a new figure of the fixed size."""
    with mpl.rc_context(STYLE):
        fig, ax = new_figure()
        n = picture.world_size
        width, height = FIGSIZE
        column = (width - _LEFT - _RIGHT) / n
        top = height - _TITLE_H
        before_top = top - _HEAD_H
        before_bottom = before_top - _ROW_H
        after_top = before_bottom - _BAND_H
        after_bottom = after_top - _ROW_H
        draw_title(ax, picture.title, picture.subtitle)
        for label, y0, y1 in (("before", before_bottom, before_top),
                              ("after", after_bottom, after_top)):
            ax.text(_LEFT / 2, (y0 + y1) / 2, label, rotation=90, ha="center", va="center",
                    fontsize=13, fontweight="bold", color=TEXT_COLOR, gid=f"row:{label}")
        boxes: dict[str, dict[int, list[PieceBox]]] = {"before": {}, "after": {}}
        panel_x = {}
        # One cell width for the whole picture, set by its longest value label.
        longest = max((len(v) for panels in (picture.before, picture.after)
                       for panel in panels.values() for p in panel.pieces if not p.placeholder
                       for row in cell_values(p) for v in row), default=1)
        for rank in range(n):
            x = _LEFT + rank * column + _PANEL_GAP / 2
            w = column - _PANEL_GAP
            panel_x[rank] = (x, x + w)
            role = picture.roles.get(rank)
            header = f"rank {rank}" + (f" ({role})" if role else "")
            size = fit_text(header, w - 0.2, 12.0, 5.0) or 5.0
            rank_badge(ax, x + w / 2, top - _HEAD_H / 2 + 0.02, header, rank, size, "center")
            ax.add_artist(Rectangle((x, before_top - 0.05), w, 0.05, facecolor=rank_color(rank),
                                   edgecolor="none"))
            for row, y0, valign in (("before", before_bottom, "bottom"),
                                    ("after", after_bottom, "top")):
                panels = picture.before if row == "before" else picture.after
                panel = panels.get(rank) or Panel("", note="not in this call")
                boxes[row][rank] = draw_panel(ax, panel, row, rank, x, y0, w, _ROW_H - 0.05,
                                              layout, picture.combined_label, valign,
                                              longest)
        draw_arrows(ax, picture, boxes, before_bottom - 0.03, after_top + 0.01, panel_x)
        segments = [s for panel in picture.after.values() for p in panel.pieces
                    for s in p.segments]
        extra = []
        if any(s.combined for s in segments):
            extra.append(("combined", f"combined by {picture.reduce_op}"))
        if any(s.undefined for s in segments):
            extra.append(("undefined", "left over, not a result"))
        extra.append(("arrow", "sent to another rank"))
        if any(a.local for a in picture.arrows):
            extra.append(("copy", "kept by its own rank"))
        draw_legend(ax, n, after_bottom / 2, extra)
    return fig
