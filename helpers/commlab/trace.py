"""Record every ``torch.distributed`` call a rank makes, without changing the student's code.

Inside a worker, :func:`install` replaces the public collective and point-to-point functions of
``torch.distributed`` (and of ``torch.distributed.distributed_c10d``, where they are defined) with
thin wrappers. The wrappers are installed *before* the student's function is unpickled, so a
function that refers to ``dist.all_reduce`` or imported ``all_reduce`` by name finds the wrapper.

Each call becomes a :class:`Call`: the operation, the tensors it was given, the bytes this rank
sent to and received from each peer, the root, the reduce op and the time it took. Bytes are
those of a *direct* exchange, where every piece of data travels once from the rank that has it to
each rank that needs it (``all_reduce`` of S bytes on n ranks: S*(n-1) out and in). For
``send``/``recv`` and their variants this is exactly what moves; for collectives the backend's
own algorithm (a ring, a tree) may route the same data differently.

Over 400 lines: the byte model (one rule per operation) is kept beside the Call it fills in.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import torch

# Every operation the trace knows, in a fixed order: its index is what a rank writes on the
# status board (commlab.status), so that the launcher can say which call a stuck rank is in.
OPS = (
    "init_process_group",
    "broadcast",
    "all_reduce",
    "reduce",
    "all_gather",
    "all_gather_into_tensor",
    "all_gather_single",
    "_all_gather_base",
    "all_gather_object",
    "gather",
    "gather_object",
    "scatter",
    "scatter_object_list",
    "reduce_scatter",
    "reduce_scatter_tensor",
    "reduce_scatter_single",
    "_reduce_scatter_base",
    "all_to_all",
    "all_to_all_single",
    "barrier",
    "monitored_barrier",
    "send",
    "recv",
    "isend",
    "irecv",
    "batch_isend_irecv",
    "broadcast_object_list",
    "send_object_list",
    "recv_object_list",
    "all_reduce_coalesced",
    "new_group",
)

# Calls that make a process group: recorded in Recorder.groups, not among the calls.
GROUP_MAKERS = ("init_process_group", "new_group")

# Tensors with at most this many elements have their values copied into the trace before and
# after the call, so pictures and graders can show what moved. Larger ones keep shape and dtype.
VALUE_LIMIT = 4096


@dataclasses.dataclass(frozen=True)
class TensorInfo:
    """Shape, dtype and device of one tensor argument, and its size in bytes."""

    shape: tuple[int, ...]
    dtype: str
    device: str
    nbytes: int

    @classmethod
    def of(cls, tensor: torch.Tensor) -> TensorInfo:
        return cls(
            tuple(tensor.shape),
            str(tensor.dtype).replace("torch.", ""),
            str(tensor.device),
            tensor.numel() * tensor.element_size(),
        )

    def __str__(self) -> str:
        return f"{self.dtype}{list(self.shape)}"


@dataclasses.dataclass
class Call:
    """One ``torch.distributed`` call made by one rank.

    Attributes:
        op: the function's name, e.g. ``"all_reduce"``.
        index: 1 for this rank's first call of ``op``, 2 for its second, ...
        seq: position among all traced calls of this rank, from 0.
        rank: the calling rank (global).
        group_ranks: global ranks of the group the call ran in.
        tensors: parameter name -> :class:`TensorInfo` (lists of them for list parameters).
        root: ``src`` or ``dst`` for rooted collectives and point-to-point calls, as a global rank.
        reduce_op: e.g. ``"SUM"`` for reductions, else ``None``.
        sent_to, received_from: peer (global rank) -> bytes, for a direct exchange.
        seconds: wall time of the call (for ``async_op=True``, the time to issue it).
        started, finished: ``time.perf_counter()`` when the call began and when its result was
            there: when it returned, or for an async call when its work was first waited for
            (``None`` until then). The clock is shared by the processes of one machine.
        async_op: whether the call returned a work handle instead of waiting.
        before, after: parameter name -> CPU copy of small tensor arguments (or list of copies),
            taken just before and just after the call; ``after`` is empty for async calls.
        split_sizes: ``{"input": [...], "output": [...]}`` for ``all_to_all_single``.
        ops: for ``batch_isend_irecv``, the batched ``(op, peer, TensorInfo)`` triples.
        error: the exception text if the call raised.
        functional: a functional collective (``torch.distributed._functional_collectives``,
            what DTensor calls), which returns a new tensor instead of filling one in; see
            :mod:`commlab.functional`.
        case: for a group made (``new_group``) while :mod:`commlab.checks` ran a test case,
            that case's number.
    """

    op: str
    index: int
    seq: int
    rank: int
    group_ranks: tuple[int, ...]
    tensors: dict[str, Any] = dataclasses.field(default_factory=dict)
    root: int | None = None
    reduce_op: str | None = None
    sent_to: dict[int, int] = dataclasses.field(default_factory=dict)
    received_from: dict[int, int] = dataclasses.field(default_factory=dict)
    seconds: float = 0.0
    started: float = 0.0
    finished: float | None = None
    async_op: bool = False
    before: dict[str, Any] = dataclasses.field(default_factory=dict)
    after: dict[str, Any] = dataclasses.field(default_factory=dict)
    split_sizes: dict[str, list[int]] | None = None
    ops: list[tuple[str, int, TensorInfo]] | None = None
    error: str | None = None
    functional: bool = False
    case: int | None = None

    @property
    def bytes_sent(self) -> int:
        return sum(self.sent_to.values())

    @property
    def bytes_received(self) -> int:
        return sum(self.received_from.values())

    @property
    def peers(self) -> list[int]:
        return sorted(set(self.sent_to) | set(self.received_from))

    @property
    def label(self) -> str:
        """``"all_reduce #2"``: how messages name this call."""
        return f"{self.op} #{self.index}"

    def __repr__(self) -> str:
        parts = [f"{self.label} on rank {self.rank}"]
        if self.tensors:
            parts.append(", ".join(f"{k}={_fmt_info(v)}" for k, v in self.tensors.items()))
        if self.root is not None:
            parts.append(f"root={self.root}")
        if self.reduce_op:
            parts.append(f"op={self.reduce_op}")
        parts.append(f"sent {self.bytes_sent} B, received {self.bytes_received} B")
        return f"Call({'; '.join(parts)})"


def _fmt_info(value: Any) -> str:
    if isinstance(value, list):
        return "[" + ", ".join(_fmt_info(v) for v in value) + "]"
    return str(value)


class Recorder:
    """Collects a rank's calls, and tells ``board`` (if any) when each call starts and ends.

    ``board`` is the rank's entry on the status board (:class:`commlab.status.RankBoard`):
    anything with ``entering(op, index)`` and ``leaving(op, index)``.
    """

    def __init__(self, rank: int, board: Any = None, keep_values: bool = True):
        self.rank = rank
        self.calls: list[Call] = []
        # groups made (new_group): kept apart from the calls, each with ``seq`` the number of
        # calls made before it, so that a grader can make them again at the same point
        self.groups: list[Call] = []
        self.case: int | None = None  # the test case running (set by commlab.checks)
        self.keep_values = keep_values
        self._board = board
        self._counts: dict[str, int] = {}
        self._local = threading.local()

    def belong_to(self, rank: int, board: Any, keep_values: bool) -> None:
        """Record for ``rank`` from now on (a rank started ahead installs its trace before it
        knows its rank and launch)."""
        self.rank, self._board, self.keep_values = rank, board, keep_values

    def restart_numbering(self) -> None:
        """Number the next calls from #1 again (commlab.checks runs several test cases in one
        launch, and a message about a case counts that case's calls, as a lone launch would)."""
        self._counts.clear()

    @property
    def busy(self) -> bool:
        """Whether this thread is inside a traced call (the calls it makes are not recorded)."""
        return bool(getattr(self._local, "depth", 0))

    def add(self, op: str, group_ranks: tuple[int, ...]) -> Call:
        """A new call of ``op`` by this rank, numbered and recorded (for wrappers made outside
        :meth:`wrap`, such as :mod:`commlab.functional`'s)."""
        index = self._counts.get(op, 0) + 1
        self._counts[op] = index
        call = Call(op=op, index=index, seq=len(self.calls), rank=self.rank,
                    group_ranks=group_ranks)
        self.calls.append(call)
        return call

    @contextlib.contextmanager
    def calling(self, call: Call) -> Iterator[None]:
        """Around the call itself: the status board, its times, its error, and no recording of
        the calls it makes."""
        if self._board is not None:
            self._board.entering(call.op, call.index)
        self._local.depth = 1
        start = call.started = time.perf_counter()
        try:
            yield
        except BaseException as exc:
            call.error = f"{type(exc).__name__}: {exc}"
            raise
        finally:
            call.seconds = time.perf_counter() - start
            call.finished = start + call.seconds
            self._local.depth = 0
            if self._board is not None:
                self._board.leaving(call.op, call.index)

    def wrap(self, name: str, original: Callable) -> Callable:
        """``original`` (``dist.<name>``), recording each call the student makes: its
        arguments before, the call itself (:meth:`calling`), its values after."""
        signature = inspect.signature(original)

        @functools.wraps(original)
        def traced(*args, **kwargs):
            # Collectives built on other collectives (all_gather_object on all_gather, the
            # batched sends of batch_isend_irecv) are recorded once, as the call the student made.
            if getattr(self._local, "depth", 0):
                return original(*args, **kwargs)
            try:
                bound = signature.bind(*args, **kwargs)
            except TypeError:
                return original(*args, **kwargs)  # let torch word the error
            bound.apply_defaults()
            call = self._record(name, bound.arguments)
            with self.calling(call):
                out = original(*args, **kwargs)
            return self._returned(call, out, bound.arguments)

        traced.__commlab_original__ = original
        return traced

    def _record(self, name: str, arguments: dict[str, Any]) -> Call:
        """A new call of ``dist.<name>`` with these arguments, numbered and listed (a group's
        creation among the groups), described, its values before it kept."""
        if name in GROUP_MAKERS:
            index, listed = len(self.groups) + 1, self.groups
        else:
            index, listed = self._counts.get(name, 0) + 1, self.calls
            self._counts[name] = index
        call = Call(op=name, index=index, seq=len(self.calls), rank=self.rank,
                    group_ranks=_group_ranks(arguments.get("group")),
                    case=self.case if listed is self.groups else None)
        listed.append(call)
        try:
            _describe(call, arguments)
        except Exception:  # a malformed call: torch's own error is the one to show
            pass
        if self.keep_values:
            call.before = _snapshot(arguments)
        return call

    def _returned(self, call: Call, out: Any, arguments: dict[str, Any]) -> Any:
        """What the call returned, after noting what only its return says (a receive's
        source, a work handle that finishes the call once waited for)."""
        call.async_op = bool(arguments.get("async_op", False))
        if call.op in ("recv", "irecv") and call.root is None and isinstance(out, int):
            call.root = out
            call.received_from = {out: call.received_from.pop(-1, 0)}
        if call.async_op or call.op in ("isend", "irecv", "batch_isend_irecv"):
            # the call is done, and its values are there, only once the work is waited for
            call.finished = None
            return _after_wait(out, lambda: _waited(call, arguments, self.keep_values))
        if self.keep_values:
            call.after = _snapshot(arguments)
        return out


_current: Recorder | None = None


def current() -> Recorder | None:
    """The recorder installed in this process (inside a rank), or None.

    Code running on a rank (commlab.checks, which runs several test cases in one launch) reads
    ``len(current().calls)`` to tell which calls belong to which case.
    """
    return _current


def install(recorder: Recorder) -> Callable[[], None]:
    """Replace ``torch.distributed``'s functions with traced ones; return an undo function.

    The functional collectives DTensor calls are traced by :mod:`commlab.functional`, which
    builds on this module; a rank installs both (:func:`commlab.worker.install_trace`)."""
    import torch.distributed as dist
    import torch.distributed.distributed_c10d as c10d

    global _current
    _current = recorder

    import torch.distributed.device_mesh as device_mesh

    # modules that took functions by name when they were imported find the wrappers there too:
    # device_mesh (new_group), and DTensor's scatter and broadcast, imported in the forkserver
    # with torch._dynamo (commlab.processes.PRELOAD)
    dtensor = sys.modules.get("torch.distributed.tensor._collective_utils")
    by_name = [device_mesh] + ([dtensor] if dtensor is not None else [])
    saved: list[tuple[Any, str, Any]] = []
    for name in OPS:
        original = getattr(c10d, name, None) or getattr(dist, name, None)
        if original is None:
            continue
        original = getattr(original, "__commlab_original__", original)
        traced = recorder.wrap(name, original)
        for module in (dist, c10d, *by_name):
            if hasattr(module, name):
                saved.append((module, name, getattr(module, name)))
                setattr(module, name, traced)

    def undo() -> None:
        global _current
        for module, name, value in reversed(saved):
            setattr(module, name, value)
        _current = None

    return undo


# --- describing a call -------------------------------------------------------------------------

def _group_ranks(group: Any) -> tuple[int, ...]:
    import torch.distributed as dist

    if not dist.is_initialized():
        return ()
    try:
        return tuple(dist.get_process_group_ranks(group or dist.group.WORLD))
    except Exception:
        return ()


def _info(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return TensorInfo.of(value)
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, torch.Tensor)
                                                           for v in value):
        return [TensorInfo.of(v) for v in value]
    return None


def _nbytes(value: Any) -> int:
    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, (list, tuple)):
        return sum(_nbytes(v) for v in value)
    return 0


class _WaitRecorder:
    """A work handle that, once waited for, records the call's values after it completed.
    Everything else is the wrapped handle's own."""

    def __init__(self, work: Any, on_done: Callable[[], Any]):
        self._work, self._on_done = work, on_done

    def wait(self, *args, **kwargs):
        finished = self._work.wait(*args, **kwargs)
        self._on_done()
        return finished

    def __getattr__(self, name: str) -> Any:
        return getattr(self._work, name)


def _after_wait(out: Any, on_done: Callable[[], Any]) -> Any:
    """Wrap the work handle(s) an async call returned; the values are recorded after the last
    wait (for ``batch_isend_irecv``, after every handle of the batch was waited for)."""
    if isinstance(out, list) and out:
        pending = set(range(len(out)))

        def one_done(i: int) -> None:
            pending.discard(i)
            if not pending:
                on_done()

        return [_WaitRecorder(w, lambda i=i: one_done(i)) for i, w in enumerate(out)]
    if out is None or isinstance(out, list):
        return out
    return _WaitRecorder(out, on_done)


def _waited(call: Call, arguments: dict[str, Any], keep_values: bool) -> None:
    if call.finished is None:
        call.finished = time.perf_counter()
    if keep_values and not call.after:
        call.after.update(_snapshot(arguments))


def _snapshot(arguments: dict[str, Any]) -> dict[str, Any]:
    def copy(t: torch.Tensor) -> torch.Tensor | None:
        return t.detach().to("cpu", copy=True) if t.numel() <= VALUE_LIMIT else None

    shot: dict[str, Any] = {}
    ops = arguments.get("p2p_op_list")
    if isinstance(ops, list) and all(hasattr(op, "tensor") for op in ops):
        shot["tensors"] = [copy(op.tensor) for op in ops]
    for key, value in arguments.items():
        if isinstance(value, torch.Tensor):
            shot[key] = copy(value)
        elif isinstance(value, (list, tuple)) and value and all(
                isinstance(v, torch.Tensor) for v in value):
            shot[key] = [copy(v) for v in value]
    return shot


def _global(group_ranks: tuple[int, ...], rank: int | None) -> int | None:
    if rank is None or not group_ranks:
        return rank
    return group_ranks[rank] if 0 <= rank < len(group_ranks) else rank


def _root(args: dict[str, Any], call: Call, name: str) -> int | None:
    """The root as a global rank, from ``src``/``dst`` or their ``group_`` forms."""
    if args.get(name) is not None:
        return args[name]
    return _global(call.group_ranks, args.get(f"group_{name}"))


def _describe(call: Call, args: dict[str, Any]) -> None:
    """Fill in tensors, root, reduce op and per-peer bytes from the bound arguments."""
    call.tensors = {k: i for k, v in args.items() if (i := _info(v)) is not None}
    op = args.get("op")
    if op is not None:
        # a ReduceOp enum member has .name; a ReduceOp object wraps one in .op
        named = getattr(op, "name", None) or getattr(getattr(op, "op", None), "name", None)
        call.reduce_op = named or str(op).rsplit(".", 1)[-1]
    rule = _RULES.get(call.op)
    if rule is not None:
        rule(call, args)


# --- the byte model: one rule per operation, for a direct exchange ------------------------------

# A rule fills in a call's root and per-peer bytes from its bound arguments.
Rule = Callable[[Call, dict[str, Any]], None]

def _others(call: Call) -> list[int]:
    return [r for r in call.group_ranks if r != call.rank]


def _each(call: Call, per_peer: Callable[[int], int]) -> dict[int, int]:
    """Peer -> bytes, from the peer's position in the group; peers with 0 bytes left out."""
    return {r: b for i, r in enumerate(call.group_ranks) if r != call.rank and (b := per_peer(i))}


def _listed(tensors: list | None) -> Callable[[int], int]:
    """Bytes of the i-th tensor of a list (0 past its end)."""
    tensors = tensors or []
    return lambda i: _nbytes(tensors[i]) if i < len(tensors) else 0


def _everyone_both_ways(call: Call, size: int) -> None:
    """The same ``size`` to and from every other rank of the group."""
    call.sent_to = dict.fromkeys(_others(call), size)
    call.received_from = dict.fromkeys(_others(call), size)


def _sides(root_arg: str) -> tuple[str, str]:
    """(the root's side, the other ranks' side): a ``src`` root sends, a ``dst`` root receives."""
    return ("sent_to", "received_from") if root_arg == "src" else ("received_from", "sent_to")


def _rooted(root_arg: str) -> Rule:
    """broadcast (src) and reduce (dst): the root and every other rank move one tensor."""
    root_side, other_side = _sides(root_arg)

    def rule(call: Call, args: dict[str, Any]) -> None:
        call.root = _root(args, call, root_arg)
        size = _nbytes(args["tensor"])
        if call.rank == call.root:
            setattr(call, root_side, dict.fromkeys(_others(call), size))
        else:
            setattr(call, other_side, {call.root: size})
    return rule


def _rooted_list(root_arg: str, list_arg: str) -> Rule:
    """scatter (src, scatter_list) and gather (dst, gather_list): the root moves item i of its
    list to or from rank i; every other rank moves its one tensor."""
    root_side, other_side = _sides(root_arg)

    def rule(call: Call, args: dict[str, Any]) -> None:
        call.root = _root(args, call, root_arg)
        if call.rank == call.root:
            setattr(call, root_side, _each(call, _listed(args.get(list_arg))))
        else:
            setattr(call, other_side, {call.root: _nbytes(args["tensor"])})
    return rule


def _all_reduce(call: Call, args: dict[str, Any]) -> None:
    _everyone_both_ways(call, _nbytes(args.get("tensor", args.get("tensors"))))


def _all_gather(call: Call, args: dict[str, Any]) -> None:
    call.sent_to = dict.fromkeys(_others(call), _nbytes(args["tensor"]))
    call.received_from = _each(call, _listed(args["tensor_list"]))


def _all_gather_into_tensor(call: Call, args: dict[str, Any]) -> None:
    _everyone_both_ways(call, _nbytes(args["input_tensor"]))


def _reduce_scatter(call: Call, args: dict[str, Any]) -> None:
    call.sent_to = _each(call, _listed(args["input_list"]))
    call.received_from = dict.fromkeys(_others(call), _nbytes(args["output"]))


def _reduce_scatter_tensor(call: Call, args: dict[str, Any]) -> None:
    _everyone_both_ways(call, _nbytes(args["output"]))


def _all_to_all(call: Call, args: dict[str, Any]) -> None:
    call.sent_to = _each(call, _listed(args["input_tensor_list"]))
    call.received_from = _each(call, _listed(args["output_tensor_list"]))


def _all_to_all_single(call: Call, args: dict[str, Any]) -> None:
    n = len(call.group_ranks) or 1
    out, inp = args["output"], args["input"]
    in_splits = _split_sizes(inp, args.get("input_split_sizes"), n)
    out_splits = _split_sizes(out, args.get("output_split_sizes"), n)
    call.split_sizes = {"input": in_splits, "output": out_splits}
    in_row, out_row = _row_bytes(inp), _row_bytes(out)
    call.sent_to = _each(call, lambda i: in_splits[i] * in_row)
    call.received_from = _each(call, lambda i: out_splits[i] * out_row)


def _send(call: Call, args: dict[str, Any]) -> None:
    call.root = _root(args, call, "dst")
    call.sent_to = {call.root: _nbytes(args["tensor"])}


def _recv(call: Call, args: dict[str, Any]) -> None:
    call.root = _root(args, call, "src")
    # -1 stands for "any source" until recv returns the sender
    call.received_from = {call.root if call.root is not None else -1: _nbytes(args["tensor"])}


def _batch(call: Call, args: dict[str, Any]) -> None:
    call.ops = []
    for p2p in args["p2p_op_list"]:
        kind = getattr(p2p.op, "__name__", str(p2p.op))
        call.ops.append((kind, p2p.peer, TensorInfo.of(p2p.tensor)))
        target = call.sent_to if kind == "isend" else call.received_from
        target[p2p.peer] = target.get(p2p.peer, 0) + _nbytes(p2p.tensor)
    call.tensors = {"tensors": [info for _, _, info in call.ops]}


def _new_group(call: Call, args: dict[str, Any]) -> None:
    """A new group: its members, as global ranks (no bytes: they go through the store)."""
    import torch.distributed as dist

    ranks = args.get("ranks")
    world = dist.get_world_size() if dist.is_initialized() else 0
    call.group_ranks = tuple(sorted(ranks)) if ranks else tuple(range(world))


def _root_only(name: str) -> Rule:
    """Object collectives: the root is known, the pickled bytes are not."""
    def rule(call: Call, args: dict[str, Any]) -> None:
        call.root = _root(args, call, name)
    return rule


_RULES: dict[str, Rule] = {
    "broadcast": _rooted("src"),
    "all_reduce": _all_reduce,
    "all_reduce_coalesced": _all_reduce,
    "reduce": _rooted("dst"),
    "all_gather": _all_gather,
    "all_gather_into_tensor": _all_gather_into_tensor,
    "all_gather_single": _all_gather_into_tensor,
    "_all_gather_base": _all_gather_into_tensor,
    "gather": _rooted_list("dst", "gather_list"),
    "scatter": _rooted_list("src", "scatter_list"),
    "reduce_scatter": _reduce_scatter,
    "reduce_scatter_tensor": _reduce_scatter_tensor,
    "reduce_scatter_single": _reduce_scatter_tensor,
    "_reduce_scatter_base": _reduce_scatter_tensor,
    "all_to_all": _all_to_all,
    "all_to_all_single": _all_to_all_single,
    "send": _send,
    "isend": _send,
    "recv": _recv,
    "irecv": _recv,
    "batch_isend_irecv": _batch,
    "broadcast_object_list": _root_only("src"),
    "scatter_object_list": _root_only("src"),
    "recv_object_list": _root_only("src"),
    "gather_object": _root_only("dst"),
    "send_object_list": _root_only("dst"),
    "new_group": _new_group,
}


def _split_sizes(tensor: torch.Tensor, sizes: Any, n: int) -> list[int]:
    if sizes:
        return [int(s) for s in sizes]
    rows = tensor.shape[0] if tensor.dim() else 1
    return [rows // n] * n


def _row_bytes(tensor: torch.Tensor) -> int:
    rows = tensor.shape[0] if tensor.dim() else 1
    return _nbytes(tensor) // rows if rows else 0
