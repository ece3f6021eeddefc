"""Point-to-point messages of a run: each traced send paired with the receive it matched.

Used by the pictures (:mod:`commlab.picture_content`, :mod:`commlab.drawing`,
:mod:`commlab.ring`) and by the wording of hangs (:mod:`commlab.explain`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from .trace import Call, TensorInfo

POINT_TO_POINT = ("send", "recv", "isend", "irecv", "batch_isend_irecv")
_SENDS = ("send", "isend")
_RECVS = ("recv", "irecv")


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
    received: torch.Tensor | None = None
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
                received=recv["after"] if recv else None,
                send=event["call"], recv=recv["call"] if recv else None))
    return messages
