"""Pipeline schedules in a run: what each stage ran in which order, the messages it sent and
received, the same order on a clock of ticks, and its bubble.

A pipeline stage runs a *forward step* and a *backward step* per micro-batch. Inside a rank,
the steps record ``with span("forward"):`` and ``with span("backward"):`` (commlab.timeline);
:func:`order_of` reads those spans back as ``[("F", 0), ("F", 1), ("B", 0), ...]``: GPipe and
1F1B both run the forward steps, and the backward steps, in micro-batch order 0, 1, 2, ...

- :func:`replay` puts every rank's order on a clock where a forward step takes ``forward``
  ticks and a backward step ``backward`` ticks, and each step starts as soon as its rank is free
  and its input is there; :func:`bubble` is the share of that time the ranks sit idle, and
  :func:`draw_pipeline` draws it (or the real times of :func:`from_spans`).
- :func:`messages` reads a rank's trace as the pipeline's messages (``"send F0 to 1"``,
  ``"recv B0 from 1"``); :func:`expected_messages` says which messages an order needs between
  its steps, and :func:`expect_schedule` checks a run against both, for test cells.

What a stage holds for its backward pass, and a layer that only takes time, are in
:mod:`commlab.activations`.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from .timeline import Span
    from .trace import Call

KINDS = {"forward": "F", "backward": "B"}
FORWARD_COLOR, BACKWARD_COLOR = "#88CCEE", "#44AA99"  # Paul Tol's cyan and teal
IDLE_COLOR = "#BBBBBB"


@dataclasses.dataclass(frozen=True)
class Step:
    """One forward (``"F"``) or backward (``"B"``) step of a micro-batch on one stage, and when
    it ran (in ticks for :func:`replay`, in milliseconds for :func:`from_spans`)."""

    kind: str
    microbatch: int
    started: float
    finished: float

    def __repr__(self) -> str:
        return f"{self.kind}{self.microbatch}"


# --- the order of the steps ------------------------------------------------------------------

def order_of(spans: list[Span]) -> list[tuple[str, int]]:
    """A rank's forward and backward steps, in the order it ran them.

    Args:
        spans: what the rank returned from ``timeline.spans()``; spans labelled ``"forward"``
            and ``"backward"`` are the steps, any other label is left out.

    Returns:
        ``[("F", 0), ("F", 1), ("B", 0), ...]``: the n-th forward span is micro-batch n, and so
        is the n-th backward span.
    """
    counts = {"F": 0, "B": 0}
    order = []
    for item in spans:
        kind = KINDS.get(item.label)
        if kind is not None:
            order.append((kind, counts[kind]))
            counts[kind] += 1
    return order


def held_by_order(order: list[tuple[str, int]]) -> int:
    """The most micro-batches between their forward and their backward step at any time."""
    held = most = 0
    for kind, _ in order:
        held += 1 if kind == "F" else -1
        most = max(most, held)
    return most


def _needs(rank: int, world_size: int, kind: str, microbatch: int) -> tuple[int, str, int] | None:
    """The step on another rank whose result this step receives, as (rank, kind, micro-batch)."""
    if kind == "F":
        return (rank - 1, "F", microbatch) if rank > 0 else None
    return (rank + 1, "B", microbatch) if rank < world_size - 1 else None


def _inputs(rank: int, world_size: int, kind: str, microbatch: int) -> list[tuple[int, str, int]]:
    """Every step whose result this step waits for: the neighbour's (:func:`_needs`) and, for a
    backward step, the rank's own forward step of the same micro-batch."""
    own_forward = (rank, "F", microbatch) if kind == "B" else None
    return [n for n in (_needs(rank, world_size, kind, microbatch), own_forward) if n is not None]


def _describe(step: tuple[int, str, int]) -> str:
    rank, kind, microbatch = step
    return f"rank {rank}'s {kind}{microbatch}"


def _steps_to_run(orders: list[list[tuple[str, int]]]) -> dict[tuple[int, str, int], float]:
    """Every step of ``orders`` as ``(rank, kind, micro-batch)``, none finished yet (-1).

    Raises:
        ValueError: a step that is neither ``"F"`` nor ``"B"``, a step a rank runs twice, or a
            step that needs one no rank runs.
    """
    world_size = len(orders)
    finished: dict[tuple[int, str, int], float] = {}
    for rank, order in enumerate(orders):
        for kind, microbatch in order:
            if kind not in ("F", "B"):
                raise ValueError(f"rank {rank}'s order has the step {(kind, microbatch)!r}; "
                                 "steps are ('F', micro-batch) or ('B', micro-batch).")
            if (rank, kind, microbatch) in finished:
                raise ValueError(f"rank {rank} runs {kind}{microbatch} twice.")
            finished[(rank, kind, microbatch)] = -1.0
    for rank, order in enumerate(orders):
        for kind, microbatch in order:
            for need in _inputs(rank, world_size, kind, microbatch):
                if need not in finished:
                    raise ValueError(f"rank {rank}'s {kind}{microbatch} needs "
                                     f"{_describe(need)}, which is not in that rank's order.")
    return finished


def _run_ready_steps(orders: list[list[tuple[str, int]]],
                     finished: dict[tuple[int, str, int], float], timed: list[list[Step]],
                     forward: float, backward: float) -> bool:
    """One pass over the ranks: each runs its next steps for as long as their inputs are there,
    each as soon as its rank is free and its inputs have arrived. Returns whether any step ran."""
    progress = False
    for rank, order in enumerate(orders):
        while len(timed[rank]) < len(order):
            kind, microbatch = order[len(timed[rank])]
            needs = _inputs(rank, len(orders), kind, microbatch)
            if any(finished[n] < 0 for n in needs):
                break
            free = timed[rank][-1].finished if timed[rank] else 0.0
            start = max([free] + [finished[n] for n in needs])
            end = start + (forward if kind == "F" else backward)
            finished[(rank, kind, microbatch)] = end
            timed[rank].append(Step(kind, microbatch, start, end))
            progress = True
    return progress


def _deadlock(orders: list[list[tuple[str, int]]], finished: dict[tuple[int, str, int], float],
              timed: list[list[Step]]) -> str:
    """Why the ranks that could not finish their orders wait forever: the first missing input
    of each one's next step."""
    waits = []
    for rank, order in enumerate(orders):
        if len(timed[rank]) < len(order):
            kind, microbatch = order[len(timed[rank])]
            need = next(n for n in _inputs(rank, len(orders), kind, microbatch)
                        if finished[n] < 0)
            waits.append(f"rank {rank}'s {kind}{microbatch} waits for {_describe(need)}")
    return "These orders cannot run, the ranks wait for each other forever: " + "; ".join(
        waits) + "."


def replay(orders: list[list[tuple[str, int]]], forward: float = 1.0,
           backward: float = 2.0) -> list[list[Step]]:
    """Each rank's steps, in its order, on a clock of ticks.

    A step starts once its rank has finished the step before it and its input is there: the
    forward step of micro-batch i on rank r needs rank r-1's forward step of i, the backward
    step needs rank r+1's backward step of i (the last rank's, its own forward step of i).
    Messages take no time and never hold up the sender, so the clock shows the schedule, not
    the machine it ran on.

    Args:
        orders: per rank, its steps as :func:`order_of` gives them.
        forward, backward: ticks a forward and a backward step take (a backward step computes
            gradients for the inputs and for the weights: about twice a forward step's work).

    Returns:
        Per rank, a :class:`Step` per entry of its order, with its start and end in ticks.

    Raises:
        ValueError: an order that cannot run: a step that needs a step no rank runs, or ranks
            that wait for each other forever.
    """
    finished = _steps_to_run(orders)
    timed: list[list[Step]] = [[] for _ in orders]
    while _run_ready_steps(orders, finished, timed, forward, backward):
        pass
    if any(len(steps) < len(order) for steps, order in zip(timed, orders)):
        raise ValueError(_deadlock(orders, finished, timed))
    return timed


def from_spans(spans_per_rank: list[list[Span]]) -> list[list[Step]]:
    """Each rank's steps as they ran, in milliseconds since the first step of any rank."""
    steps = [[item for item in rank_spans if item.label in KINDS] for rank_spans in spans_per_rank]
    starts = [item.started for rank_steps in steps for item in rank_steps]
    origin = min(starts) if starts else 0.0
    timed = []
    for rank_steps, rank_spans in zip(steps, spans_per_rank):
        order = order_of(rank_spans)
        timed.append([Step(kind, microbatch, (item.started - origin) * 1e3,
                           (item.finished - origin) * 1e3)
                      for (kind, microbatch), item in zip(order, rank_steps)])
    return timed


def bubble(timed: list[list[Step]]) -> float:
    """The share of the time, from the first step of any rank to the last, that the ranks spend
    outside their steps (idle, or waiting for a message): the pipeline's bubble."""
    steps = [step for rank_steps in timed for step in rank_steps]
    if not steps:
        return 0.0
    span = max(s.finished for s in steps) - min(s.started for s in steps)
    busy = sum(s.finished - s.started for s in steps)
    return 1.0 - busy / (len(timed) * span) if span > 0 else 0.0


# --- messages ----------------------------------------------------------------------------------

def _message_events(calls: list[Call], rank: int) -> list[tuple[float, str]]:
    """(when the call started, the message's name) for each point-to-point message of a rank."""
    counts: dict[tuple[str, str], int] = {}
    out: list[tuple[float, str]] = []

    def add(started: float, direction: str, peer: int | None) -> None:
        if direction == "send":
            kind, preposition = {rank + 1: "F", rank - 1: "B"}.get(peer), "to"
        else:
            kind, preposition = {rank - 1: "F", rank + 1: "B"}.get(peer), "from"
        if kind is None:
            out.append((started, f"{direction} {preposition} {peer}"))
            return
        number = counts.get((direction, kind), 0)
        counts[(direction, kind)] = number + 1
        out.append((started, f"{direction} {kind}{number} {preposition} {peer}"))

    for call in calls:
        if call.op in ("send", "isend"):
            add(call.started, "send", call.root)
        elif call.op in ("recv", "irecv"):
            add(call.started, "recv", call.root)
        elif call.op == "batch_isend_irecv":
            for kind, peer, _ in sorted(call.ops or [], key=lambda op: op[0] != "isend"):
                add(call.started, "send" if kind == "isend" else "recv", peer)
    return out


def messages(calls: list[Call], rank: int) -> list[str]:
    """A rank's point-to-point messages, in the order it started them, named for the pipeline.

    A message from rank r-1 or to rank r+1 carries activations (``F``), one to rank r-1 or from
    rank r+1 a gradient (``B``); each is numbered by its micro-batch, counting the messages of
    its kind: ``"recv F0 from 0"``, ``"send F0 to 2"``, ``"recv B0 from 2"``, ``"send B0 to 0"``.
    Inside one ``batch_isend_irecv`` the sends come first (a batch starts them all together).
    A message to or from any other rank is named ``"send to 3"``.

    Args:
        calls: the rank's traced calls (``result.trace[rank]``).
        rank: the rank.
    """
    return [text for _, text in _message_events(calls, rank)]


def expected_messages(order: list[tuple[str, int]], rank: int,
                      world_size: int) -> list[list[str]]:
    """The messages a rank starts around its steps when it runs ``order``: one list per gap,
    before its first step, between two steps, after its last step.

    Before a step comes the receive of its input (a forward step's activations from rank r-1,
    a backward step's gradient from rank r+1); after it, the send of its result (to rank r+1,
    or to rank r-1). So the gap between two steps holds the send of the one and the receive of
    the other. The first rank receives no activations, the last no gradient.
    """
    gaps: list[list[str]] = [[] for _ in range(len(order) + 1)]
    for k, (kind, microbatch) in enumerate(order):
        if kind == "F":
            if rank > 0:
                gaps[k].append(f"recv F{microbatch} from {rank - 1}")
            if rank < world_size - 1:
                gaps[k + 1].append(f"send F{microbatch} to {rank + 1}")
        else:
            if rank < world_size - 1:
                gaps[k].append(f"recv B{microbatch} from {rank + 1}")
            if rank > 0:
                gaps[k + 1].append(f"send B{microbatch} to {rank - 1}")
    return gaps


def messages_by_gap(calls: list[Call], spans: list[Span], rank: int) -> list[list[str]]:
    """A rank's messages (:func:`messages`) grouped by the gap between its steps in which it
    started them: the list ``k`` holds those started after its ``k``-th step and before the next
    (list 0: before the first step)."""
    starts = [item.started for item in spans if item.label in KINDS]
    gaps: list[list[str]] = [[] for _ in range(len(starts) + 1)]
    for started, text in _message_events(calls, rank):
        gaps[sum(1 for s in starts if s < started)].append(text)
    return gaps


def gap_name(order: list[tuple[str, int]], k: int) -> str:
    """``"before F0"``, ``"between F3 and B0"``, ``"after B7"``: where gap ``k`` lies."""
    steps = [f"{kind}{microbatch}" for kind, microbatch in order]
    if not steps:
        return "in the whole step"
    if k == 0:
        return f"before {steps[0]}"
    if k >= len(steps):
        return f"after {steps[-1]}"
    return f"between {steps[k - 1]} and {steps[k]}"


def _steps_up_to(steps: list[tuple[str, int]], k: int, before: int = 3) -> str:
    """``"... F1 F2 F3 B0"``: the steps from ``before`` steps ahead of step ``k`` to step ``k``."""
    start = max(0, k - before)
    shown = " ".join(f"{kind}{microbatch}" for kind, microbatch in steps[start:k + 1])
    return ("... " if start else "") + (shown or "(no step)")


def expect_schedule(result: Any, spans_per_rank: list[list[Span]],
                    orders: list[list[tuple[str, int]]], schedule: str) -> None:
    """Check a run against a schedule: each rank ran its forward and backward steps in the
    order ``orders`` gives, and started, in every gap between two steps, exactly the messages
    the schedule needs there (in any order; see :func:`expected_messages`).

    Args:
        result: the run (a ``commlab.checks`` case result names its case in the message).
        spans_per_rank: each rank's spans, whose ``"forward"`` and ``"backward"`` spans are its
            steps.
        orders: each rank's steps as the schedule orders them.
        schedule: the order's name in the message, e.g. ``"the 1F1B order"`` or ``"this
            chapter's GPipe order"`` (where other orders are valid too).

    Raises:
        commlab.checks.CheckFailed: the first rank whose steps or messages differ, with what
            was expected and what happened, around the first difference.
    """
    from .checks import CheckFailed, case_context, context_words

    where = context_words(result.world_size, case_context(result, {}))
    for rank, (rank_spans, order) in enumerate(zip(spans_per_rank, orders)):
        ran = order_of(rank_spans)
        if ran != order:
            k = next((i for i, (a, b) in enumerate(zip(ran, order)) if a != b),
                     min(len(ran), len(order)))
            raise CheckFailed(
                f"On rank {rank}{where}, the forward and backward steps (forward_step and "
                f"backward_step, in the order they ran) should follow {schedule}:"
                f"\n    {_steps_up_to(order, k)}\nbut they are\n    {_steps_up_to(ran, k)}\n"
                f"(F3 is micro-batch 3's forward step, B3 its backward step; step {k + 1} is "
                "the first that differs.)")
        got = messages_by_gap(result.trace[rank], rank_spans, rank)
        want = expected_messages(order, rank, result.world_size)
        for k, (g, w) in enumerate(zip(got, want)):
            if sorted(g) != sorted(w):
                raise CheckFailed(
                    f"On rank {rank}{where}, {gap_name(order, k)} your code should start "
                    f"these messages ({schedule}):\n    {', '.join(w) or 'none'}\nbut it "
                    f"started\n    {', '.join(g) or 'none'}\n(F3 is micro-batch 3's "
                    "activations, B3 its gradient, counted in the order your code sent or "
                    "received them; the order inside one gap does not matter.)")


# --- the picture -------------------------------------------------------------------------------

def draw_pipeline(timed: list[list[Step]], title: str | None = None,
                  unit: str = "ticks") -> Figure:
    """Draw each rank's steps on one time axis, numbered by micro-batch.

    Args:
        timed: per rank, its steps with times (:func:`replay` or :func:`from_spans`).
        title: the figure's title.
        unit: the time axis' unit, for its label (``"ticks"`` or ``"milliseconds"``).

    Returns:
        A figure with one lane per rank (stage): forward steps in light blue, backward steps in
        teal, each numbered by its micro-batch; grey where the rank is idle (the bubble), whose
        share of the time the subtitle gives.
    """
    from matplotlib.patches import Patch

    from .figure_parts import RunFigure, fit_text

    world_size = len(timed)
    end = max([s.finished for rank_steps in timed for s in rank_steps] + [1e-9])
    start = min([s.started for rank_steps in timed for s in rank_steps] + [0.0])
    height = 1.9 + 0.55 * world_size
    fig = RunFigure(figsize=(11, height), dpi=100)
    ax = fig.add_axes((0.1, 0.6 / height, 0.87, 1 - 1.55 / height))
    ax.set_xlim(start, end)
    ax.set_ylim(world_size - 0.5, -0.5)
    inches_per_unit = 0.87 * 11 / (end - start)
    for rank, rank_steps in enumerate(timed):
        ax.barh(rank, end - start, left=start, height=0.7, color=IDLE_COLOR, alpha=0.35,
                edgecolor="none")
        for step in rank_steps:
            width = step.finished - step.started
            face = FORWARD_COLOR if step.kind == "F" else BACKWARD_COLOR
            ax.barh(rank, width, left=step.started, height=0.7, color=face, edgecolor="white",
                    linewidth=1.0)
            size = fit_text(str(step.microbatch), width * inches_per_unit * 0.85, 10.0)
            if size:
                ax.text(step.started + width / 2, rank, str(step.microbatch), ha="center",
                        va="center", fontsize=size, color="#222222")
    ax.set_yticks(range(world_size), [f"rank {r}\n(stage {r})" for r in range(world_size)])
    ax.set_xlabel("ticks (a forward step takes 1, a backward step 2)" if unit == "ticks"
                  else f"{unit} since the first step")
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    handles = [Patch(facecolor=FORWARD_COLOR, label="forward step (micro-batch number)"),
               Patch(facecolor=BACKWARD_COLOR, label="backward step"),
               Patch(facecolor=IDLE_COLOR, alpha=0.35, label="idle: the bubble")]
    ax.legend(handles=handles, loc="lower left", bbox_to_anchor=(0, 1.0), fontsize=9,
              ncol=3, frameon=False)
    fig.suptitle(title or "Pipeline schedule", fontsize=12, y=1 - 0.12 / height)
    fig.text(0.5, 1 - 0.42 / height, f"the ranks are idle {bubble(timed):.0%} of the time",
             ha="center", fontsize=10, color="#444444")
    return fig
