"""The course's examples that tests/commlab/test_drawing.py draws, and the image cases it
compares with tests/baseline_images/ (also used by tools/make_baselines.py to regenerate them).

Each example runs once per test session, the first time a test asks for it.
"""

from __future__ import annotations

import sys
from pathlib import Path

import cloudpickle
import torch
import torch.distributed as dist

import commlab
from commlab.drawing import draw
from commlab.ring import draw_ring

BASELINES = Path(__file__).parent.parent / "baseline_images"
BASELINE_DPI = 72  # smaller files than the figures' own 100 dpi, same layout


# The ranks get the example functions by value, as they get a notebook cell's functions, so that
# they do not import this module (and matplotlib with it) before every run.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


# --- the course's examples, as the seeds wrote them (on the CPU, gloo) -------------------------

def gather_rows(rank, world_size):
    tensor = torch.ones(1, 5) * rank
    gather_list = [torch.empty_like(tensor) for _ in range(world_size)] if rank == 0 else None
    dist.gather(tensor, gather_list=gather_list, dst=0)


def gather_columns(rank, world_size):
    local_tensor = torch.zeros(5, 2)
    for col in range(2):
        local_tensor[:, col] = rank * 10 + col
    gather_list = ([torch.empty_like(local_tensor) for _ in range(world_size)] if rank == 0
                   else None)
    dist.gather(local_tensor, gather_list=gather_list, dst=0)


def all_gather_columns(rank, world_size):
    tensor = torch.zeros(5, 2)
    for j in range(2):
        tensor[:, j] = rank * 10 + j
    gather_list = [torch.empty_like(tensor) for _ in range(world_size)]
    dist.all_gather(gather_list, tensor)


def all_gather_rows(rank, world_size):
    tensor = torch.ones(1, 5) * rank
    tensor_list = [torch.empty_like(tensor) for _ in range(world_size)]
    dist.all_gather(tensor_list, tensor)


def all_gather_into_tensor(rank, world_size):
    local_tensor = torch.tensor([rank] * 2, dtype=torch.float32)
    output_tensor = torch.empty((world_size, 2), dtype=torch.float32)
    dist.all_gather_into_tensor(output_tensor.view(-1), local_tensor)


def reduce(rank, world_size):
    tensor = torch.ones(1, 5) * rank
    dist.reduce(tensor, dst=0, op=dist.ReduceOp.SUM)


def all_reduce_twice(rank, world_size):
    tensor = torch.ones(1, 5) * rank
    dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    tensor = torch.full((2, 5), rank, dtype=torch.float)
    dist.all_reduce(tensor, op=dist.ReduceOp.SUM)


def scatter(rank, world_size):
    recv_tensor = torch.empty(5)
    if rank == 0:
        data = torch.arange(world_size).float().unsqueeze(1).repeat(1, 5)
        scatter_list = [data[i] for i in range(world_size)]
    else:
        scatter_list = None
    dist.scatter(recv_tensor, scatter_list=scatter_list, src=0)


def reduce_scatter_rows(rank, world_size):
    data = torch.zeros(world_size, 5)
    for i in range(world_size):
        data[i] = rank * 10 + i
    input_list = [data[i].unsqueeze(0) for i in range(world_size)]
    output = torch.empty(1, 5)
    dist.reduce_scatter(output, input_list, op=dist.ReduceOp.SUM)


def reduce_scatter_tensor(rank, world_size):
    input_tensor = torch.zeros(world_size, 5)
    for i in range(world_size):
        input_tensor[i] = rank * 10 + i
    output = torch.empty(1, 5)
    dist.reduce_scatter_tensor(output, input_tensor, op=dist.ReduceOp.SUM)


def reduce_scatter_columns(rank, world_size):
    data = torch.zeros(5, world_size)
    for j in range(world_size):
        data[:, j] = rank * 10 + j
    input_list = list(torch.split(data, 1, dim=1))
    output = torch.empty(5, 1)
    dist.reduce_scatter(output, input_list, op=dist.ReduceOp.SUM)


def reduce_scatter_scalars(rank, world_size):
    output = torch.tensor(0)
    input_list = [torch.tensor(v) for v in range(world_size)]
    dist.reduce_scatter(output, input_list, op=dist.ReduceOp.SUM)


def all_to_all_rows(rank, world_size):
    send_tensor = torch.zeros(world_size, 2)
    for dst in range(world_size):
        send_tensor[dst] = rank * 10 + dst
    recv_tensor = torch.empty(world_size, 2)
    dist.all_to_all_single(recv_tensor, send_tensor)


def all_to_all_columns(rank, world_size):
    local_tensor = torch.zeros(5, world_size)
    for col in range(world_size):
        local_tensor[:, col] = rank * 10 + col
    input_list = [local_tensor[:, col:col + 1].contiguous() for col in range(world_size)]
    output_list = [torch.empty(5, 1) for _ in range(world_size)]
    dist.all_to_all(output_list, input_list)


def all_to_all_uneven(rank, world_size):
    inputs = [torch.arange(0, 6), torch.arange(10, 19), torch.arange(20, 25),
              torch.arange(30, 37)]
    input_splits = [[2, 2, 1, 1], [3, 2, 2, 2], [2, 1, 1, 1], [2, 2, 2, 1]]
    output_splits = [[2, 3, 2, 2], [2, 2, 1, 2], [1, 2, 1, 2], [1, 2, 1, 1]]
    output = torch.empty(sum(output_splits[rank]), dtype=torch.int64)
    dist.all_to_all_single(output, inputs[rank], output_splits[rank], input_splits[rank])


def all_to_all_cfloat(rank, world_size):
    input = torch.tensor([1 + 1j, 2 + 2j, 3 + 3j, 4 + 4j], dtype=torch.cfloat) + 4 * rank * (1 + 1j)
    input = list(input.chunk(4))
    output = list(torch.empty([4], dtype=torch.cfloat).chunk(4))
    dist.all_to_all(output, input)


def broadcast(rank, world_size):
    tensor = torch.ones(5, 2) if rank == 0 else torch.zeros(5, 2)
    dist.broadcast(tensor, src=0)


def send_recv(rank, world_size):
    tensor = torch.arange(4.0) if rank == 0 else torch.zeros(4)
    if rank == 0:
        dist.send(tensor, dst=1)
    elif rank == 1:
        dist.recv(tensor, src=0)


def too_large(rank, world_size):
    tensor = torch.ones(1024, 1024) * rank
    output = torch.empty(world_size * 1024, 1024)
    dist.all_gather_into_tensor(output, tensor)


def async_all_reduce(rank, world_size):
    dist.all_reduce(torch.ones(3), async_op=True).wait()


def barrier_and_objects(rank, world_size):
    dist.barrier()
    objects = [None] * world_size
    dist.all_gather_object(objects, rank)


def ring_all_reduce(rank, world_size):
    """Ring all-reduce by hand: reduce-scatter, then all-gather, one chunk per step."""
    tensor = torch.arange(world_size * 2, dtype=torch.float32) + 10 * rank
    chunks = list(tensor.chunk(world_size))
    right, left = (rank + 1) % world_size, (rank - 1) % world_size
    buffer = torch.empty_like(chunks[0])
    for step in range(world_size - 1):
        request = dist.isend(chunks[(rank - step) % world_size].clone(), right)
        dist.recv(buffer, left)
        request.wait()
        chunks[(rank - step - 1) % world_size] += buffer
    for step in range(world_size - 1):
        request = dist.isend(chunks[(rank + 1 - step) % world_size].clone(), right)
        dist.recv(buffer, left)
        request.wait()
        chunks[(rank - step) % world_size].copy_(buffer)
    return torch.cat(chunks)


def ring_batched(rank, world_size):
    """The same ring with batch_isend_irecv, whose values the trace does not keep."""
    chunks = list((torch.arange(world_size, dtype=torch.float32) + 10 * rank).chunk(world_size))
    right, left = (rank + 1) % world_size, (rank - 1) % world_size
    buffer = torch.empty_like(chunks[0])
    for phase in range(2):
        for step in range(world_size - 1):
            ops = [dist.P2POp(dist.isend, chunks[(rank - step + phase) % world_size].clone(),
                              right),
                   dist.P2POp(dist.irecv, buffer, left)]
            for work in dist.batch_isend_irecv(ops):
                work.wait()
            target = chunks[(rank - step - 1 + phase) % world_size]
            target.add_(buffer) if phase == 0 else target.copy_(buffer)
    return torch.cat(chunks)


# name -> (function, world_size, keyword arguments of commlab.run)
RUNS = {
    "gather_rows": (gather_rows, 4, {}),
    "gather_columns": (gather_columns, 4, {}),
    "all_gather_rows": (all_gather_rows, 4, {}),
    "all_gather_columns": (all_gather_columns, 4, {}),
    "all_gather_into_tensor": (all_gather_into_tensor, 4, {}),
    "reduce": (reduce, 4, {}),
    "all_reduce_twice": (all_reduce_twice, 4, {}),
    "scatter": (scatter, 4, {}),
    "reduce_scatter_rows": (reduce_scatter_rows, 4, {}),
    "reduce_scatter_tensor": (reduce_scatter_tensor, 4, {}),
    "reduce_scatter_columns": (reduce_scatter_columns, 4, {}),
    "reduce_scatter_scalars": (reduce_scatter_scalars, 4, {}),
    "all_to_all_rows": (all_to_all_rows, 4, {}),
    "all_to_all_columns": (all_to_all_columns, 4, {}),
    "all_to_all_uneven": (all_to_all_uneven, 4, {}),
    "all_to_all_cfloat": (all_to_all_cfloat, 4, {}),
    "broadcast": (broadcast, 4, {}),
    "send_recv": (send_recv, 4, {}),
    "too_large": (too_large, 4, {}),
    "ring_all_reduce": (ring_all_reduce, 4, {}),
    "all_to_all_rows_8": (all_to_all_rows, 8, {}),
    "reduce_scatter_scalars_8": (reduce_scatter_scalars, 8, {}),
    "ring_all_reduce_8": (ring_all_reduce, 8, {}),
    "all_gather_rows_1": (all_gather_rows, 1, {}),
    "ring_batched": (ring_batched, 4, {}),
    "untraced": (all_gather_rows, 4, {"trace_values": False}),
    "async_all_reduce": (async_all_reduce, 2, {}),
    "barrier_and_objects": (barrier_and_objects, 2, {}),
}

# Image regression cases: name -> (run, how to draw it).
CASES = {
    "gather_rows": ("gather_rows", draw, {}),
    "gather_columns": ("gather_columns", draw, {}),
    "gather_columns_as_rows": ("gather_columns", draw, {"layout": "rows"}),
    "all_gather_columns": ("all_gather_columns", draw, {}),
    "all_gather_into_tensor": ("all_gather_into_tensor", draw, {}),
    "reduce": ("reduce", draw, {}),
    "all_reduce": ("all_reduce_twice", draw, {"call": "all_reduce #2"}),
    "scatter": ("scatter", draw, {}),
    "reduce_scatter": ("reduce_scatter_rows", draw, {}),
    "reduce_scatter_tensor": ("reduce_scatter_tensor", draw, {}),
    "reduce_scatter_columns": ("reduce_scatter_columns", draw, {}),
    "reduce_scatter_scalars": ("reduce_scatter_scalars", draw, {}),
    "all_to_all_single": ("all_to_all_rows", draw, {}),
    "all_to_all_columns": ("all_to_all_columns", draw, {}),
    "all_to_all_uneven": ("all_to_all_uneven", draw, {}),
    "all_to_all_cfloat": ("all_to_all_cfloat", draw, {}),
    "broadcast": ("broadcast", draw, {}),
    "send_recv": ("send_recv", draw, {}),
    "too_large": ("too_large", draw, {}),
    "all_to_all_single_8_ranks": ("all_to_all_rows_8", draw, {}),
    "ring_all_reduce": ("ring_all_reduce", draw_ring, {}),
    "ring_all_reduce_8_ranks": ("ring_all_reduce_8", draw_ring, {}),
}


class _Runs(dict):
    """Runs each example the first time a test asks for it, then shares the result."""

    def __missing__(self, name):
        fn, world_size, kwargs = RUNS[name]
        self[name] = commlab.run(fn, world_size=world_size, **kwargs)
        return self[name]


SHARED_RUNS = _Runs()


def drawing(name: str):
    """The figure of an image case (drawn once per test session)."""
    if name not in _FIGURES:
        run, how, kwargs = CASES[name]
        _FIGURES[name] = how(SHARED_RUNS[run], **kwargs)
    return _FIGURES[name]


_FIGURES: dict = {}


def save_case(name: str, path: Path) -> None:
    drawing(name).savefig(path, dpi=BASELINE_DPI)
