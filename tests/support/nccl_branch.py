"""Which chapters run end to end on the NCCL branch, and the calls checked on both branches.

On a CPU machine, ``COMMLAB_PRETEND_GPUS`` makes commlab take the NCCL branch: a mixed group,
``cpu:gloo,cuda:gloo``, in place of ``gloo``, the same CPU device, an orderly teardown. A CPU
tensor then reaches the same gloo backend through the mixed group's dispatch, so a chapter that
only calls the plain functions of ``torch.distributed`` behaves on that branch as those calls do:
:func:`every_plain_call` makes each of them on both branches (tests/commlab/test_backend.py). A
chapter whose code builds groups of its own, names its backend or uses torch's higher layers
(device meshes, DTensor, FSDP, pipelining, checkpoints) runs end to end on the NCCL branch under
strict nbval (tests/course/test_nccl_path.py): :func:`chapters_beyond_the_plain_calls` finds them
in the chapters' code, so a chapter that starts using more is run there without a word.
"""

from __future__ import annotations

import re

import torch
import torch.distributed as dist

from grader import course
from support.chapter_kernel import code_cells

# dist.<name> as the chapters call it, and torch.distributed's submodules as they import them
_DIST_NAME = re.compile(r"\bdist\.([A-Za-z_]\w*)")
_SUBMODULE = re.compile(r"\btorch\.distributed\.([A-Za-z_]\w*)")


def _send_and_receive(rank: int, world_size: int) -> list[float]:
    """A ring, blocking: even ranks send first, odd ranks receive first."""
    out, got = torch.full((2,), float(rank)), torch.zeros(2)
    right, left = (rank + 1) % world_size, (rank - 1) % world_size
    if rank % 2 == 0:
        dist.send(out, right)
        dist.recv(got, left)
    else:
        dist.recv(got, left)
        dist.send(out, right)
    return got.tolist()


def _ring_without_waiting(rank: int, world_size: int) -> dict[str, list[float]]:
    right, left = (rank + 1) % world_size, (rank - 1) % world_size
    got, batched = torch.zeros(2), torch.zeros(2)
    works = [dist.isend(torch.full((2,), float(rank)), right), dist.irecv(got, left)]
    for work in works:
        work.wait()
    ops = [dist.P2POp(dist.isend, torch.full((2,), 10.0 + rank), right),
           dist.P2POp(dist.irecv, batched, left)]
    for work in dist.batch_isend_irecv(ops):
        work.wait()
    return {"isend": got.tolist(), "irecv": got.tolist(), "batch_isend_irecv": batched.tolist()}


def _collectives(rank: int, world_size: int) -> dict[str, object]:
    mine = torch.arange(4, dtype=torch.float32) + 10 * rank
    done: dict[str, object] = {}
    for op in (dist.ReduceOp.SUM, dist.ReduceOp.MAX, dist.ReduceOp.AVG):
        t = mine.clone()
        dist.all_reduce(t, op=op)
        done[f"all_reduce {op.name}"] = t.tolist()
    t = mine.clone()
    dist.all_reduce(t, async_op=True).wait()
    done["all_reduce async"] = t.tolist()
    t = mine.clone()
    dist.broadcast(t, src=1)
    done["broadcast"] = t.tolist()
    t = mine.clone()
    dist.reduce(t, dst=2)
    done["reduce"] = t.tolist()
    gathered = [torch.zeros(4) for _ in range(world_size)]
    dist.all_gather(gathered, mine)
    done["all_gather"] = [g.tolist() for g in gathered]
    flat = torch.zeros(4 * world_size)
    dist.all_gather_into_tensor(flat, mine)
    done["all_gather_into_tensor"] = flat.tolist()
    flat = torch.zeros(4 * world_size)
    dist.all_gather_single(flat, mine)
    done["all_gather_single"] = flat.tolist()
    into = [torch.zeros(4) for _ in range(world_size)] if rank == 0 else None
    dist.gather(mine, into, dst=0)
    done["gather"] = [g.tolist() for g in into] if into else None
    piece = torch.zeros(4)
    dist.scatter(piece, [mine + i for i in range(world_size)] if rank == 3 else None, src=3)
    done["scatter"] = piece.tolist()
    piece = torch.zeros(4)
    dist.reduce_scatter(piece, [mine * (i + 1) for i in range(world_size)])
    done["reduce_scatter"] = piece.tolist()
    wide = torch.arange(4 * world_size, dtype=torch.float32) * (rank + 1)
    for name in ("reduce_scatter_tensor", "reduce_scatter_single"):
        piece = torch.zeros(4)
        getattr(dist, name)(piece, wide)
        done[name] = piece.tolist()
    outs = [torch.zeros(1) for _ in range(world_size)]
    dist.all_to_all(outs, [torch.tensor([10.0 * rank + i]) for i in range(world_size)])
    done["all_to_all"] = [o.tolist() for o in outs]
    # uneven splits, as chapter 08's exercise and chapter 16's ring send them
    sizes = [(rank + peer) % 3 for peer in range(world_size)]
    from_each = [(peer + rank) % 3 for peer in range(world_size)]
    out = torch.zeros(sum(from_each))
    dist.all_to_all_single(out, torch.arange(sum(sizes), dtype=torch.float32) + 100 * rank,
                           output_split_sizes=from_each, input_split_sizes=sizes)
    done["all_to_all_single"] = out.tolist()
    dist.barrier()
    done["barrier"] = True
    return done


def _bookkeeping(rank: int, world_size: int) -> dict[str, object]:
    params = [torch.zeros(n) for n in (5, 3, 8, 2)]
    return {
        "get_rank": dist.get_rank(), "get_world_size": dist.get_world_size(),
        "is_initialized": dist.is_initialized(),
        "get_global_rank": dist.get_global_rank(dist.group.WORLD, rank),
        "get_process_group_ranks": dist.get_process_group_ranks(dist.group.WORLD),
        "_compute_bucket_assignment_by_size": dist._compute_bucket_assignment_by_size(
            params, [40], [False] * len(params))[0],
        "P2POp": "see batch_isend_irecv", "ReduceOp": "see all_reduce",
    }


def every_plain_call(rank: int, world_size: int) -> dict[str, object]:
    """Each plain function of torch.distributed the chapters call, made on 4 ranks: what it gave
    on this rank, by name (with the variants the chapters use: reduce ops, async, uneven
    splits). The same on both branches is the point."""
    done = _bookkeeping(rank, world_size)
    done["send"] = done["recv"] = _send_and_receive(rank, world_size)
    done.update(_ring_without_waiting(rank, world_size))
    done.update(_collectives(rank, world_size))
    return done


# The names every_plain_call makes (a run of it shows the variants); dist.group.WORLD is an
# argument, not a call
PLAIN_CALLS = frozenset({
    "get_rank", "get_world_size", "is_initialized", "get_global_rank", "get_process_group_ranks",
    "_compute_bucket_assignment_by_size", "P2POp", "ReduceOp", "send", "recv", "isend", "irecv",
    "batch_isend_irecv", "all_reduce", "broadcast", "reduce", "all_gather",
    "all_gather_into_tensor", "all_gather_single", "gather", "scatter", "reduce_scatter",
    "reduce_scatter_tensor", "reduce_scatter_single", "all_to_all", "all_to_all_single",
    "barrier", "group"})


def beyond_the_plain_calls(source: str) -> set[str]:
    """What ``source`` uses of torch.distributed besides :data:`PLAIN_CALLS`: other ``dist.``
    names, and any submodule (``torch.distributed.tensor``, ``.fsdp``, ...)."""
    names = set(_DIST_NAME.findall(source)) - PLAIN_CALLS
    return names | {f"torch.distributed.{m}" for m in _SUBMODULE.findall(source)}


def chapter_code(chapter: str) -> str:
    """The code a chapter runs: its solution notebook's code cells and its checks.py."""
    code = ["".join(cell["source"]) for cell in code_cells(chapter)]
    checks = course.SOLUTIONS / chapter / "checks.py"
    return "\n".join(code + ([checks.read_text()] if checks.exists() else []))


def chapters_beyond_the_plain_calls() -> list[str]:
    """The chapters whose code uses more of torch.distributed than the plain calls."""
    return [ch for ch in course.chapters() if beyond_the_plain_calls(chapter_code(ch))]
