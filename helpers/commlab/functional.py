"""The collectives that DTensor issues, in the trace: torch's *functional* collectives.

DTensor's ``redistribute``, the styles of ``parallelize_module`` and the backward passes of both
call no ``torch.distributed`` collective. They call the functional collectives of
``torch.distributed._functional_collectives`` (imported there as ``funcol``), which return a new
tensor instead of filling one in place: an ``AsyncCollectiveTensor``, waited for when it is first
used. In torch 2.13 (``torch/distributed/tensor/placement_types.py`` and ``_redistribute.py``):

=====================  ==============================  ======================================
placement change       DTensor's method                what it calls
=====================  ==============================  ======================================
Partial -> Replicate   ``Partial._reduce_value``       ``funcol.all_reduce``
Partial -> Shard(d)    ``Shard._reduce_shard_tensor``  ``funcol.reduce_scatter_single``
Shard(d) -> Replicate  ``Shard._to_replicate_tensor``  ``funcol.all_gather_single``
Shard(i) -> Shard(j)   ``shard_dim_alltoall``          on the CPU ``funcol.all_gather_single``
                                                       and a local chunk; on CUDA a C++ op
Replicate -> Shard(d)  ``Shard._replicate_to_shard``   nothing: each rank keeps its chunk
=====================  ==============================  ======================================

:func:`install` wraps those functions (and ``broadcast`` and ``all_to_all_single``) in the
``funcol`` module, where DTensor looks them up at every call, and ``wait_tensor``, through which
every ``AsyncCollectiveTensor`` is waited for. Each call becomes a :class:`commlab.trace.Call`
with ``functional=True``, named after the ``_c10d_functional`` operation it runs, which is also
``torch.distributed``'s name for that collective (``all_reduce``, ``all_gather_into_tensor``,
``reduce_scatter_tensor``, ``all_to_all_single``, ``broadcast``). Its tensors carry the names the
``torch.distributed`` call gives them, so ``commlab.draw`` draws it as it draws that call, and its
bytes follow the same direct-exchange model (:mod:`commlab.trace`). ``started`` is when the call
was made, ``finished`` when its result was first waited for.

Not seen: functional collectives issued from C++ (compiled graphs, DTensor's
``shard_dim_alltoall`` on CUDA) or by calling ``torch.ops._c10d_functional`` directly, as the
autograd backward of a functional collective does.
"""

from __future__ import annotations

import functools
import inspect
import time
from collections.abc import Callable
from typing import Any

import torch

from . import trace as tracing

# What a rule returns: the values the call's tensors hold after it, from its result.
After = Callable[[torch.Tensor], dict[str, Any]]
Rule = Callable[[tracing.Call, dict[str, Any], bool], After]


def install(recorder: tracing.Recorder) -> Callable[[], None]:
    """Wrap the functional collectives DTensor calls so that ``recorder`` records them; return
    an undo function."""
    import torch.distributed._functional_collectives as funcol

    # storage of a result not yet waited for -> (its call, its values afterwards, the result,
    # kept alive so that no other tensor takes its storage meanwhile)
    pending: dict[int, tuple[tracing.Call, After, torch.Tensor]] = {}
    saved: list[tuple[str, Any]] = []
    for name, (op, rule) in _RULES.items():
        original = getattr(funcol, name, None)
        if original is None:
            continue
        saved.append((name, original))
        original = getattr(original, "__commlab_original__", original)
        setattr(funcol, name, _traced(recorder, op, original, rule, pending, funcol))
    wait = funcol.wait_tensor
    saved.append(("wait_tensor", wait))
    funcol.wait_tensor = _traced_wait(recorder, getattr(wait, "__commlab_original__", wait),
                                      pending)

    def undo() -> None:
        for name, value in reversed(saved):
            setattr(funcol, name, value)
        pending.clear()

    return undo


def _traced(recorder: tracing.Recorder, op: str, original: Callable, rule: Rule,
            pending: dict, funcol: Any) -> Callable:
    signature = inspect.signature(original)

    @functools.wraps(original)
    def traced(*args, **kwargs):
        if recorder.busy:
            return original(*args, **kwargs)
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError:
            return original(*args, **kwargs)  # let torch word the error
        bound.apply_defaults()
        arguments = bound.arguments
        call = recorder.add(op, _group_ranks(arguments.get("group"), arguments.get("tag", "")))
        call.functional = True
        after: After = lambda out: {}  # noqa: E731
        try:
            after = rule(call, arguments, recorder.keep_values)
        except Exception:  # noqa: BLE001 - a malformed call: torch's own error is the one to show
            pass
        with recorder.calling(call):
            out = original(*args, **kwargs)
        if isinstance(out, funcol.AsyncCollectiveTensor):
            # issued, not finished: the values are there once someone waits for them
            call.async_op = True
            call.finished = None
            pending[_storage(out.elem)] = (call, after, out.elem)
        elif recorder.keep_values:
            call.after = after(out)
        return out

    traced.__commlab_original__ = original
    return traced


def _traced_wait(recorder: tracing.Recorder, original: Callable, pending: dict) -> Callable:
    @functools.wraps(original)
    def wait_tensor(tensor):
        out = original(tensor)
        entry = pending.pop(_storage(tensor), None)
        if entry is not None:
            call, after, result = entry
            call.finished = time.perf_counter()
            if recorder.keep_values:
                # the whole result, though DTensor may wait for a slice of it (unpadding)
                call.after = after(result)
        return out

    wait_tensor.__commlab_original__ = original
    return wait_tensor


def _storage(tensor: torch.Tensor) -> int:
    """A key shared by a result and its views (DTensor waits for views of what it gathered)."""
    try:
        return tensor.untyped_storage().data_ptr()
    except Exception:  # noqa: BLE001 - a tensor without storage
        return id(tensor)


def _group_ranks(group: Any, tag: str) -> tuple[int, ...]:
    """Global ranks of a functional collective's group: a process group, a list of ranks, a
    1-D mesh, a (mesh, dim) pair or a group's name."""
    import torch.distributed as dist
    import torch.distributed._functional_collectives as funcol
    import torch.distributed.distributed_c10d as c10d

    try:
        if isinstance(group, str):
            return tuple(dist.get_process_group_ranks(c10d._resolve_process_group(group)))
        return tuple(funcol._expand_group(group, tag)[1])
    except Exception:  # noqa: BLE001 - an unknown group: torch's own error is the one to show
        return ()


# --- the byte model, as commlab.trace's for the same collective ----------------------------------

def _copy(tensor: torch.Tensor | None) -> torch.Tensor | None:
    if tensor is None or tensor.numel() > tracing.VALUE_LIMIT:
        return None
    return tensor.detach().to("cpu", copy=True)


def _info(shape: tuple[int, ...], like: torch.Tensor) -> tracing.TensorInfo:
    """The TensorInfo of a tensor of ``shape`` with ``like``'s dtype and device."""
    numel = 1
    for size in shape:
        numel *= size
    return tracing.TensorInfo(tuple(shape), str(like.dtype).replace("torch.", ""),
                              str(like.device), numel * like.element_size())


def _size(call: tracing.Call) -> int:
    return len(call.group_ranks) or 1


def _reduce_op(call: tracing.Call, arguments: dict[str, Any]) -> None:
    call.reduce_op = str(arguments["reduceOp"]).upper()


def _all_reduce(call: tracing.Call, arguments: dict[str, Any], keep: bool) -> After:
    tensor = arguments["self"]
    call.tensors = {"tensor": tracing.TensorInfo.of(tensor)}
    _reduce_op(call, arguments)
    tracing._everyone_both_ways(call, tracing._nbytes(tensor))
    if keep:
        call.before = {"tensor": _copy(tensor)}
    return lambda out: {"tensor": _copy(out)}


def _all_gather(call: tracing.Call, arguments: dict[str, Any], keep: bool) -> After:
    tensor, n, dim = arguments["self"], _size(call), arguments["gather_dim"]
    shape = (n * tensor.shape[0], *tensor.shape[1:]) if tensor.dim() else (n,)
    call.tensors = {"output_tensor": _info(shape, tensor),
                    "input_tensor": tracing.TensorInfo.of(tensor)}
    tracing._everyone_both_ways(call, tracing._nbytes(tensor))
    given = _copy(tensor) if keep else None
    if keep:
        call.before = {"input_tensor": given}

    def after(out: torch.Tensor) -> dict[str, Any]:
        # the rows in the order the ranks sent them, as all_gather_into_tensor lays them out
        # (for gather_dim != 0, funcol hands back those blocks side by side along gather_dim)
        if dim % max(out.dim(), 1) != 0 and out.numel() <= tracing.VALUE_LIMIT:
            out = torch.cat(torch.chunk(out, n, dim=dim), dim=0)
        return {"output_tensor": _copy(out), "input_tensor": given}
    return after


def _reduce_scatter(call: tracing.Call, arguments: dict[str, Any], keep: bool) -> After:
    tensor, n, dim = arguments["self"], _size(call), arguments["scatter_dim"]
    _reduce_op(call, arguments)
    output = list(tensor.shape)
    output[dim] //= n
    # funcol moves the n blocks of scatter_dim one under the other (dimension 0) first: that is
    # the input the collective gets, block i for rank i
    call.tensors = {"output": _info(tuple(output), tensor),
                    "input": _info((output[0] * n, *output[1:]), tensor)}
    tracing._everyone_both_ways(call, call.tensors["output"].nbytes)
    if keep:
        given = tensor
        if dim % tensor.dim() != 0:
            given = (torch.cat(torch.chunk(tensor, n, dim=dim), dim=0)
                     if tensor.numel() <= tracing.VALUE_LIMIT else None)
        call.before = {"input": _copy(given)}
    return lambda out: {"output": _copy(out)}


def _all_to_all(call: tracing.Call, arguments: dict[str, Any], keep: bool) -> After:
    tensor, n = arguments["self"], _size(call)
    out_splits = tracing._split_sizes(tensor, arguments.get("output_split_sizes"), n)
    in_splits = tracing._split_sizes(tensor, arguments.get("input_split_sizes"), n)
    call.split_sizes = {"input": in_splits, "output": out_splits}
    call.tensors = {"output": _info((sum(out_splits), *tensor.shape[1:]), tensor),
                    "input": tracing.TensorInfo.of(tensor)}
    row = tracing._row_bytes(tensor)
    call.sent_to = tracing._each(call, lambda i: in_splits[i] * row)
    call.received_from = tracing._each(call, lambda i: out_splits[i] * row)
    if keep:
        call.before = {"input": _copy(tensor)}
    return lambda out: {"output": _copy(out)}


def _broadcast(call: tracing.Call, arguments: dict[str, Any], keep: bool) -> After:
    tensor = arguments["self"]
    call.tensors = {"tensor": tracing.TensorInfo.of(tensor)}
    # funcol's src is a rank of the group
    call.root = tracing._global(call.group_ranks, arguments["src"])
    size = tracing._nbytes(tensor)
    if call.rank == call.root:
        call.sent_to = dict.fromkeys(tracing._others(call), size)
    else:
        call.received_from = {call.root: size}
    if keep:
        call.before = {"tensor": _copy(tensor)}
    return lambda out: {"tensor": _copy(out)}


# funcol's function -> (the operation it runs, as the trace names it; its rule)
_RULES: dict[str, tuple[str, Rule]] = {
    "all_reduce": ("all_reduce", _all_reduce),
    "all_gather_single": ("all_gather_into_tensor", _all_gather),
    "reduce_scatter_single": ("reduce_scatter_tensor", _reduce_scatter),
    "all_to_all_single": ("all_to_all_single", _all_to_all),
    "broadcast": ("broadcast", _broadcast),
}
