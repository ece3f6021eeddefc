"""Compute and communication over time, rank by rank, from a run.

Inside a rank, ``with span("backward"): ...`` records when a piece of computation began and
ended; :func:`spans` hands the records back (return them from the function). Every traced
``torch.distributed`` call already carries ``started`` and ``finished`` (for an async call, when
its work was waited for). :func:`draw_timeline` puts both on one time axis: per rank, a lane of
computation and a lane of communication, so that overlap, or the lack of it, shows.

All times are ``time.perf_counter()`` values, one clock for every process of a machine.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

from .palette import rank_color

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from .result import RunResult
    from .trace import Call

# Point-to-point calls that return work handles without an async_op argument: drawn in flight,
# from the call to the wait, like collectives called with async_op=True.
IN_FLIGHT = ("isend", "irecv", "batch_isend_irecv")

# Computation is drawn in greys and sand, so that the ranks' colours mean communication.
SPAN_COLORS = ("#BBBBBB", "#DDCC77", "#E0E0E0", "#CCBB99", "#999999")


@dataclasses.dataclass(frozen=True)
class Span:
    """A stretch of computation on one rank: a label and its start and end times."""

    label: str
    started: float
    finished: float

    def __repr__(self) -> str:
        # the times differ on every run: a cell that shows what the ranks returned stays the
        # same from run to run
        return f"Span({self.label!r})"


_recorded: list[Span] = []


@contextlib.contextmanager
def span(label: str) -> Iterator[None]:
    """Record the computation inside the ``with`` block under ``label`` (on this rank)."""
    started = time.perf_counter()
    try:
        yield
    finally:
        _recorded.append(Span(label, started, time.perf_counter()))


def spans() -> list[Span]:
    """The spans recorded on this rank since the last call, oldest first."""
    out = list(_recorded)
    _recorded.clear()
    return out


def _finished(call: Call) -> float:
    # an async call never waited for ends, as far as the rank knows, when it was issued
    return call.finished if call.finished is not None else call.started + call.seconds


def _origin(result: RunResult, spans_per_rank: list[list[Span]]) -> float:
    times = [c.started for calls in result.trace for c in calls if c.started]
    times += [s.started for rank_spans in spans_per_rank for s in rank_spans]
    return min(times) if times else 0.0


def _draw_calls(ax, calls: list[Call], lane: float, origin: float, color: str,
                scale: float) -> None:
    for call in calls:
        if not call.started:
            continue
        start = (call.started - origin) * scale
        width = max((_finished(call) - call.started) * scale, 0.002 * ax.get_xlim()[1])
        if call.async_op or call.op in IN_FLIGHT:
            # in flight: from the moment it was started until the rank waited for it
            ax.barh(lane, width, left=start, height=0.32, color="white", edgecolor=color,
                    hatch="///", linewidth=1.2)
            ax.plot([start, start], [lane - 0.2, lane + 0.2], color=color, linewidth=2.5)
        else:
            ax.barh(lane, width, left=start, height=0.32, color=color, edgecolor=color)


def _draw_spans(ax, rank_spans: list[Span], lane: float, origin: float, scale: float,
                colors: dict[str, str]) -> None:
    for item in rank_spans:
        start = (item.started - origin) * scale
        width = (item.finished - item.started) * scale
        ax.barh(lane, width, left=start, height=0.32, color=colors[item.label],
                edgecolor="#555555", linewidth=0.6)


def draw_timeline(result: RunResult, spans: list[list[Span]] | None = None,
                  title: str | None = None) -> Figure:
    """Draw each rank's computation and communication on one time axis.

    Args:
        result: what ``commlab.run`` returned.
        spans: per rank, the :class:`Span` list the rank returned (``timeline.spans()``); leave
            out to draw communication only.
        title: the figure's title.

    Returns:
        A figure with two lanes per rank: "compute" (one bar per span, a colour per label) and
        "comm" (blocking calls as solid bars in the rank's colour, from call to return; async
        calls as hatched bars from the moment they were started, marked by a tick, to the moment
        the rank's ``wait()`` returned). Time runs in milliseconds from the first event.

    Raises:
        ValueError: ``spans`` does not have one list per rank.
    """
    from matplotlib.patches import Patch

    from .figure_parts import RunFigure

    spans = spans if spans is not None else [[] for _ in range(result.world_size)]
    if len(spans) != result.world_size or not all(isinstance(s, list) for s in spans):
        raise ValueError(f"spans should be a list of {result.world_size} lists (one per rank, "
                         "what each rank returned from timeline.spans()).")
    origin, scale = _origin(result, spans), 1e3
    end = max([(_finished(c) - origin) * scale for calls in result.trace for c in calls
               if c.started] + [(s.finished - origin) * scale for r in spans for s in r] + [1e-3])
    labels = list(dict.fromkeys(s.label for rank_spans in spans for s in rank_spans))
    colors = {label: SPAN_COLORS[i % len(SPAN_COLORS)] for i, label in enumerate(labels)}
    height = 1.6 + 0.8 * result.world_size  # inches: title and legend, the lanes, the axis
    fig = RunFigure(figsize=(11, height), dpi=100)
    ax = fig.add_axes((0.14, 0.55 / height, 0.83, 1 - 1.35 / height))
    ax.set_xlim(0, end * 1.02)
    ticks, names = [], []
    for rank in range(result.world_size):
        base = rank * 1.0
        _draw_spans(ax, spans[rank], base, origin, scale, colors)
        _draw_calls(ax, result.trace[rank], base + 0.4, origin, rank_color(rank), scale)
        ticks += [base, base + 0.4]
        names += [f"rank {rank} compute", "comm"]
    ax.set_yticks(ticks, names)
    ax.set_ylim(result.world_size - 0.4, -0.4)
    ax.set_xlabel("milliseconds since the first event")
    handles = [Patch(facecolor=colors[label], edgecolor="#555555", label=label)
               for label in labels]
    handles += [Patch(facecolor="#777777", label="blocking call"),
                Patch(facecolor="white", edgecolor="#777777", hatch="///",
                      label="async call, started to waited")]
    ax.legend(handles=handles, loc="lower left", bbox_to_anchor=(0, 1.0), fontsize=9,
              ncol=len(handles), frameon=False)
    fig.suptitle(title or "Computation and communication per rank", fontsize=12)
    return fig
