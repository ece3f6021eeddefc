"""What every picture shares: the fixed figure, fonts, colours, value labels, title, rank badges and
legend. :mod:`commlab.picture_layout` (collectives) and :mod:`commlab.ring` (a ring all-reduce step
by step) draw on it. Figures are made without pyplot and under :data:`STYLE`, so drawing changes no
global state, and text is sized by estimate, so the same picture always gives the same image.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import matplotlib as mpl
import torch
from matplotlib.figure import Figure
from matplotlib.patches import FancyArrowPatch, Rectangle

from .palette import rank_color

if TYPE_CHECKING:
    from .picture_content import Piece

# One size and resolution for every picture, so that notebooks look alike and baselines are
# stable. Layout is computed in inches: the single axes spans the figure with 1 unit = 1 inch.
FIGSIZE = (12.0, 7.0)
DPI = 100
FONT = "DejaVu Sans"  # ships with matplotlib, so every machine renders the same glyphs
COMBINED_COLOR = "#DEDEDE"
COMBINED_HATCH = "///"
HATCH_COLOR = "#9C9C9C"
PANEL_COLOR = "#F5F5F5"
TEXT_COLOR = "#222222"
MUTED_COLOR = "#666666"

STYLE = {
    "font.family": "sans-serif",
    "font.sans-serif": [FONT],
    "hatch.linewidth": 0.8,
    "figure.facecolor": "white",
    "savefig.facecolor": "white",
    "path.simplify": False,
}


def format_value(value: Any) -> str:
    """A compact cell label: ints as ints, floats in up to 4 significant digits, a+bj."""
    if isinstance(value, bool):
        return "T" if value else "F"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, complex):
        real, imag = _format_float(value.real), _format_float(abs(value.imag))
        sign = "-" if value.imag < 0 or (value.imag == 0 and math.copysign(1, value.imag) < 0) \
            else "+"
        return f"{real}{sign}{imag}j"
    return _format_float(float(value))


def _format_float(x: float) -> str:
    if math.isnan(x) or math.isinf(x):
        return str(x)
    if x == int(x) and abs(x) < 1e5:
        return str(int(x))
    return f"{x:.4g}"


def cell_values(piece: Piece) -> list[list[str]]:
    """The piece's values as rows of labels (callers check ``piece.placeholder`` first)."""
    values = piece.values
    if values.dtype in (torch.bfloat16, torch.float16) or values.dtype.is_floating_point and \
            values.dtype not in (torch.float32, torch.float64):
        values = values.float()
    rows, cols = piece.grid
    flat = values.reshape(-1).tolist()
    return [[format_value(flat[r * cols + c]) for c in range(cols)] for r in range(rows)]


def value_size(cw: float, ch: float, longest: int, bold: bool = False,
               largest: float = 11.0) -> float:
    """The font size (points) at which ``longest`` characters fit a cw x ch inch cell."""
    em = 0.70 if bold else 0.64  # width of a DejaVu Sans digit, bold or regular, in em
    return min(largest, ch * 72 * 0.6, cw * 72 * 0.9 / (em * longest))


def text_color(face: str) -> str:
    """Dark text on light cells, white on dark ones."""
    r, g, b = mpl.colors.to_rgb(face)
    luminance = 0.2126 * r + 0.7152 * g + 0.0722 * b
    return "white" if luminance < 0.42 else TEXT_COLOR


def fit_text(text: str, width: float, largest: float, smallest: float = 5.0) -> float | None:
    """The font size (points) at which ``text`` fits ``width`` inches, or None if too small."""
    # DejaVu Sans averages about 0.6 em per character; an estimate keeps layout deterministic
    # without rendering.
    longest = max((len(line) for line in text.split("\n")), default=1) or 1
    size = min(largest, width * 72 / (0.62 * longest))
    return size if size >= smallest else None


class RunFigure(Figure):
    """A figure that shows itself in a notebook.

    Built without pyplot, a plain Figure has no notebook display of its own (IPython registers
    one only once pyplot is imported), so a cell ending in ``commlab.draw(result)`` would show
    ``<Figure size ...>``. This one renders itself as a PNG.
    """

    def _repr_png_(self) -> bytes:
        import io

        from matplotlib.backends.backend_agg import FigureCanvasAgg

        buffer = io.BytesIO()
        FigureCanvasAgg(self).print_png(buffer)
        return buffer.getvalue()


def new_figure() -> tuple[Figure, Any]:
    """A blank figure of the fixed size with one axes measured in inches."""
    fig = RunFigure(figsize=FIGSIZE, dpi=DPI)
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set_xlim(0, FIGSIZE[0])
    ax.set_ylim(0, FIGSIZE[1])
    ax.set_axis_off()
    # Patches go in with add_artist, which skips the data-limit bookkeeping of add_patch: the
    # limits are fixed, and that bookkeeping is most of the drawing time.
    ax.set_autoscale_on(False)
    return fig, ax


def rank_badge(ax: Any, x: float, y: float, text: str, rank: int, size: float,
               ha: str) -> None:
    """A rank's name on its colour, readable on every colour of the palette."""
    face = rank_color(rank)
    ax.text(x, y, text, ha=ha, va="center", fontsize=size, fontweight="bold",
            color=text_color(face), gid=f"rank:{rank}",
            bbox={"boxstyle": "round,pad=0.25", "facecolor": face, "edgecolor": "none"})


def draw_title(ax: Any, title: str, subtitle: str) -> None:
    width = FIGSIZE[0] - 0.4
    size = fit_text(title, width, 15.0, 6.0) or 6.0
    ax.text(FIGSIZE[0] / 2, FIGSIZE[1] - 0.28, title, ha="center", va="center",
            fontsize=size, fontweight="bold", color=TEXT_COLOR, gid="title")
    if subtitle:
        size = fit_text(subtitle, width, 11.0, 6.0) or 6.0
        ax.text(FIGSIZE[0] / 2, FIGSIZE[1] - 0.48, subtitle, ha="center", va="top",
                fontsize=size, color=TEXT_COLOR, linespacing=1.3, gid="subtitle")


def draw_legend(ax: Any, world_size: int, y: float, extra: list[tuple[str, str]]) -> None:
    """Rank colours first, then ``extra`` entries: ("combined" | "arrow" | "copy", text)."""
    entries: list[tuple[str, str]] = [(f"rank:{r}", f"rank {r}") for r in range(world_size)]
    entries += extra
    size = 8.5
    char = 0.62 * size / 72
    widths = [0.22 + len(text) * char + 0.22 for _, text in entries]
    lead = "colour = rank the value came from:"
    total = len(lead) * char + 0.15 + sum(widths)
    if total > FIGSIZE[0] - 0.3:
        scale = (FIGSIZE[0] - 0.3) / total
        size, char = size * scale, char * scale
        widths = [w_ * scale for w_ in widths]
        total = FIGSIZE[0] - 0.3
    x = (FIGSIZE[0] - total) / 2
    ax.text(x, y, lead, ha="left", va="center", fontsize=size, color=MUTED_COLOR)
    x += len(lead) * char + 0.15
    for (kind, text), width in zip(entries, widths):
        swatch = 0.16 * min(1.0, size / 8.5)
        if kind.startswith("rank:"):
            rank = int(kind.split(":")[1])
            ax.add_artist(Rectangle((x, y - swatch / 2), swatch, swatch,
                                   facecolor=rank_color(rank), edgecolor="none",
                                   gid=f"legend:{rank}"))
        elif kind == "combined":
            ax.add_artist(Rectangle((x, y - swatch / 2), swatch, swatch, facecolor=COMBINED_COLOR,
                                   edgecolor=HATCH_COLOR, linewidth=0.5, hatch=COMBINED_HATCH,
                                   hatchcolor=HATCH_COLOR, gid="legend:combined"))
        elif kind == "undefined":
            ax.add_artist(Rectangle((x, y - swatch / 2), swatch, swatch, facecolor="white",
                                   edgecolor="#AAAAAA", linewidth=0.8, gid="legend:undefined"))
        else:
            ax.add_artist(FancyArrowPatch((x - 0.02, y), (x + swatch + 0.04, y),
                                         arrowstyle="-|>", mutation_scale=8, color=MUTED_COLOR,
                                         linewidth=1.2, shrinkA=0, shrinkB=0,
                                         linestyle=(0, (1.2, 1.6)) if kind == "copy" else "-"))
        ax.text(x + swatch + 0.07, y, text, ha="left", va="center", fontsize=size,
                color=TEXT_COLOR)
        x += width
