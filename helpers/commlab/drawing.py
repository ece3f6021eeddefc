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

The work is split in three: this module checks the arguments and chooses the call,
:mod:`commlab.picture_content` works out what the call moved, and :mod:`commlab.picture_layout`
lays it out and draws it.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from .errors import DrawError
from .p2p import POINT_TO_POINT, p2p_messages
from .palette import RANK_COLORS
from .picture_content import (
    ALIASES,
    COLLECTIVES,
    Picture,
    calls_made,
    collective_picture,
    known_calls,
    p2p_picture,
    rank_span,
)
from .picture_layout import render
from .trace import VALUE_LIMIT, Call

if TYPE_CHECKING:
    from matplotlib.figure import Figure

LAYOUTS = ("auto", "rows", "columns")
# Every call name that select() lets through.
KNOWN = COLLECTIVES + POINT_TO_POINT + tuple(ALIASES)


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
    picture = _picture_of(result, call, layout)
    if title is not None:
        picture.title = title
    return render(picture, layout)


def _picture_of(result: Any, call: str | int | Call | None, layout: str) -> Picture:
    if layout not in LAYOUTS:
        raise DrawError(f"layout must be one of {', '.join(map(repr, LAYOUTS))}, "
                        f"not {layout!r}.")
    check_result(result)
    op, index = select(result, call)
    if op in POINT_TO_POINT:
        return p2p_picture(result, index)
    return collective_picture(op, matching_calls(result, op, index), result.world_size)


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
            f"There is nothing to draw: this run made {calls_made(result)}. commlab.draw shows "
            f"{known_calls()}; call one of them in the function you pass to commlab.run.")
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
                            f"number {call}; it made: {calls_made(result)}.")
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
        raise DrawError(f"commlab.draw knows {known_calls()}; {op!r} is not one of them.{extra}")
    if not any(c.op == op and c.index == index for calls in result.trace for c in calls):
        raise DrawError(f"This run made no {op} #{index} call; it made: {calls_made(result)}.")
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
        raise DrawError(f"{label} was not made by rank(s) {rank_span(missing)}: every rank of "
                        "the group must make each collective, in the same order. Draw a run "
                        "where all ranks finished.")
    for rank in sorted(calls):
        c = calls[rank]
        if c.error:
            raise DrawError(f"{label} failed on rank {rank} ({c.error}), so nothing moved. "
                            "Fix that error first, then draw the run again.")
        # a functional collective (DTensor's) is async too, but its values were taken when its
        # result was waited for
        if c.async_op and not (c.functional and c.after):
            raise DrawError(f"{label} ran with async_op=True, so the trace has no values from "
                            "after it. Draw a run that calls it with async_op=False.")
    if all(not c.before and not c.after for c in calls.values()):
        raise DrawError(
            f"This run recorded no tensor values for {label} (tensor values were not traced), "
            "so there are no cells to draw. Run it again with tensor values traced (the "
            f"default), on tensors of at most {VALUE_LIMIT} elements.")
    return calls


def p2p_step(result: Any, call: Call) -> int:
    """The step (k-th message of its sender) that a traced send or receive belongs to."""
    for message in p2p_messages(result):
        if call is message.send or call is message.recv:
            return message.step
    raise DrawError(f"{call.label} on rank {call.rank} has no matching send/recv in this run, "
                    "so there is no message to draw.")
