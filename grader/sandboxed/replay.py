"""Replaying a test case's trace: the calls a case's ranks say they made, made again by the
grader's own code on fresh ranks, so that the network's count of the two runs can be compared
(:mod:`grader.trusted.evidence`).

A trace is the ranks' word. What gloo puts on the network for a call (its headers, its own
algorithm for each collective, the rendezvous of a new group) is not modelled here: the same
calls are made again, with tensors of the same shapes and dtypes (zeros: values change no byte),
on the same groups, in the same order, and the rank host counts what they move. Calls the trace
lists but the ranks never made, or calls they made and hid, show as a difference.

:func:`program` turns a case's trace into plain steps (in the scoring kernel); :func:`replay`
runs them (in the ranks, as a trusted function: no code of the submission is involved).
"""

from __future__ import annotations

from typing import Any

import torch

from commlab import control

# Calls whose bytes depend on more than the trace keeps (the pickled objects of the *_object
# collectives; each tensor of a coalesced all-reduce), so that they cannot be made again.
NOT_REPLAYED = ("all_gather_object", "gather_object", "scatter_object_list",
                "broadcast_object_list", "send_object_list", "recv_object_list",
                "all_reduce_coalesced", "monitored_barrier")
_ROOTS = {"broadcast": "src", "scatter": "src", "reduce": "dst", "gather": "dst", "send": "dst",
          "isend": "dst", "recv": "src", "irecv": "src"}
_ALIASES = {"all_gather_single": "all_gather_into_tensor", "_all_gather_base":
            "all_gather_into_tensor", "reduce_scatter_single": "reduce_scatter_tensor",
            "_reduce_scatter_base": "reduce_scatter_tensor"}


class NotReplayable(ValueError):
    """A trace that cannot be made again (see :data:`NOT_REPLAYED`)."""


class NotACall(ValueError):
    """A record of the trace that no call of torch.distributed makes: it was written, not
    recorded."""


# The tensors each kind of call records (commlab.trace): a record without them was not made
# by that call.
_NEEDS = {"broadcast": ("tensor",), "all_reduce": ("tensor",), "reduce": ("tensor",),
          "send": ("tensor",), "recv": ("tensor",), "isend": ("tensor",), "irecv": ("tensor",),
          "all_gather": ("tensor_list", "tensor"),
          "all_gather_into_tensor": ("output_tensor", "input_tensor"),
          "gather": ("tensor",), "scatter": ("tensor",),
          "reduce_scatter": ("output", "input_list"),
          "reduce_scatter_tensor": ("output", "input"),
          "all_to_all": ("output_tensor_list", "input_tensor_list"),
          "all_to_all_single": ("output", "input"), "barrier": ()}


def _shape(info: Any) -> Any:
    if isinstance(info, list):
        return [_shape(i) for i in info]
    return (tuple(info.shape), info.dtype)


def program(trace: list[list[Any]], groups: list[list[Any]]) -> list[list[dict]]:
    """Each rank's steps for one case: its group creations and calls, in the order made."""
    steps: list[list[dict]] = []
    for calls, made in zip(trace, groups):
        mine: list[dict] = []
        pending = sorted(made, key=lambda g: g.seq)
        for seq, call in enumerate([*calls, None]):
            while pending and pending[0].seq <= seq:
                group = pending.pop(0)
                mine.append({"op": group.op, "group": list(group.group_ranks)})
            if call is None:
                break
            if call.op in NOT_REPLAYED:
                raise NotReplayable(f"dist.{call.op}")
            op = _ALIASES.get(call.op, call.op)
            if op == "batch_isend_irecv" and not call.ops or op != "batch_isend_irecv" and (
                    op not in _NEEDS or any(name not in call.tensors for name in _NEEDS[op])):
                raise NotACall(f"{call.label} of rank {call.rank}")
            mine.append({"op": op, "group": list(call.group_ranks),
                         "root": call.root, "reduce_op": call.reduce_op,
                         "async_op": call.async_op or call.op in ("isend", "irecv"),
                         "tensors": {name: _shape(info) for name, info in call.tensors.items()},
                         "split_sizes": call.split_sizes,
                         "ops": [(kind, peer, _shape(info)) for kind, peer, info in call.ops]
                         if call.ops else None})
        steps.append(mine)
    return steps


# --- in the ranks ---------------------------------------------------------------------------------

def replay(rank: int, world_size: int, cases: list[list[list[dict]]]) -> None:
    """Make the calls of every case (``cases[k][rank]``: this rank's steps), one window each."""
    import torch.distributed as dist

    groups: dict[tuple[int, ...], Any] = {}
    for number, steps in enumerate(cases):
        made_here = {tuple(s["group"]) for rank_steps in steps for s in rank_steps
                     if s["op"] in ("new_group", "init_process_group")}
        used = sorted({tuple(s["group"]) for rank_steps in steps for s in rank_steps
                       if s["op"] not in ("new_group", "init_process_group") and s["group"]}
                      - made_here - set(groups) - {tuple(range(world_size))})
        for ranks in used:  # made before the case, in the ranks' run too: outside the window
            groups[ranks] = dist.new_group(list(ranks))
        control.barrier(f"{control.WINDOW}case {number}")
        pending: list[Any] = []
        for step in steps[rank]:
            _make(step, rank, world_size, groups, pending)
        for work in pending:
            work.wait()
    control.barrier(f"{control.WINDOW}cases done")


def _tensor(shape: Any) -> Any:
    if isinstance(shape, list):
        return [_tensor(s) for s in shape]
    size, dtype = shape
    return torch.zeros(size, dtype=getattr(torch, dtype))


def _make(step: dict, rank: int, world_size: int, groups: dict, pending: list) -> None:
    import torch.distributed as dist
    import torch.distributed.distributed_c10d as c10d

    op, ranks = step["op"], tuple(step["group"])
    if op == "init_process_group":
        from datetime import timedelta

        dist.init_process_group("gloo", rank=rank, world_size=world_size,
                                timeout=timedelta(seconds=60))
        return
    if op == "new_group":
        groups[ranks] = dist.new_group(list(ranks))
        return
    group = None if not ranks or ranks == tuple(range(world_size)) else groups.get(ranks)
    if op == "batch_isend_irecv":
        ops = [dist.P2POp(getattr(dist, kind), _tensor(shape), peer, group=group)
               for kind, peer, shape in step["ops"]]
        pending.extend(dist.batch_isend_irecv(ops))
        return
    function = getattr(c10d, op)
    kwargs: dict[str, Any] = {name: _tensor(shape) for name, shape in step["tensors"].items()}
    if op in _ROOTS and step["root"] is not None:
        kwargs[_ROOTS[op]] = step["root"]
    if step["reduce_op"] is not None and op != "barrier":
        kwargs["op"] = getattr(dist.ReduceOp, step["reduce_op"])
    if step["split_sizes"]:
        kwargs["input_split_sizes"] = step["split_sizes"]["input"]
        kwargs["output_split_sizes"] = step["split_sizes"]["output"]
    if op in ("send", "recv", "isend", "irecv"):
        function = {"send": dist.isend, "isend": dist.isend, "recv": dist.irecv,
                    "irecv": dist.irecv}[op]
        pending.append(function(kwargs["tensor"], kwargs[_ROOTS[op]], group=group))
        return
    if group is not None:
        kwargs["group"] = group
    if step["async_op"]:
        kwargs["async_op"] = True
        work = function(**kwargs)
        if work is not None:
            pending.append(work)
        return
    function(**kwargs)
