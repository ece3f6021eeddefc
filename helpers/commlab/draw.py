"""Draw what one collective moved: every rank's tensors before and after it, cell by cell.

:func:`draw` turns one traced call of a :class:`~commlab.result.RunResult` into a figure with one
column per rank. The top row shows what each rank held before the call (the tensors it gave),
the bottom row what it held after (the tensors it got). Every cell prints its value and is
filled with the colour of the rank that value came from; cells a reduction combined from several
ranks are grey and hatched, and labelled with the reduce op and the ranks. Arrows between the
rows show who sent to whom: one solid arrow, in the sender's colour, for each message between
two ranks (the direct exchange whose bytes :mod:`commlab.trace` counts), and a dotted one where
a rank keeps its own data.

The figures are plain :class:`matplotlib.figure.Figure` objects built without pyplot, so a
notebook shows one exactly once when it is a cell's last expression, and drawing changes no
global state. Size, resolution and fonts are fixed, so the same run always gives the same image.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable
from typing import Any

import matplotlib as mpl
import torch
from matplotlib.figure import Figure
from matplotlib.patches import FancyArrowPatch, Rectangle

from .palette import RANK_COLORS, rank_color
from .trace import VALUE_LIMIT, Call, TensorInfo

# One size and resolution for every picture, so that notebooks look alike and baselines are
# stable. Layout is computed in inches: the single axes spans the figure with 1 unit = 1 inch.
FIGSIZE = (12.0, 7.0)
DPI = 100
FONT = "DejaVu Sans"  # ships with matplotlib, so every machine renders the same glyphs

# Tensors with more elements than this are drawn as one box naming dtype and shape: beyond it the
# printed values become too small to read at 8 ranks.
MAX_CELLS = 64

COMBINED_COLOR = "#DEDEDE"
COMBINED_HATCH = "///"
HATCH_COLOR = "#9C9C9C"
PANEL_COLOR = "#F5F5F5"
TEXT_COLOR = "#222222"
MUTED_COLOR = "#666666"
LAYOUTS = ("auto", "rows", "columns")

# The calls draw() knows, in the order the course teaches them. The aliases name the same data
# movement under torch's other names.
COLLECTIVES = (
    "broadcast",
    "scatter",
    "gather",
    "all_gather",
    "all_gather_into_tensor",
    "reduce",
    "all_reduce",
    "reduce_scatter",
    "reduce_scatter_tensor",
    "all_to_all",
    "all_to_all_single",
)
ALIASES = {
    "_all_gather_base": "all_gather_into_tensor",
    "all_gather_single": "all_gather_into_tensor",
    "_reduce_scatter_base": "reduce_scatter_tensor",
    "reduce_scatter_single": "reduce_scatter_tensor",
}
POINT_TO_POINT = ("send", "recv", "isend", "irecv", "batch_isend_irecv")
KNOWN = COLLECTIVES + POINT_TO_POINT + tuple(ALIASES)
_SENDS = ("send", "isend")
_RECVS = ("recv", "irecv")

_STYLE = {
    "font.family": "sans-serif",
    "font.sans-serif": [FONT],
    "hatch.linewidth": 0.8,
    "figure.facecolor": "white",
    "savefig.facecolor": "white",
    "path.simplify": False,
}


class DrawError(ValueError):
    """A run or a call that cannot be drawn; the message says why and what to try."""


# --- what a picture holds ------------------------------------------------------------------------

@dataclasses.dataclass
class Segment:
    """A run of elements ``[start, stop)`` of a tensor (row-major) with one provenance.

    ``sources`` holds one rank when the values were moved (or kept) from that rank, and several
    when a reduction combined them.
    """

    start: int
    stop: int
    sources: tuple[int, ...]

    @property
    def combined(self) -> bool:
        return len(self.sources) > 1

    @property
    def undefined(self) -> bool:
        """Values the call leaves unspecified (what a reduce leaves on ranks other than dst)."""
        return not self.sources


@dataclasses.dataclass
class Piece:
    """One tensor as drawn: its values (``None`` when not recorded) and where they came from."""

    name: str
    info: TensorInfo
    values: torch.Tensor | None
    segments: list[Segment]
    item: int | None = None

    @property
    def numel(self) -> int:
        return math.prod(self.info.shape)

    @property
    def placeholder(self) -> bool:
        """Whether the tensor is drawn as one labelled box instead of cell by cell."""
        return (self.values is None or self.numel > MAX_CELLS or self.numel == 0
                or len(self.info.shape) > 2)

    @property
    def grid(self) -> tuple[int, int]:
        """(rows, columns): 0-d tensors are one cell, 1-d tensors one row."""
        shape = self.info.shape
        if len(shape) == 0:
            return (1, 1)
        if len(shape) == 1:
            return (1, shape[0])
        return (shape[0], shape[1])


@dataclasses.dataclass
class Panel:
    """What one rank holds in one row of the picture."""

    header: str
    pieces: list[Piece] = dataclasses.field(default_factory=list)
    note: str = ""


@dataclasses.dataclass
class Arrow:
    """Data that travels from a segment of a ``before`` piece to a segment of an ``after`` one."""

    src: int
    src_piece: int
    src_segment: int
    dst: int
    dst_piece: int
    dst_segment: int

    @property
    def local(self) -> bool:
        return self.src == self.dst


@dataclasses.dataclass
class Picture:
    """Everything :func:`draw` renders, before any geometry."""

    world_size: int
    title: str
    subtitle: str
    before: dict[int, Panel]
    after: dict[int, Panel]
    arrows: list[Arrow]
    roles: dict[int, str] = dataclasses.field(default_factory=dict)
    combined_label: str = ""
    reduce_op: str = ""


# --- public entry point -------------------------------------------------------------------------

def draw(result: Any, call: str | int | Call | None = None, *, layout: str = "auto",
         title: str | None = None) -> Figure:
    """Draw one traced call of a run: each rank's tensors before and after, and what moved.

    Each rank gets a column. The top row holds what the rank gave the call, the bottom row what
    it had afterwards. A cell's colour is the rank its value came from (the palette of
    :data:`commlab.palette.RANK_COLORS`); grey hatched cells were combined by a reduction from
    the ranks the label names. A solid arrow is a message from one rank to another, in the
    sender's colour; a dotted arrow is data a rank keeps. Tensors over 64 elements, or whose
    values the trace did not keep, are drawn as one box naming their dtype and shape.

    Lists of tensors (``tensor_list``, ``gather_list``, ...) are drawn as blocks. The call moves
    the same list either way; ``layout`` only chooses how the blocks are placed, to match how
    your code puts them together afterwards:

    - ``"rows"``: stacked, as ``torch.cat(blocks, dim=0)`` would join them.
    - ``"columns"``: side by side, as ``torch.cat(blocks, dim=1)`` would join them.
    - ``"auto"`` (default): side by side when the blocks are taller than wide (``[5, 2]``
      blocks, the columns of a ``dim=1`` split), stacked otherwise, and for single elements
      whichever gives larger cells. So the ``[1, 5]`` blocks of a row gather land as rows and
      the ``[5, 2]`` blocks of a column gather land as columns.

    Args:
        result: what :func:`commlab.run` returned, with tensor values traced (the default).
        call: which call to draw. ``None`` draws the run's first collective (or, in a run with
            only point-to-point calls, its first messages). A name such as ``"all_gather"``
            picks that collective's first call, ``"all_gather #2"`` its second; an ``int``
            picks rank 0's trace entry at that position; a :class:`commlab.trace.Call` picks
            that call. For ``send``/``recv``/``isend``/``irecv``/``batch_isend_irecv``,
            ``"send #k"`` (or ``"recv #k"``) draws the k-th message every rank sends, together
            with the receives that match them.
        layout: ``"auto"``, ``"rows"`` or ``"columns"``, as above.
        title: replaces the title, which by default names the call and its root or reduce op.

    Returns:
        The figure (12 x 7 inches at 100 dpi).

    Raises:
        DrawError: (a ``ValueError``) if ``result`` is not a run's result, if the call is not
            one this function knows or is not in the run, if it failed or ran with
            ``async_op=True``, or if the run recorded no tensor values.

    Example:
        >>> def example(rank, world_size):
        ...     tensor = torch.ones(1, 5) * rank
        ...     gather_list = [torch.empty_like(tensor) for _ in range(world_size)] \\
        ...         if rank == 0 else None
        ...     dist.gather(tensor, gather_list=gather_list, dst=0)
        >>> commlab.draw(commlab.run(example, world_size=4))  # doctest: +SKIP
    """
    if layout not in LAYOUTS:
        raise DrawError(f"layout must be one of {', '.join(map(repr, LAYOUTS))}, "
                        f"not {layout!r}.")
    check_result(result)
    op, index = select(result, call)
    if op in POINT_TO_POINT:
        picture = p2p_picture(result, index)
    else:
        calls = matching_calls(result, op, index)
        picture = collective_picture(op, calls, result.world_size)
    if title is not None:
        picture.title = title
    return render(picture, layout)


# --- choosing the call -------------------------------------------------------------------------

def check_result(result: Any) -> None:
    """Raise :class:`DrawError` unless ``result`` looks like what :func:`commlab.run` returns."""
    if not (hasattr(result, "trace") and hasattr(result, "world_size")):
        raise DrawError(
            f"commlab.draw takes the result of commlab.run(fn, world_size=...), not a "
            f"{type(result).__name__}. Try: result = commlab.run(fn, world_size=4); "
            "commlab.draw(result)")
    if not 1 <= result.world_size <= len(RANK_COLORS):
        raise DrawError(f"commlab can draw runs of 1 to {len(RANK_COLORS)} ranks; this run had "
                        f"{result.world_size}. Run the example on fewer ranks to draw it.")


def _known_list() -> str:
    return ", ".join(COLLECTIVES + ("send/recv", "isend/irecv", "batch_isend_irecv"))


def _made(result: Any) -> str:
    labels: list[str] = []
    for calls in result.trace:
        for c in calls:
            if c.label not in labels:
                labels.append(c.label)
    return ", ".join(labels) if labels else "no torch.distributed calls at all"


def select(result: Any, call: str | int | Call | None) -> tuple[str, int]:
    """The ``(op, index)`` that ``call`` names; for point-to-point ops, index is the step."""
    first_rank_calls = next((calls for calls in result.trace if calls), [])
    if call is None:
        for c in first_rank_calls:
            if c.op in COLLECTIVES or c.op in ALIASES:
                return c.op, c.index
        if any(c.op in POINT_TO_POINT for calls in result.trace for c in calls):
            return "send", 1
        raise DrawError(
            f"There is nothing to draw: this run made {_made(result)}. commlab.draw shows "
            f"{_known_list()}; call one of them in the function you pass to commlab.run.")
    if isinstance(call, Call):
        op, index = call.op, call.index
        if op in POINT_TO_POINT:
            return op, p2p_step(result, call)
    elif isinstance(call, bool) or not isinstance(call, (int, str)):
        raise DrawError(f"call must be a name such as 'all_gather' or 'all_gather #2', an index "
                        f"into rank 0's trace, or a Call; got {type(call).__name__}.")
    elif isinstance(call, int):
        trace0 = result.trace[0] if result.trace else []
        if not -len(trace0) <= call < len(trace0):
            raise DrawError(f"Rank 0 made {len(trace0)} traced calls, so there is no call "
                            f"number {call}; it made: {_made(result)}.")
        chosen = trace0[call]
        op, index = chosen.op, chosen.index
        if op in POINT_TO_POINT:
            return op, p2p_step(result, chosen)
    else:
        match = re.fullmatch(r"\s*([A-Za-z_]+)\s*(?:#\s*(\d+))?\s*", call)
        if not match:
            raise DrawError(f"{call!r} is not a call name: write it like 'all_gather' or "
                            "'all_gather #2'.")
        op, index = match.group(1), int(match.group(2) or 1)
        if op in POINT_TO_POINT:
            return op, index
    if op not in KNOWN:
        extra = (" It moves Python objects, which have no tensor cells to draw."
                 if op.endswith(("_object", "_object_list")) else "")
        raise DrawError(f"commlab.draw knows {_known_list()}; {op!r} is not one of them.{extra}")
    if not any(c.op == op and c.index == index for calls in result.trace for c in calls):
        raise DrawError(f"This run made no {op} #{index} call; it made: {_made(result)}.")
    return op, index


def matching_calls(result: Any, op: str, index: int) -> dict[int, Call]:
    """Each participating rank's ``index``-th call of ``op``, checked to be drawable."""
    calls = {rank: c for rank, rank_calls in enumerate(result.trace)
             for c in rank_calls if c.op == op and c.index == index}
    first = calls[min(calls)]
    group = first.group_ranks or tuple(range(result.world_size))
    label = first.label
    missing = [r for r in group if r not in calls]
    if missing:
        raise DrawError(f"{label} was not made by rank(s) {_rank_list(missing)}: every rank of "
                        "the group must make each collective, in the same order. Draw a run "
                        "where all ranks finished.")
    for rank in sorted(calls):
        c = calls[rank]
        if c.error:
            raise DrawError(f"{label} failed on rank {rank} ({c.error}), so nothing moved. "
                            "Fix that error first, then draw the run again.")
        if c.async_op:
            raise DrawError(f"{label} ran with async_op=True, so the trace has no values from "
                            "after it. Draw a run that calls it with async_op=False.")
    if all(not c.before and not c.after for c in calls.values()):
        raise DrawError(
            f"This run recorded no tensor values for {label} (tensor values were not traced), "
            "so there are no cells to draw. Run it again with tensor values traced (the "
            f"default), on tensors of at most {VALUE_LIMIT} elements.")
    return calls


# --- the data movement of each collective ----------------------------------------------------

SegmentsFor = Callable[[int, int], list[Segment]]


def _whole(*sources: int) -> SegmentsFor:
    return lambda item, numel: [Segment(0, numel, tuple(sources))]


def _by_item(group: tuple[int, ...]) -> SegmentsFor:
    return lambda item, numel: [Segment(0, numel, (group[item],))]


def _equal_parts(parts: int, sources_of: Callable[[int], tuple[int, ...]]) -> SegmentsFor:
    def segments(item: int, numel: int) -> list[Segment]:
        size = numel // parts if numel % parts == 0 else 0
        if not size:  # not an even split: keep one segment rather than invent boundaries
            return [Segment(0, numel, sources_of(-1))]
        return [Segment(k * size, (k + 1) * size, sources_of(k)) for k in range(parts)]
    return segments


def _splits(sizes: list[int], shape: tuple[int, ...],
            sources_of: Callable[[int], tuple[int, ...]]) -> SegmentsFor:
    row = math.prod(shape[1:]) if shape else 1

    def segments(item: int, numel: int) -> list[Segment]:
        out, start = [], 0
        for k, size in enumerate(sizes):
            out.append(Segment(start, start + size * row, sources_of(k)))
            start += size * row
        return out
    return segments


def _tensors(call: Call, param: str, when: str) -> list[tuple[torch.Tensor | None, TensorInfo]]:
    """The (values, info) of a tensor or list parameter, as recorded before or after the call."""
    infos = call.tensors.get(param)
    shot = (call.before if when == "before" else call.after).get(param)
    if infos is None:
        if isinstance(shot, torch.Tensor):
            infos = TensorInfo.of(shot)
        elif isinstance(shot, list) and shot and all(isinstance(v, torch.Tensor) for v in shot):
            infos = [TensorInfo.of(v) for v in shot]
        else:
            return []
    if isinstance(infos, list):
        values = shot if isinstance(shot, list) and len(shot) == len(infos) else [None] * len(
            infos)
        return list(zip(values, infos))
    return [(shot if isinstance(shot, torch.Tensor) else None, infos)]


def panel_of(call: Call, param: str, when: str, segments_for: SegmentsFor,
             header: str | None = None) -> Panel:
    """A panel with one piece per tensor of ``param`` (lists become several pieces)."""
    pairs = _tensors(call, param, when)
    is_list = isinstance(call.tensors.get(param), list)
    pieces = []
    for item, (values, info) in enumerate(pairs):
        numel = math.prod(info.shape)
        name = f"{param}[{item}]" if is_list else param
        pieces.append(Piece(name, info, values, segments_for(item, numel),
                            item if is_list else None))
    return Panel(header or param, pieces, "" if pieces else f"no {param}")


def _unchanged(call: Call, param: str) -> bool:
    before, after = call.before.get(param), call.after.get(param)
    if not isinstance(before, torch.Tensor) or not isinstance(after, torch.Tensor):
        return True
    return torch.equal(before, after)


def collective_picture(op: str, calls: dict[int, Call], world_size: int) -> Picture:
    """Work out, from the call's semantics, where every output element came from."""
    first = calls[min(calls)]
    group = first.group_ranks or tuple(range(world_size))
    n = len(group)
    pos = {r: i for i, r in enumerate(group)}
    kind = ALIASES.get(op, op)
    root = first.root
    reduce_op = first.reduce_op or "SUM"
    before: dict[int, Panel] = {}
    after: dict[int, Panel] = {}
    arrows: list[Arrow] = []
    roles: dict[int, str] = {}
    combined_label = ""

    if kind == "broadcast":
        roles[root] = "src"
        for r in group:
            before[r] = panel_of(calls[r], "tensor", "before", _whole(r))
            after[r] = panel_of(calls[r], "tensor", "after", _whole(root))
            arrows.append(Arrow(root, 0, 0, r, 0, 0))
        subtitle = f"rank {root}'s tensor is copied into the tensor of every other rank"
    elif kind == "scatter":
        roles[root] = "src"
        for r in group:
            before[r] = (panel_of(calls[r], "scatter_list", "before", _whole(root))
                         if r == root else Panel("scatter_list", note="no scatter_list:\n"
                                                 "only receives"))
            after[r] = panel_of(calls[r], "tensor", "after", _whole(root))
            arrows.append(Arrow(root, pos[r], 0, r, 0, 0))
        subtitle = f"rank {root} sends scatter_list[i] to rank i, which receives it in tensor"
    elif kind == "gather":
        roles[root] = "dst"
        for r in group:
            before[r] = panel_of(calls[r], "tensor", "before", _whole(r))
            after[r] = (panel_of(calls[r], "gather_list", "after", _by_item(group))
                        if r == root else Panel("gather_list", note="no gather_list:\n"
                                                "only sends"))
            arrows.append(Arrow(r, 0, 0, root, pos[r], 0))
        subtitle = f"each rank's tensor lands in gather_list[rank] on rank {root}"
    elif kind == "all_gather":
        for r in group:
            before[r] = panel_of(calls[r], "tensor", "before", _whole(r))
            after[r] = panel_of(calls[r], "tensor_list", "after", _by_item(group))
            arrows += [Arrow(r, 0, 0, j, pos[r], 0) for j in group]
        subtitle = "each rank's tensor lands in tensor_list[rank] on every rank"
    elif kind == "all_gather_into_tensor":
        for r in group:
            before[r] = panel_of(calls[r], "input_tensor", "before", _whole(r))
            after[r] = panel_of(calls[r], "output_tensor", "after",
                                _equal_parts(n, lambda k: (group[k],) if k >= 0 else ()))
            arrows += [Arrow(r, 0, 0, j, 0, pos[r]) for j in group]
        subtitle = ("each rank's input_tensor fills block [rank] of output_tensor on every "
                    "rank")
    elif kind == "reduce":
        roles[root] = "dst"
        combined_label = f"{reduce_op} of ranks {_rank_list(group)}"
        for r in group:
            before[r] = panel_of(calls[r], "tensor", "before", _whole(r))
            if r == root:
                after[r] = panel_of(calls[r], "tensor", "after", _whole(*group))
            else:
                # torch leaves the other ranks' tensors unspecified; gloo uses them as scratch
                unchanged = _unchanged(calls[r], "tensor")
                after[r] = panel_of(calls[r], "tensor", "after", _whole(r) if unchanged
                                    else _whole())
                if not unchanged:
                    after[r].note = f"left-over values:\nonly rank {root}'s tensor is the result"
            arrows.append(Arrow(r, 0, 0, root, 0, 0))
        subtitle = (f"the tensors of all ranks are combined with {reduce_op} into rank "
                    f"{root}'s tensor")
    elif kind == "all_reduce":
        combined_label = f"{reduce_op} of ranks {_rank_list(group)}"
        for r in group:
            before[r] = panel_of(calls[r], "tensor", "before", _whole(r))
            after[r] = panel_of(calls[r], "tensor", "after", _whole(*group))
            arrows += [Arrow(r, 0, 0, j, 0, 0) for j in group]
        subtitle = (f"the tensors of all ranks are combined with {reduce_op}, and every rank "
                    "gets the result")
    elif kind == "reduce_scatter":
        combined_label = f"{reduce_op} of ranks {_rank_list(group)}"
        for r in group:
            before[r] = panel_of(calls[r], "input_list", "before", _whole(r))
            after[r] = panel_of(calls[r], "output", "after", _whole(*group))
            arrows += [Arrow(r, pos[j], 0, j, 0, 0) for j in group]
        subtitle = f"rank i gets the {reduce_op} of input_list[i] over all ranks"
    elif kind == "reduce_scatter_tensor":
        combined_label = f"{reduce_op} of ranks {_rank_list(group)}"
        for r in group:
            before[r] = panel_of(calls[r], "input", "before", _equal_parts(n, lambda k, r=r: (r,)))
            after[r] = panel_of(calls[r], "output", "after", _whole(*group))
            arrows += [Arrow(r, 0, pos[j], j, 0, 0) for j in group]
        subtitle = f"rank i gets the {reduce_op} of block [i] of input over all ranks"
    elif kind == "all_to_all":
        for r in group:
            before[r] = panel_of(calls[r], "input_tensor_list", "before", _whole(r))
            after[r] = panel_of(calls[r], "output_tensor_list", "after", _by_item(group))
            arrows += [Arrow(r, pos[j], 0, j, pos[r], 0) for j in group]
        subtitle = ("input_tensor_list[j] of rank i lands in output_tensor_list[i] of "
                    "rank j")
    elif kind == "all_to_all_single":
        sizes = {r: _split_sizes(calls[r], n) for r in group}
        for r in group:
            in_info = calls[r].tensors.get("input")
            out_info = calls[r].tensors.get("output")
            before[r] = panel_of(calls[r], "input", "before",
                                 _splits(sizes[r]["input"], in_info.shape, lambda k, r=r: (r,)))
            after[r] = panel_of(calls[r], "output", "after",
                                _splits(sizes[r]["output"], out_info.shape,
                                        lambda k: (group[k],)))
        for r in group:
            for j in group:
                if sizes[r]["input"][pos[j]]:
                    arrows.append(Arrow(r, 0, pos[j], j, 0, pos[r]))
        subtitle = "split j of rank i's input lands as split i of rank j's output"
        if any(len(set(s["input"])) > 1 or len(set(s["output"])) > 1 for s in sizes.values()):
            subtitle += " (uneven splits)"
    else:  # select() lets only known ops through; this guards future additions
        raise DrawError(f"commlab.draw knows {_known_list()}; {op!r} is not one of them.")

    # Drop arrows whose ends the trace could not describe (a malformed or partial call).
    arrows = [a for a in arrows if _has_segment(before, a.src, a.src_piece, a.src_segment)
              and _has_segment(after, a.dst, a.dst_piece, a.dst_segment)]
    arguments = list(_SIGNATURES[kind])
    if "split_sizes" in subtitle or "uneven" in subtitle:
        arguments += ["output_split_sizes", "input_split_sizes"]
    arguments += [f"{role}={rank}" for rank, role in roles.items()]
    if combined_label:
        arguments.append(f"op={reduce_op}")
    title = f"dist.{op}({', '.join(arguments)})"
    if first.index > 1:
        title += f"  (call #{first.index})"
    return Picture(world_size, title, subtitle, before, after, arrows, roles, combined_label,
                   reduce_op)


# The positional arguments each collective is called with, for titles that read like the code.
_SIGNATURES = {
    "broadcast": ("tensor",),
    "scatter": ("tensor", "scatter_list"),
    "gather": ("tensor", "gather_list"),
    "all_gather": ("tensor_list", "tensor"),
    "all_gather_into_tensor": ("output_tensor", "input_tensor"),
    "reduce": ("tensor",),
    "all_reduce": ("tensor",),
    "reduce_scatter": ("output", "input_list"),
    "reduce_scatter_tensor": ("output", "input"),
    "all_to_all": ("output_tensor_list", "input_tensor_list"),
    "all_to_all_single": ("output", "input"),
}


def _split_sizes(call: Call, n: int) -> dict[str, list[int]]:
    if call.split_sizes:
        return call.split_sizes
    sizes = {}
    for key in ("input", "output"):
        info = call.tensors.get(key)
        rows = info.shape[0] if info is not None and info.shape else 1
        sizes[key] = [rows // n] * n
    return sizes


def _has_segment(panels: dict[int, Panel], rank: int, piece: int, segment: int) -> bool:
    panel = panels.get(rank)
    return (panel is not None and piece < len(panel.pieces)
            and segment < len(panel.pieces[piece].segments))


# --- point-to-point messages --------------------------------------------------------------------

@dataclasses.dataclass
class Message:
    """One tensor sent from ``src`` to ``dst``: the ``step``-th message ``src`` sent.

    ``payload`` is what the sender's tensor held when it was sent (``None`` when not traced, as
    for ``batch_isend_irecv``); ``received`` is the receiver's buffer after a blocking ``recv``
    (``None`` for ``irecv``, whose values the trace cannot see).
    """

    src: int
    dst: int
    step: int
    info: TensorInfo
    payload: torch.Tensor | None
    kept: torch.Tensor | None = None
    received: torch.Tensor | None = None
    recv_before: torch.Tensor | None = None
    send: Call | None = None
    recv: Call | None = None


def _p2p_events(calls: list[Call]) -> tuple[list[dict], list[dict]]:
    sends, recvs = [], []
    for c in calls:
        if c.error:
            continue
        if c.op in _SENDS or c.op in _RECVS:
            info = c.tensors.get("tensor")
            if info is None:
                continue
            event = {"peer": c.root, "info": info, "before": c.before.get("tensor"),
                     "after": c.after.get("tensor"), "call": c}
            (sends if c.op in _SENDS else recvs).append(event)
        elif c.op == "batch_isend_irecv":
            for kind, peer, info in c.ops or []:
                event = {"peer": peer, "info": info, "before": None, "after": None, "call": c}
                (sends if kind == "isend" else recvs).append(event)
    return sends, recvs


def p2p_messages(result: Any) -> list[Message]:
    """Every point-to-point message of the run, each send paired with the receive it matched.

    Messages between two ranks arrive in the order they were sent, so the m-th send from a to b
    matches the m-th receive on b from a.
    """
    events = [_p2p_events(calls) for calls in result.trace]
    messages = []
    for src, (sends, _) in enumerate(events):
        seen: dict[int, int] = {}
        for step, event in enumerate(sends, start=1):
            dst = event["peer"]
            if dst is None or not 0 <= dst < len(events):
                continue
            m = seen.get(dst, 0)
            seen[dst] = m + 1
            matches = [e for e in events[dst][1] if e["peer"] == src]
            recv = matches[m] if m < len(matches) else None
            messages.append(Message(
                src, dst, step, event["info"], event["before"],
                kept=event["after"] if event["after"] is not None else event["before"],
                received=recv["after"] if recv else None,
                recv_before=recv["before"] if recv else None,
                send=event["call"], recv=recv["call"] if recv else None))
    return messages


def p2p_step(result: Any, call: Call) -> int:
    """The step (k-th message of its sender) that a traced send or receive belongs to."""
    for message in p2p_messages(result):
        if call is message.send or call is message.recv:
            return message.step
    raise DrawError(f"{call.label} on rank {call.rank} has no matching send/recv in this run, "
                    "so there is no message to draw.")


def p2p_picture(result: Any, step: int) -> Picture:
    """The ``step``-th message each rank sent, with the matching receives."""
    messages = p2p_messages(result)
    if not messages:
        raise DrawError(f"This run sent no point-to-point messages; it made: {_made(result)}.")
    chosen = [m for m in messages if m.step == step]
    if not chosen:
        steps = max(m.step for m in messages)
        raise DrawError(f"No rank sent a message number {step}: the ranks sent at most {steps} "
                        f"each. Ask for 'send #1' to 'send #{steps}'.")
    if all(m.send and m.send.op != "batch_isend_irecv" and not m.send.before
           and not (m.recv and m.recv.after) for m in chosen):
        raise DrawError("This run recorded no tensor values for its sends (tensor values were "
                        "not traced), so there are no cells to draw. Run it again with tensor "
                        "values traced (the default).")
    before: dict[int, Panel] = {}
    after: dict[int, Panel] = {}
    arrows = []
    for m in chosen:
        sender = before.setdefault(m.src, Panel(""))
        sender.pieces.append(Piece(f"tensor→{m.dst}", m.info, m.payload,
                                   [Segment(0, math.prod(m.info.shape), (m.src,))]))
        receiver = after.setdefault(m.dst, Panel(""))
        values = m.received if m.received is not None else m.payload
        receiver.pieces.append(Piece(f"tensor←{m.src}", m.info, values,
                                     [Segment(0, math.prod(m.info.shape), (m.src,))]))
        arrows.append(Arrow(m.src, len(sender.pieces) - 1, 0, m.dst, len(receiver.pieces) - 1, 0))
    for m in chosen:
        sends = [x for x in chosen if x.src == m.src]
        recvs = [x for x in chosen if x.dst == m.dst]
        before[m.src].header = (_p2p_call(m.send, "dst", m.dst) if len(sends) == 1
                                else f"sends {len(sends)} tensors")
        after[m.dst].header = (_p2p_call(m.recv, "src", m.src) if len(recvs) == 1
                               else f"receives {len(recvs)} tensors")
    for rank in range(result.world_size):
        before.setdefault(rank, Panel("", note="sends nothing"))
        after.setdefault(rank, Panel("", note="receives nothing"))
    if len(chosen) <= 3:
        subtitle = "; ".join(f"rank {m.src} sends its tensor to rank {m.dst}" for m in chosen)
    else:
        subtitle = f"{len(chosen)} messages, one arrow each, in the sender's colour"
    if len(chosen) == 1:
        m = chosen[0]
        title = " / ".join(f"dist.{call}" for call in (_p2p_call(m.send, "dst", m.dst),
                                                       _p2p_call(m.recv, "src", m.src)))
    else:
        ops = {m.send.op for m in chosen if m.send} | {m.recv.op for m in chosen if m.recv}
        title = " / ".join(op for op in POINT_TO_POINT if op in ops)
    if step > 1:
        title += f"  (message #{step} of each rank)"
    return Picture(result.world_size, title, subtitle, before, after, arrows)


# --- formatting ---------------------------------------------------------------------------------

def _p2p_call(call: Call | None, peer_name: str, peer: int) -> str:
    """How the code made this end of a message: ``send(tensor, dst=1)``."""
    if call is None:
        return f"{'receives from' if peer_name == 'src' else 'sends to'} rank {peer}"
    if call.op == "batch_isend_irecv":
        kind = "isend" if peer_name == "dst" else "irecv"
        return f"batch_isend_irecv: {kind} {peer_name}={peer}"
    return f"{call.op}(tensor, {peer_name}={peer})"


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


def _rank_list(ranks: Any) -> str:
    ranks = sorted(ranks)
    if len(ranks) > 2 and ranks == list(range(ranks[0], ranks[-1] + 1)):
        return f"{ranks[0]}-{ranks[-1]}"
    return ", ".join(map(str, ranks))


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


def new_figure() -> tuple[Figure, Any]:
    """A blank figure of the fixed size with one axes measured in inches."""
    fig = Figure(figsize=FIGSIZE, dpi=DPI)
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set_xlim(0, FIGSIZE[0])
    ax.set_ylim(0, FIGSIZE[1])
    ax.set_axis_off()
    # Patches go in with add_artist, which skips the data-limit bookkeeping of add_patch: the
    # limits are fixed, and that bookkeeping is most of the drawing time.
    ax.set_autoscale_on(False)
    return fig, ax


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


def render(picture: Picture, layout: str = "auto") -> Figure:
    """Lay out and draw a :class:`Picture` on a new figure of the fixed size."""
    with mpl.rc_context(_STYLE):
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
