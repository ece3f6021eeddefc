"""What a picture of a traced call holds, and how it is worked out from the trace.

A :class:`Picture` says, before any geometry, what each rank held before and after a call
(:class:`Panel` of :class:`Piece`), which rank every element came from (:class:`Segment`), and
which data travelled where (:class:`Arrow`). :func:`collective_picture` derives it from a
collective's semantics, :func:`p2p_picture` from the sends and receives paired by
:func:`commlab.p2p.p2p_messages`. Nothing here draws: :mod:`commlab.picture_layout` turns a picture
into a figure, and this module does not import matplotlib.

Over 400 lines: one small function per collective, kept together so their data movements
read side by side.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import torch

from .errors import DrawError
from .p2p import POINT_TO_POINT, p2p_messages
from .trace import Call, TensorInfo

# Tensors with more elements than this are drawn as one box naming dtype and shape: beyond it the
# printed values become too small to read at 8 ranks.
MAX_CELLS = 64

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
    """Everything :func:`~commlab.picture_layout.render` draws, before any geometry."""

    world_size: int
    title: str
    subtitle: str
    before: dict[int, Panel]
    after: dict[int, Panel]
    arrows: list[Arrow]
    roles: dict[int, str] = dataclasses.field(default_factory=dict)
    combined_label: str = ""
    reduce_op: str = ""


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


def _segments_by_split(sizes: list[int], shape: tuple[int, ...],
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


@dataclasses.dataclass
class _Movement:
    """One collective call across its group, and the picture's parts as they are worked out."""

    calls: dict[int, Call]
    group: tuple[int, ...]
    root: int | None
    reduce_op: str
    before: dict[int, Panel] = dataclasses.field(default_factory=dict)
    after: dict[int, Panel] = dataclasses.field(default_factory=dict)
    arrows: list[Arrow] = dataclasses.field(default_factory=list)
    roles: dict[int, str] = dataclasses.field(default_factory=dict)
    combined_label: str = ""

    @property
    def pos(self) -> dict[int, int]:
        """Global rank -> its position in the group."""
        return {r: i for i, r in enumerate(self.group)}

    def combined(self) -> None:
        self.combined_label = f"{self.reduce_op} of ranks {rank_span(self.group)}"


# One function per collective: fill in the panels and arrows, return the subtitle.

def _broadcast(m: _Movement) -> str:
    m.roles[m.root] = "src"
    for r in m.group:
        m.before[r] = panel_of(m.calls[r], "tensor", "before", _whole(r))
        m.after[r] = panel_of(m.calls[r], "tensor", "after", _whole(m.root))
        m.arrows.append(Arrow(m.root, 0, 0, r, 0, 0))
    return f"rank {m.root}'s tensor is copied into the tensor of every other rank"


def _scatter(m: _Movement) -> str:
    m.roles[m.root] = "src"
    for r in m.group:
        m.before[r] = (panel_of(m.calls[r], "scatter_list", "before", _whole(m.root))
                       if r == m.root else Panel("scatter_list", note="no scatter_list:\n"
                                                 "only receives"))
        m.after[r] = panel_of(m.calls[r], "tensor", "after", _whole(m.root))
        m.arrows.append(Arrow(m.root, m.pos[r], 0, r, 0, 0))
    return f"rank {m.root} sends scatter_list[i] to rank i, which receives it in tensor"


def _gather(m: _Movement) -> str:
    m.roles[m.root] = "dst"
    for r in m.group:
        m.before[r] = panel_of(m.calls[r], "tensor", "before", _whole(r))
        m.after[r] = (panel_of(m.calls[r], "gather_list", "after", _by_item(m.group))
                      if r == m.root else Panel("gather_list", note="no gather_list:\n"
                                                "only sends"))
        m.arrows.append(Arrow(r, 0, 0, m.root, m.pos[r], 0))
    return f"each rank's tensor lands in gather_list[rank] on rank {m.root}"


def _each_to_each(m: _Movement, given: str, given_segments: Callable[[int], SegmentsFor],
                  got: str, got_segments: Callable[[int], SegmentsFor],
                  arrow: Callable[[int, int], Arrow]) -> None:
    """Collectives where every rank sends to every rank: rank r's ``given`` tensor(s) before,
    its ``got`` tensor(s) after, and one arrow from r to each rank j."""
    for r in m.group:
        m.before[r] = panel_of(m.calls[r], given, "before", given_segments(r))
        m.after[r] = panel_of(m.calls[r], got, "after", got_segments(r))
        m.arrows += [arrow(r, j) for j in m.group]


def _all_gather(m: _Movement) -> str:
    _each_to_each(m, "tensor", _whole, "tensor_list", lambda r: _by_item(m.group),
                  lambda r, j: Arrow(r, 0, 0, j, m.pos[r], 0))
    return "each rank's tensor lands in tensor_list[rank] on every rank"


def _all_gather_into_tensor(m: _Movement) -> str:
    blocks = _equal_parts(len(m.group), lambda k: (m.group[k],) if k >= 0 else ())
    _each_to_each(m, "input_tensor", _whole, "output_tensor", lambda r: blocks,
                  lambda r, j: Arrow(r, 0, 0, j, 0, m.pos[r]))
    return "each rank's input_tensor fills block [rank] of output_tensor on every rank"


def _reduce(m: _Movement) -> str:
    m.roles[m.root] = "dst"
    m.combined()
    for r in m.group:
        m.before[r] = panel_of(m.calls[r], "tensor", "before", _whole(r))
        if r == m.root:
            m.after[r] = panel_of(m.calls[r], "tensor", "after", _whole(*m.group))
        else:
            # torch leaves the other ranks' tensors unspecified; gloo uses them as scratch
            unchanged = _unchanged(m.calls[r], "tensor")
            m.after[r] = panel_of(m.calls[r], "tensor", "after",
                                  _whole(r) if unchanged else _whole())
            if not unchanged:
                m.after[r].note = f"left-over values:\nonly rank {m.root}'s tensor is the result"
        m.arrows.append(Arrow(r, 0, 0, m.root, 0, 0))
    return (f"the tensors of all ranks are combined with {m.reduce_op} into rank {m.root}'s "
            "tensor")


def _all_reduce(m: _Movement) -> str:
    m.combined()
    _each_to_each(m, "tensor", _whole, "tensor", lambda r: _whole(*m.group),
                  lambda r, j: Arrow(r, 0, 0, j, 0, 0))
    return (f"the tensors of all ranks are combined with {m.reduce_op}, and every rank gets "
            "the result")


def _reduce_scatter(m: _Movement) -> str:
    m.combined()
    _each_to_each(m, "input_list", _whole, "output", lambda r: _whole(*m.group),
                  lambda r, j: Arrow(r, m.pos[j], 0, j, 0, 0))
    return f"rank i gets the {m.reduce_op} of input_list[i] over all ranks"


def _reduce_scatter_tensor(m: _Movement) -> str:
    m.combined()
    n = len(m.group)
    _each_to_each(m, "input", lambda r: _equal_parts(n, lambda k: (r,)),
                  "output", lambda r: _whole(*m.group),
                  lambda r, j: Arrow(r, 0, m.pos[j], j, 0, 0))
    return f"rank i gets the {m.reduce_op} of block [i] of input over all ranks"


def _all_to_all(m: _Movement) -> str:
    _each_to_each(m, "input_tensor_list", _whole, "output_tensor_list",
                  lambda r: _by_item(m.group), lambda r, j: Arrow(r, m.pos[j], 0, j, m.pos[r], 0))
    return "input_tensor_list[j] of rank i lands in output_tensor_list[i] of rank j"


def _all_to_all_single(m: _Movement) -> str:
    sizes = {r: _split_sizes(m.calls[r], len(m.group)) for r in m.group}
    for r in m.group:
        in_info = m.calls[r].tensors.get("input")
        out_info = m.calls[r].tensors.get("output")
        m.before[r] = panel_of(m.calls[r], "input", "before",
                               _segments_by_split(sizes[r]["input"], in_info.shape,
                                                  lambda k, r=r: (r,)))
        m.after[r] = panel_of(m.calls[r], "output", "after",
                              _segments_by_split(sizes[r]["output"], out_info.shape,
                                                 lambda k: (m.group[k],)))
    for r in m.group:
        m.arrows += [Arrow(r, 0, m.pos[j], j, 0, m.pos[r]) for j in m.group
                     if sizes[r]["input"][m.pos[j]]]
    subtitle = "split j of rank i's input lands as split i of rank j's output"
    if any(len(set(s["input"])) > 1 or len(set(s["output"])) > 1 for s in sizes.values()):
        subtitle += " (uneven splits)"
    return subtitle


_MOVEMENTS: dict[str, Callable[[_Movement], str]] = {
    "broadcast": _broadcast,
    "scatter": _scatter,
    "gather": _gather,
    "all_gather": _all_gather,
    "all_gather_into_tensor": _all_gather_into_tensor,
    "reduce": _reduce,
    "all_reduce": _all_reduce,
    "reduce_scatter": _reduce_scatter,
    "reduce_scatter_tensor": _reduce_scatter_tensor,
    "all_to_all": _all_to_all,
    "all_to_all_single": _all_to_all_single,
}


def collective_picture(op: str, calls: dict[int, Call], world_size: int) -> Picture:
    """Work out, from the call's semantics, where every output element came from."""
    first = calls[min(calls)]
    kind = ALIASES.get(op, op)
    if kind not in _MOVEMENTS:  # select() lets only known ops through; this guards additions
        raise DrawError(f"commlab.draw knows {known_calls()}; {op!r} is not one of them.")
    m = _Movement(calls, first.group_ranks or tuple(range(world_size)), first.root,
                  first.reduce_op or "SUM")
    subtitle = _MOVEMENTS[kind](m)
    # Drop arrows whose ends the trace could not describe (a malformed or partial call).
    arrows = [a for a in m.arrows if _has_segment(m.before, a.src, a.src_piece, a.src_segment)
              and _has_segment(m.after, a.dst, a.dst_piece, a.dst_segment)]
    return Picture(world_size, _title(op, kind, first, m, subtitle), subtitle, m.before,
                   m.after, arrows, m.roles, m.combined_label, m.reduce_op)


def _title(op: str, kind: str, first: Call, m: _Movement, subtitle: str) -> str:
    """The call as the code wrote it: ``dist.reduce(tensor, dst=0, op=SUM)``."""
    arguments = list(_SIGNATURES[kind])
    if "split_sizes" in subtitle or "uneven" in subtitle:
        arguments += ["output_split_sizes", "input_split_sizes"]
    arguments += [f"{role}={rank}" for rank, role in m.roles.items()]
    if m.combined_label:
        arguments.append(f"op={m.reduce_op}")
    title = f"dist.{op}({', '.join(arguments)})"
    if first.index > 1:
        title += f"  (call #{first.index})"
    return title


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


def p2p_picture(result: Any, step: int) -> Picture:
    """The ``step``-th message each rank sent, with the matching receives."""
    messages = p2p_messages(result)
    if not messages:
        raise DrawError(f"This run sent no point-to-point messages; it made: {calls_made(result)}.")
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


# --- wording of titles and messages ---------------------------------------------------------------

def _p2p_call(call: Call | None, peer_name: str, peer: int) -> str:
    """How the code made this end of a message: ``send(tensor, dst=1)``."""
    if call is None:
        return f"{'receives from' if peer_name == 'src' else 'sends to'} rank {peer}"
    if call.op == "batch_isend_irecv":
        kind = "isend" if peer_name == "dst" else "irecv"
        return f"batch_isend_irecv: {kind} {peer_name}={peer}"
    return f"{call.op}(tensor, {peer_name}={peer})"


def rank_span(ranks: Any) -> str:
    """``[0, 1, 2, 3]`` -> ``"0-3"``, else the ranks with commas (for figure labels)."""
    ranks = sorted(ranks)
    if len(ranks) > 2 and ranks == list(range(ranks[0], ranks[-1] + 1)):
        return f"{ranks[0]}-{ranks[-1]}"
    return ", ".join(map(str, ranks))


def known_calls() -> str:
    return ", ".join(COLLECTIVES + ("send/recv", "isend/irecv", "batch_isend_irecv"))


def calls_made(result: Any) -> str:
    """The labels of every call the run made, in order: ``"all_reduce #1, barrier #1"``."""
    labels: list[str] = []
    for calls in result.trace:
        for c in calls:
            if c.label not in labels:
                labels.append(c.label)
    return ", ".join(labels) if labels else "no torch.distributed calls at all"
