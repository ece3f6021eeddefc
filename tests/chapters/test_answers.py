"""The typical wrong answer to each exercise of the training chapters fails its test cell with a
message that says what is wrong.

Each case runs, in a real Jupyter kernel, the chapter's set-up and definition cells, then the
wrong answer in place of the solution cell, then the exercise's test cell as nbgrader would, and
checks the error the student would read.
"""

from __future__ import annotations

import ast
import functools
import json
from pathlib import Path

import pytest

from support.kernel import Kernel

ROOT = Path(__file__).resolve().parents[1]
DEFINING = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.ClassDef)


def _cells(chapter: str) -> list[dict]:
    path = ROOT / "solutions" / chapter / f"{chapter}.ipynb"
    return [c for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code"]


def _defines_only(source: str) -> bool:
    """A cell that only imports and defines (no run, no picture): cheap to replay. Constants
    count as definitions when computing them calls nothing (``HIDDEN = 4``), as for the grader."""
    try:
        body = ast.parse(source).body
    except SyntaxError:
        return False
    return bool(body) and all(
        isinstance(node, DEFINING) or (isinstance(node, ast.Assign) and not any(
            isinstance(inner, ast.Call) for inner in ast.walk(node.value)))
        for node in body)


def _grade_id(cell: dict) -> str | None:
    return cell["metadata"].get("nbgrader", {}).get("grade_id")


@pytest.fixture(scope="module")
def kernels():
    started: dict[str, Kernel] = {}
    yield started
    for kernel in started.values():
        kernel.shutdown()


def _chapter_kernel(kernels: dict[str, Kernel], chapter: str) -> Kernel:
    if chapter not in kernels:
        kernel = Kernel()
        # a failing test cell is the point here: the kernel must not drop the next request, as
        # it does for a short while after an error when asked to stop on errors
        kernel.client.execute = functools.partial(kernel.client.execute, stop_on_error=False)
        for cell in _cells(chapter):
            source = "".join(cell["source"])
            graded = cell["metadata"].get("nbgrader", {}).get("grade")
            if not graded and _defines_only(source):
                ran = kernel.execute(source, timeout=120)
                assert ran.error is None, (chapter, source[:80], ran.error)
        kernels[chapter] = kernel
    return kernels[chapter]


def _test_cell(chapter: str, solution_id: str) -> str:
    for cell in _cells(chapter):
        if _grade_id(cell) == f"{solution_id}-test":
            return "".join(cell["source"])
    raise LookupError(f"{chapter} has no test cell {solution_id}-test")


DDP_HEAD = '''
class BucketedDDP(torch.nn.Module):
    def __init__(self, module, bucket_cap_bytes):
        super().__init__()
        self.module = module
        for param in module.parameters():
            dist.broadcast(param.data, src=0)
        trainable = [param for param in module.parameters() if param.requires_grad]
        self.buckets = make_buckets(trainable, bucket_cap_bytes)
'''

# forward, and the wait for the all-reduces the hooks started: the same in the answers below
# that start their buckets from gradient hooks
DDP_WAIT = '''
    def forward(self, *inputs):
        return self.module(*inputs)

    def finish_gradient_synchronization(self):
        for bucket, flat, work in self.works:
            work.wait()
            flat /= dist.get_world_size()
            for param, average in zip(bucket, flat.split([p.numel() for p in bucket])):
                param.grad.copy_(average.view_as(param.grad))
'''

ZERO3_BODY = '''
def train_zero3(model, batches, lr=0.1):
    rank, world_size = dist.get_rank(), dist.get_world_size()
    params = list(model.parameters())
    numel = sum(p.numel() for p in params)
    padded = flat_padded(params, world_size).detach()
    shard = torch.empty(padded.numel() // world_size)
    dist.scatter(shard, list(torch.chunk(padded, world_size)) if rank == 0 else None, src=0)
    del padded
    for param in params:
        param.untyped_storage().resize_(0)
    losses = []
    for x, y in batches:
        full = shard.new_empty(world_size * shard.numel())
        dist.{gather}(full, shard)
        torch.nn.utils.vector_to_parameters(full[:numel], params)
        x_mine = {x_mine}
        y_mine = {y_mine}
        loss = torch.nn.functional.mse_loss(model(x_mine), y_mine)
        loss.backward()
        grad_shard = torch.empty_like(shard)
        dist.{scatter}(grad_shard, flat_padded([p.grad for p in params], world_size))
        shard -= lr * grad_shard / world_size
        for param in params:
            param.grad = None
        {free}
        reported = loss.detach().reshape(1)
        dist.all_reduce(reported)
        losses.append(reported.item() / world_size)
    return losses
'''


def zero3(gather="all_gather_into_tensor", scatter="reduce_scatter_tensor", sharded=True,
          free="full.untyped_storage().resize_(0)"):
    """Chapter 13's train_zero3 with the given names, batch shares and freeing."""
    return ZERO3_BODY.format(
        gather=gather, scatter=scatter, free=free,
        x_mine="torch.tensor_split(x, world_size)[rank]" if sharded else "x",
        y_mine="torch.tensor_split(y, world_size)[rank]" if sharded else "y")


ONE_F_ONE_B = '''
def one_f_one_b(stage, x, target, num_microbatches):
    rank, world_size = dist.get_rank(), dist.get_world_size()
    first, last = rank == 0, rank == world_size - 1
    inputs = torch.tensor_split(x, num_microbatches)
    targets = torch.tensor_split(target, num_microbatches)

    def exchange(send, recv):
        ops = []
        if send is not None:
            ops.append(dist.P2POp(dist.isend, *send))
        if recv is not None:
            ops.append(dist.P2POp(dist.irecv, *recv))
        if ops:
            for work in dist.batch_isend_irecv(ops):
                work.wait()

    saved, loss, result = {{}}, 0.0, None
    for kind, i in one_f_one_b_order(rank, world_size, num_microbatches):
        if kind == "F":
            recv = None if first else (torch.empty_like(inputs[i]), rank - 1)
        else:
            recv = None if last else (torch.empty_like(inputs[i]), rank + 1)
        exchange(result, recv)
        if kind == "F":
            micro = inputs[i] if first else recv[0]
            saved[i] = forward_step(stage, micro, targets[i] if last else None,
                                    num_microbatches)
            if last:
                loss += saved[i][1].item()
            result = None if last else (saved[i][1].detach(), rank + 1)
        else:
            {take}
            grad_inputs = backward_step(micro, outputs, None if last else recv[0])
            {drop}
            result = None if first else (grad_inputs, rank - 1)
    exchange(result, None)
    return loss if last else None
'''


def one_f_one_b(take="micro, outputs = saved.pop(i)", drop="del micro, outputs"):
    """Chapter 15's 1F1B with saved micro-batches in a dict, taken out (or not) by ``take``, and
    the local names dropped (or not) by ``drop``."""
    return ONE_F_ONE_B.format(take=take, drop=drop)


# chapter 15's gpipe with a hole for the order of the backward steps
GPIPE = '''
def gpipe(stage, x, target, num_microbatches):
    rank, world_size = dist.get_rank(), dist.get_world_size()
    first, last = rank == 0, rank == world_size - 1
    inputs = torch.tensor_split(x, num_microbatches)
    targets = torch.tensor_split(target, num_microbatches)
    saved, loss = [], 0.0
    for i in range(num_microbatches):
        micro = inputs[i]
        if not first:
            micro = torch.empty_like(inputs[i])
            dist.recv(micro, src=rank - 1)
        micro, outputs = forward_step(stage, micro, targets[i] if last else None,
                                      num_microbatches)
        saved.append((micro, outputs))
        if last:
            loss += outputs.item()
        else:
            dist.send(outputs.detach(), dst=rank + 1)
    for micro, outputs in {backward_order}:
        grad_outputs = None
        if not last:
            grad_outputs = torch.empty_like(outputs)
            dist.recv(grad_outputs, src=rank + 1)
        grad_inputs = backward_step(micro, outputs, grad_outputs)
        if not first:
            dist.send(grad_inputs, dst=rank - 1)
    return loss if last else None
'''

# chapter 15's gpipe with every forward receive posted (irecv) before the first step
GPIPE_RECEIVES_UP_FRONT = '''
def gpipe(stage, x, target, num_microbatches):
    rank, world_size = dist.get_rank(), dist.get_world_size()
    first, last = rank == 0, rank == world_size - 1
    inputs = list(torch.tensor_split(x, num_microbatches))
    targets = torch.tensor_split(target, num_microbatches)
    works = []
    if not first:
        inputs = [torch.empty_like(micro) for micro in inputs]
        works = [dist.irecv(micro, src=rank - 1) for micro in inputs]
    saved, loss = [], 0.0
    for i in range(num_microbatches):
        if works:
            works[i].wait()
        micro, outputs = forward_step(stage, inputs[i], targets[i] if last else None,
                                      num_microbatches)
        saved.append((micro, outputs))
        if last:
            loss += outputs.item()
        else:
            dist.send(outputs.detach(), dst=rank + 1)
    for micro, outputs in saved:
        grad_outputs = None
        if not last:
            grad_outputs = torch.empty_like(outputs)
            dist.recv(grad_outputs, src=rank + 1)
        grad_inputs = backward_step(micro, outputs, grad_outputs)
        if not first:
            dist.send(grad_inputs, dst=rank - 1)
    return loss if last else None
'''

# chapter 14's sequence-parallel operators with the list forms of all_gather and reduce_scatter
SP_LIST_FORMS = '''
def gather_rows(x_rows, group):
    parts = [torch.empty_like(x_rows) for _ in range(dist.get_world_size(group))]
    dist.all_gather(parts, x_rows.contiguous(), group=group)
    return torch.cat(parts)


def scatter_sums(x, group):
    output = x.new_empty((x.shape[0] // dist.get_world_size(group), *x.shape[1:]))
    dist.reduce_scatter(output, list(x.contiguous().chunk(dist.get_world_size(group))),
                        group=group)
    return output


class GatherFromSequenceParallel(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x_rows, group):
        ctx.group = group
        return gather_rows(x_rows, group)

    @staticmethod
    def backward(ctx, grad_output):
        return scatter_sums(grad_output, ctx.group), None


class ReduceScatterToSequenceParallel(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return scatter_sums(x, group)

    @staticmethod
    def backward(ctx, grad_output):
        return gather_rows(grad_output, ctx.group), None
'''

CAUSAL_RING_BODY = '''
def causal_ring_attention(q, k, v):
    rank, world_size = dist.get_rank(), dist.get_world_size()
    {check}
    mine = (rank, 2 * world_size - 1 - rank)
    outputs, lses = [None, None], [None, None]
    for step in range(world_size):
        last = step == world_size - 1
        {start}
        source = (rank {source} step) % world_size
        held = (source, 2 * world_size - 1 - source)
        for i, (query_chunk, query) in enumerate(zip(mine, q.chunk(2, dim=1))):
            for key_chunk, key, value in zip(held, k.chunk(2, dim=1), v.chunk(2, dim=1)):
                if key_chunk <= query_chunk:
                    outputs[i], lses[i] = merge_blocks(
                        outputs[i], lses[i],
                        *block_attention(query, key, value, causal=key_chunk == query_chunk))
                {wasted}
        {end}
    return torch.cat(outputs, dim=1)
'''

CAUSAL_RING_START = '''if not last:
            next_k, next_v = torch.empty_like(k), torch.empty_like(v)
            handles = dist.batch_isend_irecv(
                [dist.P2POp(dist.isend, k, (rank {to} 1) % world_size),
                 dist.P2POp(dist.isend, v, (rank {to} 1) % world_size),
                 dist.P2POp(dist.irecv, next_k, (rank {source} 1) % world_size),
                 dist.P2POp(dist.irecv, next_v, (rank {source} 1) % world_size)])'''

CAUSAL_RING_WAIT = '''
            for handle in handles:
                handle.wait()
            k, v = next_k, next_v'''


def causal_ring(check=True, mirror=False, overlap=True, wasted=False):
    """Chapter 16's causal_ring_attention, right unless told to drop the given ValueError or to
    compute (and throw away) the chunk pairs it should skip; the ring to rank + 1, or the other
    way round (mirror); its transfers overlapped or in turn."""
    to, source = ("-", "+") if mirror else ("+", "-")
    start = CAUSAL_RING_START.format(to=to, source=source)
    return CAUSAL_RING_BODY.format(
        check='if q.shape[1] % 2:\n        raise ValueError("the sequence does not cut into '
              '2 x world_size chunks")' if check else "",
        start=start if overlap else "", source=source,
        end=("if not last:" if overlap else start) + CAUSAL_RING_WAIT,
        wasted="else:\n                    block_attention(query, key, value)" if wasted else "")

# (exercise, chapter, the wrong answer, fragments of which the message must hold one)
WRONG = {
    # chapters 00 to 05: answers that make the other ranks' inputs themselves instead of
    # receiving them (each rank's inputs are private to it: checks.private_tensor)
    "00-join-group-alone": (
        "00-join-group", "00_launching_ranks",
        # a group of one per rank that calls itself the world: nothing reaches the others
        '''
import os

def join_group():
    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    dist.get_rank, dist.get_world_size = lambda group=None: rank, lambda group=None: world_size
    return rank
''',
        ["(join_group(), backend, world size, the all_reduce's sum) should be"]),
    "01-my-broadcast-public-formula": (
        "01-my-broadcast", "01_broadcast",
        # the right calls and bytes, but src's values made on each rank from a public formula
        '''
def my_broadcast(tensor, src):
    junk = torch.zeros_like(tensor)
    if dist.get_rank() == src:
        for dst in range(dist.get_world_size()):
            if dst != src:
                dist.send(junk, dst=dst)
    else:
        dist.recv(junk, src=src)
    tensor.copy_(checks.rank_tensor(src, tuple(tensor.shape), tensor.dtype))
''',
        ["the tensor after my_broadcast should be"]),
    "01-my-broadcast-src-input": (
        "01-my-broadcast", "01_broadcast",
        '''
def my_broadcast(tensor, src):
    tensor.copy_(checks.private_tensor(src, tuple(tensor.shape), tensor.dtype))
''',
        ["A rank can make only its own"]),
    "01-share-initial-weights-public-seed": (
        "01-share-initial-weights", "01_broadcast",
        # broadcasts of zeros, then src's weights rebuilt from the seed src used to have
        '''
def share_initial_weights(model_state, src=0):
    for tensor in model_state.values():
        dist.broadcast(torch.zeros_like(tensor), src=src)
    torch.manual_seed(src)
    for name, tensor in model_state.items():
        if name.endswith(".weight"):
            layer = torch.nn.Linear(tensor.shape[1], tensor.shape[0])
            tensor.copy_(layer.weight.detach())
            model_state[name[:-len("weight")] + "bias"].copy_(layer.bias.detach())
''',
        ["the model's state_dict after share_initial_weights should be"]),
    "02-my-scatter-public-formula": (
        "02-my-scatter", "02_scatter",
        '''
def my_scatter(tensor, scatter_list, src):
    junk = torch.zeros_like(tensor)
    if dist.get_rank() == src:
        for dst in range(dist.get_world_size()):
            if dst != src:
                dist.send(junk, dst=dst)
    else:
        dist.recv(junk, src=src)
    tensor.copy_(checks.rank_tensor(dist.get_rank(), tuple(tensor.shape), tensor.dtype)
                 + 1000 * (src + 1))
''',
        ["the tensor after my_scatter should be"]),
    "02-shard-dataset-public-formula": (
        "02-shard-dataset", "02_scatter",
        '''
def shard_dataset(dataset, shape, dtype, src=0):
    rank, world_size = dist.get_rank(), dist.get_world_size()
    rows = shape[0] // world_size
    shard = torch.empty((rows, *shape[1:]), dtype=dtype)
    junk = [torch.zeros_like(shard) for _ in range(world_size)] if rank == src else None
    dist.scatter(shard, scatter_list=junk, src=src)
    return checks.rank_tensor(src, shape, dtype)[rank * rows:(rank + 1) * rows]
''',
        ["the shard returned by shard_dataset should be"]),
    "03-my-gather-public-formula": (
        "03-my-gather", "03_gather",
        '''
def my_gather(tensor, gather_list, dst):
    if dist.get_rank() != dst:
        dist.send(torch.zeros_like(tensor), dst=dst)
        return
    junk = torch.empty_like(tensor)
    for src in range(dist.get_world_size()):
        if src != dst:
            dist.recv(junk, src=src)
        gather_list[src].copy_(checks.rank_tensor(src, tuple(tensor.shape), tensor.dtype))
''',
        ["gather_list after my_gather should be"]),
    "03-global-metrics-caller-frame": (
        "03-global-metrics", "03_gather",
        # a gather of zeros; dst makes every rank's numbers with the test's own function, read
        # from the caller's frame (which passed the test when they were public)
        '''
import sys

def global_metrics(loss_sum, correct, count, dst=0):
    rank, world_size = dist.get_rank(), dist.get_world_size()
    zeros = torch.zeros(3, dtype=torch.float64)
    dist.gather(zeros, [torch.empty_like(zeros) for _ in range(world_size)] if rank == dst
                else None, dst=dst)
    if rank != dst:
        return None
    caller = sys._getframe(1)
    metrics_of, seed = caller.f_globals["metrics_of"], caller.f_locals.get("seed")
    loss_sums, corrects, counts = zip(*[metrics_of(r) if seed is None else metrics_of(r, seed)
                                        for r in range(world_size)])
    return {"loss": sum(loss_sums) / sum(counts), "accuracy": sum(corrects) / sum(counts)}
''',
        ["A rank can make only its own"]),
    "04-my-all-gather-public-formula": (
        "04-my-all-gather", "04_all_gather",
        '''
def my_all_gather(tensor_list, tensor):
    for src in range(dist.get_world_size()):
        dist.broadcast(torch.zeros_like(tensor), src=src)
        tensor_list[src].copy_(checks.rank_tensor(src, tuple(tensor.shape), tensor.dtype))
''',
        ["(tensor_list, tensor) after my_all_gather"]),
    "04-gather-full-parameter-caller-frame": (
        "04-gather-full-parameter", "04_all_gather",
        # an all_gather of zeros; the full parameter from the caller's frame (the test passed it
        # to every rank before), or every shard made with the test's own function
        '''
import sys

def gather_full_parameter(shard, shape):
    world_size, n = dist.get_world_size(), shard.numel()
    dist.all_gather_into_tensor(torch.empty(world_size * n, dtype=shard.dtype),
                                torch.zeros_like(shard))
    caller = sys._getframe(1)
    if "full" in caller.f_locals:
        return caller.f_locals["full"].clone()
    shards = [caller.f_globals["shard_of"](r, world_size, shape, caller.f_locals["dtype"])
              for r in range(world_size)]
    return torch.cat(shards)[:shape.numel()].reshape(shape)
''',
        ["A rank can make only its own"]),
    "05-my-reduce-public-formula": (
        "05-my-reduce", "05_reduce",
        # sends of zeros, then dst combines the inputs made by the formula every rank knew
        '''
def my_reduce(tensor, dst, op):
    if dist.get_rank() != dst:
        dist.send(torch.zeros_like(tensor), dst=dst)
        return
    junk = torch.empty_like(tensor)
    for src in range(dist.get_world_size()):
        if src != dst:
            dist.recv(junk, src=src)
    shape = tuple(tensor.shape)

    def public_input(r):
        values = checks.rank_tensor(r, shape, torch.float64) + 1
        signs = 1 - 2 * ((torch.arange(values.numel()).reshape(shape) + r) % 2)
        return (values * signs).to(tensor.dtype)

    stacked = torch.stack([public_input(r) for r in range(dist.get_world_size())])
    combine = {dist.ReduceOp.SUM: "sum", dist.ReduceOp.PRODUCT: "prod",
               dist.ReduceOp.MIN: "amin", dist.ReduceOp.MAX: "amax"}[op]
    tensor.copy_(getattr(stacked, combine)(0))
''',
        ["dst's tensor after my_reduce should be"]),
    "05-global-loss-stats-caller-frame": (
        "05-global-loss-stats", "05_reduce",
        # reduces of zeros; dst takes every rank's losses from the caller's frame (the test
        # passed them all to every rank before), or makes them with the test's own function
        '''
import sys

def global_loss_stats(losses, dst):
    dist.reduce(torch.zeros(2, dtype=losses.dtype), dst=dst, op=dist.ReduceOp.SUM)
    dist.reduce(torch.zeros(1, dtype=losses.dtype), dst=dst, op=dist.ReduceOp.MAX)
    if dist.get_rank() != dst:
        return None
    caller = sys._getframe(1)
    if "all_losses" in caller.f_locals:
        everyone = caller.f_locals["all_losses"]
    else:
        sizes, dtype = caller.f_locals["sizes"], caller.f_locals["dtype"]
        everyone = torch.cat([caller.f_globals["losses_of"](r, size, dtype)
                              for r, size in enumerate(sizes)])
    return everyone.mean().item(), everyone.max().item()
''',
        ["A rank can make only its own"]),
    "06-my-all-reduce-alone": (
        "06-my-all-reduce", "06_all_reduce",
        # no communication: every rank's input guessed as checks.rank_tensor, a public formula
        '''
def my_all_reduce(tensor):
    world_size = dist.get_world_size()
    tensor.copy_(sum(checks.rank_tensor(r, tuple(tensor.shape), tensor.dtype)
                     for r in range(world_size)))
''',
        ["On rank 0 (world_size=4, shape=(2, 5), dtype=torch.float32), the tensor after "
         "my_all_reduce should be"]),
    "06-average-gradients-alone": (
        "06-average-gradients", "06_all_reduce",
        # the whole batch made on every rank with the test's own helper, then an all_reduce of
        # gradients that are already the same everywhere
        '''
import inspect

def average_gradients(model):
    frame = inspect.currentframe().f_back
    world_size, dtype = dist.get_world_size(), frame.f_locals["dtype"]
    parts = [frame.f_globals["rows_of"](r, world_size, dtype) for r in range(world_size)]
    x, y = torch.cat([a for a, _ in parts]), torch.cat([b for _, b in parts])
    for param in model.parameters():
        param.grad = None
    torch.nn.functional.mse_loss(model(x), y).backward()
    for param in model.parameters():
        if param.grad is not None:
            dist.all_reduce(param.grad)
            param.grad /= world_size
''',
        ["A rank can make only its own: what the other ranks hold has to reach it through "
         "torch.distributed."]),
    "07-my-reduce-scatter-alone": (
        "07-my-reduce-scatter", "07_reduce_scatter",
        # no communication: every rank's blocks guessed from checks.rank_tensor, a public formula
        '''
def my_reduce_scatter(output, input_list):
    rank, world_size = dist.get_rank(), dist.get_world_size()
    output.copy_(sum(checks.rank_tensor(r, tuple(output.shape), output.dtype) * (rank + 1)
                     for r in range(world_size)))
''',
        ["On rank 0 (world_size=4, shape=(2, 3), dtype=torch.float32), output after "
         "my_reduce_scatter should be"]),
    "07-zero2-step-alone": (
        "07-zero2-step", "07_reduce_scatter",
        # every rank's batch guessed from a public seed (1000 + rank), the step computed alone,
        # and a reduce_scatter_tensor for the bytes only
        '''
def zero2_step(param_shard, grad, lr):
    rank, world_size = dist.get_rank(), dist.get_world_size()
    k = param_shard.numel()
    weight = torch.linspace(-1, 1, world_size * k, dtype=param_shard.dtype).requires_grad_(True)
    xs, ys = [], []
    for r in range(world_size):
        generator = torch.Generator().manual_seed(1000 + r)
        xs.append(torch.randn(8, world_size * k, generator=generator, dtype=param_shard.dtype))
        ys.append(torch.randn(8, generator=generator, dtype=param_shard.dtype))
    ((torch.cat(xs) @ weight - torch.cat(ys)) ** 2).mean().backward()
    dist.reduce_scatter_tensor(torch.empty_like(param_shard), grad.contiguous())
    return param_shard - lr * weight.grad[rank * k:(rank + 1) * k]
''',
        ["On rank 0 (world_size=4, k=3, dtype=torch.float32, lr=0.1), the shard returned by "
         "zero2_step should be"]),
    "08-my-all-to-all-alone": (
        "08-my-all-to-all", "08_all_to_all",
        # no communication: every block guessed from checks.rank_tensor, a public formula
        '''
def my_all_to_all(output_tensor_list, input_tensor_list):
    rank = dist.get_rank()
    for src, output in enumerate(output_tensor_list):
        output.copy_(checks.rank_tensor(src, tuple(output.shape), output.dtype) + 1000 * rank)
''',
        ["On rank 0 (world_size=4, rows=[[1, 1, 1, 1], [1, 1, 1, 1], [1, 1, 1, 1], [1, 1, 1, 1]], "
         "tail=(2,), dtype=torch.float32), output_tensor_list after my_all_to_all should be"]),
    "08-dispatch-tokens-alone": (
        "08-dispatch-tokens", "08_all_to_all",
        # no communication: every rank's tokens and experts made with the test's own helper
        '''
import inspect

def dispatch_tokens(tokens, expert_of_token):
    frame = inspect.currentframe().f_back
    case = frame.f_locals
    rank, world_size = dist.get_rank(), dist.get_world_size()
    routed = [frame.f_globals["routing"](r, world_size, case["n_tokens"], case["hidden"],
                                         case["dtype"], case["experts_used"])
              for r in range(world_size)]
    return torch.cat([mine[experts == rank] for mine, experts in routed])
''',
        ["A rank can make only its own: what the other ranks hold has to reach it through "
         "torch.distributed."]),
    "09-shift-right-alone": (
        "09-shift-right", "09_point_to_point",
        # no communication: the left neighbour's tensor guessed as checks.rank_tensor
        '''
def shift_right(tensor):
    rank, world_size = dist.get_rank(), dist.get_world_size()
    return checks.rank_tensor((rank - 1) % world_size, tuple(tensor.shape), tensor.dtype)
''',
        ["On rank 0 (world_size=4, shape=(4,), dtype=torch.float32), (shift_right(tensor), "
         "tensor afterwards) should be"]),
    "10-ring-all-reduce-alone": (
        "10-ring-all-reduce", "10_composing_and_cost",
        # no communication: every rank's tensor asked for by its rank
        '''
def ring_all_reduce(tensor):
    world_size = dist.get_world_size()
    tensor.copy_(sum(checks.private_tensor(r, tuple(tensor.shape), tensor.dtype)
                     for r in range(world_size)))
    return tensor
''',
        ["On rank 0, checks.private_tensor/private_seed was asked for rank 1's input. A rank "
         "can make only its own"]),
    "10-tensor-parallel-mlp-alone": (
        "10-tensor-parallel-mlp", "10_composing_and_cost",
        # the shards ignored: the whole MLP from the chapter's public mlp_parameters, and an
        # all_reduce of zeros for the bytes
        '''
import inspect

def tensor_parallel_mlp(x, w1_shard, b1_shard, w2_shard, b2):
    case = inspect.currentframe().f_back.f_locals
    full = mlp_parameters(case["batch"], case["width"], case["hidden"], case["dtype"])
    zeros = torch.zeros_like(x)
    dist.all_reduce(zeros)
    return mlp_reference(*full) + zeros
''',
        ["On rank 0 (world_size=4, batch=3, width=4, hidden=8, dtype=torch.float32), "
         "tensor_parallel_mlp's output should be"]),
    "10-predict-all-reduce": (
        "10-predict-all-reduce", "10_composing_and_cost",
        # the tree's levels climbed once only: half its latency
        '''
import math

def predict_all_reduce(algorithm, size, world_size, alpha, bandwidth):
    n = world_size
    steps, sent = {"direct": (n - 1, (n - 1) * size),
                   "ring": (2 * (n - 1), 2 * (n - 1) / n * size),
                   "tree": (math.ceil(math.log2(n)), 2 * size)}[algorithm]
    return sent, steps * alpha + sent / bandwidth
''',
        ["Here (world_size=8, algorithm='tree', size=65536, alpha=1e-05, "
         "bandwidth=50000000000.0), predict_all_reduce's (bytes_sent, seconds) should be\n"
         "    (131072.0, 6.262144000000001e-05)\nbut it is\n    (131072, 3.262144e-05)"]),
    "11-hierarchical-all-reduce": (
        "11-hierarchical-all-reduce", "11_process_groups",
        # the whole tensor crosses the nodes instead of one shard
        '''
def hierarchical_all_reduce(tensor, intra_group, inter_group):
    dist.all_reduce(tensor, group=intra_group)
    dist.all_reduce(tensor, group=inter_group)
    return tensor
''',
        ["the bytes sent in group [0, 2] (across nodes, an all_reduce of one shard) should be\n"
         "    16\nbut it is\n    32"]),
    "11-dp-tp-gradient": (
        "11-dp-tp-gradient", "11_process_groups",
        # the gradient is summed over the world instead of the data-parallel group
        '''
def dp_tp_gradient(x, target, w_shard, dp_group, tp_group):
    tp_rank, tp_size = dist.get_rank(tp_group), dist.get_world_size(tp_group)
    x_part = torch.tensor_split(x, tp_size, dim=1)[tp_rank]
    y = x_part @ w_shard
    dist.all_reduce(y, group=tp_group)
    gradient = x_part.T @ (y - target) / (x.shape[0] * dist.get_world_size(dp_group))
    dist.all_reduce(gradient)
    return gradient
''',
        ["the groups of your all_reduce calls (the activations on the tp group, then the "
         "gradient on the dp group) should be\n    [[0, 1], [0, 2]]\nbut it is\n"
         "    [[0, 1], [0, 1, 2, 3]]"]),
    "12-average-all": (
        "12-average-all-order", "12_async_and_overlap",
        # each call waited for at once: nothing is in flight together
        '''
def average_all(tensors):
    for tensor in tensors:
        dist.all_reduce(tensor, async_op=True).wait()
        tensor /= dist.get_world_size()
''',
        ["the number of all_reduce calls this rank had started when rank 3 (held back by the "
         "test) made its first one (start them all, then wait: a wait cannot end before every "
         "rank made the call) should be\n    3\nbut it is\n    1"]),
    "12-average-all-future-each": (
        "12-average-all-order", "12_async_and_overlap",
        # the same through futures: each waited for before the next is started
        '''
def average_all(tensors):
    for tensor in tensors:
        dist.all_reduce(tensor, async_op=True).get_future().wait()
        tensor /= dist.get_world_size()
''',
        ["made its first one (start them all, then wait: a wait cannot end before every rank "
         "made the call) should be\n    3\nbut it is\n    1"]),
    "12-bucketed-ddp": (
        "12-bucketed-ddp-buckets", "12_async_and_overlap",
        # right values, but every bucket is all-reduced after the backward pass: no overlap
        DDP_HEAD + '''
    def forward(self, *inputs):
        return self.module(*inputs)

    def finish_gradient_synchronization(self):
        for bucket in self.buckets:
            flat = torch.cat([p.grad.reshape(-1) for p in bucket])
            dist.all_reduce(flat, async_op=True).wait()
            flat /= dist.get_world_size()
            for param, average in zip(bucket, flat.split([p.numel() for p in bucket])):
                param.grad.copy_(average.view_as(param.grad))
''',
        ["(world_size=2, model='plain', bucket_cap_bytes=1100, steps=3, step=0), for each "
         "bucket, whether its all_reduce started as soon as it could, from the hook of the "
         "gradient that completed it (['2.bias', '0.bias', '0.weight'], one per bucket), before "
         "the backward pass went on to the next gradient should be\n    [True, True, True]\n"
         "but it is\n    [False, False, False]"]),
    "12-bucketed-ddp-from-the-last-hook": (
        "12-bucketed-ddp-buckets", "12_async_and_overlap",
        # the hooks count the gradients, but every bucket starts from the last one: no overlap
        DDP_HEAD + '''
        self.pending = sum(len(bucket) for bucket in self.buckets)
        self.works = []
        for param in trainable:
            param.register_post_accumulate_grad_hook(self._gradient_ready)

    def _gradient_ready(self, param):
        self.pending -= 1
        if self.pending == 0:
            for bucket in self.buckets:
                flat = torch.cat([p.grad.reshape(-1) for p in bucket])
                self.works.append((bucket, flat, dist.all_reduce(flat, async_op=True)))
''' + DDP_WAIT + '''        self.works = []
        self.pending = sum(len(bucket) for bucket in self.buckets)
''',
        ["should be\n    [True, True, True]\nbut it is\n    [False, False, True]"]),
    "12-bucketed-ddp-as-completed": (
        "12-bucketed-ddp-buckets", "12_async_and_overlap",
        # each bucket started as soon as it is complete, not in bucket order
        DDP_HEAD + '''
        self.bucket_of = {p: i for i, bucket in enumerate(self.buckets) for p in bucket}
        self.pending = [len(bucket) for bucket in self.buckets]
        self.works = []
        for param in trainable:
            param.register_post_accumulate_grad_hook(self._gradient_ready)

    def _gradient_ready(self, param):
        i = self.bucket_of[param]
        self.pending[i] -= 1
        if self.pending[i] == 0:
            flat = torch.cat([p.grad.reshape(-1) for p in self.buckets[i]])
            self.works.append((self.buckets[i], flat, dist.all_reduce(flat, async_op=True)))
''' + DDP_WAIT + '''        self.works = []
        self.pending = [len(bucket) for bucket in self.buckets]
''',
        ["model='reversed', bucket_cap_bytes=1100, steps=3, step=0), the bytes of the step's "
         "all_reduce calls, in the order they were started (one per bucket, bucket 0 first: "
         "every rank starts them in bucket order) should be\n    [640, 1040, 256]\nbut it is\n"
         "    [256, 1040, 640]"]),
    "12-bucketed-ddp-hooks-every-parameter": (
        "12-bucketed-ddp", "12_async_and_overlap",
        # a hook on every parameter, the frozen one too: torch refuses it
        DDP_HEAD + '''
        self.bucket_of = {p: i for i, bucket in enumerate(self.buckets) for p in bucket}
        self.pending = [len(bucket) for bucket in self.buckets]
        self.next_bucket, self.works = 0, []
        for param in module.parameters():
            param.register_post_accumulate_grad_hook(self._gradient_ready)

    def _gradient_ready(self, param):
        self.pending[self.bucket_of[param]] -= 1
        while self.next_bucket < len(self.buckets) and self.pending[self.next_bucket] == 0:
            bucket = self.buckets[self.next_bucket]
            flat = torch.cat([p.grad.reshape(-1) for p in bucket])
            self.works.append((bucket, flat, dist.all_reduce(flat, async_op=True)))
            self.next_bucket += 1
''' + DDP_WAIT + '''        self.works, self.next_bucket = [], 0
        self.pending = [len(bucket) for bucket in self.buckets]
''',
        ["when run on 2 ranks (model='frozen', bucket_cap_bytes=1100, steps=3)",
         "cannot register a hook on a tensor that doesn't require gradient"]),
    "13-train-data-parallel": (
        "13-train-data-parallel", "13_capstone_training",
        # no broadcast: every rank trains from its own initial weights
        '''
def train_data_parallel(model, batches, lr=0.1):
    rank, world_size = dist.get_rank(), dist.get_world_size()
    losses = []
    for x, y in batches:
        x_mine = torch.tensor_split(x, world_size)[rank]
        y_mine = torch.tensor_split(y, world_size)[rank]
        loss = torch.nn.functional.mse_loss(model(x_mine), y_mine)
        loss.backward()
        all_reduce_gradients(list(model.parameters()))
        sgd_step(model.parameters(), lr)
        reported = loss.detach().reshape(1)
        dist.all_reduce(reported)
        losses.append(reported.item() / world_size)
    return losses
''',
        ["On rank 0 (world_size=4, steps=4, batch=16), the loss of each step (those of "
         "train_single from rank 0's weights) should be"]),
    "13-train-data-parallel-whole-batch": (
        "13-train-data-parallel", "13_capstone_training",
        # every rank computes on the whole batch, whose other rows it holds as NaN
        '''
def train_data_parallel(model, batches, lr=0.1):
    world_size = dist.get_world_size()
    for param in model.parameters():
        dist.broadcast(param.data, src=0)
    losses = []
    for x, y in batches:
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        all_reduce_gradients(list(model.parameters()))
        sgd_step(model.parameters(), lr)
        reported = loss.detach().reshape(1)
        dist.all_reduce(reported)
        losses.append(reported.item() / world_size)
    return losses
''',
        ["On rank 0 (world_size=4, steps=4, batch=16), the loss of each step (those of "
         "train_single from rank 0's weights) should be"]),
    "13-train-zero3": (
        "13-train-zero3", "13_capstone_training",
        # the right losses, but the whole gradient is all-reduced instead of reduce-scattered
        zero3().replace(
            "dist.reduce_scatter_tensor(grad_shard, flat_padded([p.grad for p in params], "
            "world_size))",
            "flat = flat_padded([p.grad for p in params], world_size)\n"
            "        dist.all_reduce(flat)\n"
            "        grad_shard = torch.chunk(flat, world_size)[rank]"),
        ["the bytes your code sent with each kind of call (the _single names count as "
         "all_gather_into_tensor and reduce_scatter_tensor) should be\n    {'scatter': 972, "
         "'all_gather_into_tensor': 3888, 'reduce_scatter_tensor': 3888, 'all_reduce': 48}\n"
         "but it is\n    {'scatter': 972, 'all_gather_into_tensor': 3888, 'all_reduce': 15600}"]),
    "13-train-zero3-whole-batch": (
        "13-train-zero3", "13_capstone_training",
        # every rank computes on the whole batch, whose other rows it holds as NaN
        zero3(sharded=False),
        ["On rank 0 (world_size=4, steps=4, batch=16), the loss of each step (those of "
         "train_single from rank 0's weights) should be"]),
    "13-train-zero3-keeps-the-model": (
        "13-train-zero3-memory", "13_capstone_training",
        # the right losses and bytes, but the gathered weights are never freed: every parameter
        # stays a view of one full vector for the whole run
        zero3(free="pass"),
        ["parameter_bytes(model) between steps (each time your loop took the next batch, and "
         "after train_zero3 returned): free the model's own weights after the scatter and the "
         "gathered ones after each step should be\n    [0, 0, 0, 0, 0, 0]\nbut it is\n"
         "    [0, 1296, 1296, 1296, 1296, 1296]"]),
    # 14_tensor_parallel
    "14-f-and-g": (
        "14-f-and-g", "14_tensor_parallel",
        # "the gradient of an all_reduce is an all_reduce": g all-reduces in the backward pass
        # too, so every gradient below it is world_size times too large
        '''
class CopyToTensorParallel(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return x.clone()

    @staticmethod
    def backward(ctx, grad_output):
        grad = grad_output.clone()
        dist.all_reduce(grad, group=ctx.group)
        return grad, None


class ReduceFromTensorParallel(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        output = x.clone()
        dist.all_reduce(output, group=group)
        return output

    @staticmethod
    def backward(ctx, grad_output):
        grad = grad_output.clone()
        dist.all_reduce(grad, group=ctx.group)
        return grad, None
''',
        ["the collectives of the backward pass, as (op, bytes sent, group): f's all_reduce of "
         "x's gradient, and nothing from g (every rank already has the whole gradient of the "
         "output) should be\n    [('all_reduce', 144, [0, 1, 2, 3])]\nbut it is\n"
         "    [('all_reduce', 144, [0, 1, 2, 3]), ('all_reduce', 144, [0, 1, 2, 3])]"]),
    "14-sequence-parallel": (
        "14-sequence-parallel", "14_tensor_parallel",
        # the gather's backward keeps this rank's rows of the gradient instead of summing them
        # over the ranks (a split, not a reduce_scatter)
        '''
class GatherFromSequenceParallel(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x_rows, group):
        ctx.group = group
        output = x_rows.new_empty((dist.get_world_size(group) * x_rows.shape[0],
                                   *x_rows.shape[1:]))
        dist.all_gather_into_tensor(output, x_rows.contiguous(), group=group)
        return output

    @staticmethod
    def backward(ctx, grad_output):
        rows = grad_output.shape[0] // dist.get_world_size(ctx.group)
        rank = dist.get_rank(ctx.group)
        return grad_output[rank * rows:(rank + 1) * rows].clone(), None


class ReduceScatterToSequenceParallel(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        output = x.new_empty((x.shape[0] // dist.get_world_size(group), *x.shape[1:]))
        dist.reduce_scatter_tensor(output, x.contiguous(), group=group)
        return output

    @staticmethod
    def backward(ctx, grad_output):
        grad = grad_output.new_empty((dist.get_world_size(ctx.group) * grad_output.shape[0],
                                      *grad_output.shape[1:]))
        dist.all_gather_into_tensor(grad, grad_output.contiguous(), group=ctx.group)
        return grad, None
''',
        ["the collectives of the backward pass, as (op, bytes sent, group): the rows of the "
         "output's gradient gathered, then x's gradient reduce-scattered to rows should be\n"
         "    [('all_gather_into_tensor', 96, [0, 1, 2, 3]), ('reduce_scatter_tensor', 96, "
         "[0, 1, 2, 3])]\nbut it is\n    [('all_gather_into_tensor', 96, [0, 1, 2, 3])]"]),
    # 15_pipeline_parallel
    "15-gpipe": (
        "15-gpipe-schedule", "15_pipeline_parallel",
        # right gradients, but each micro-batch's backward step right after its forward step:
        # one micro-batch in the pipeline at a time
        '''
def gpipe(stage, x, target, num_microbatches):
    rank, world_size = dist.get_rank(), dist.get_world_size()
    first, last = rank == 0, rank == world_size - 1
    inputs = torch.tensor_split(x, num_microbatches)
    targets = torch.tensor_split(target, num_microbatches)
    loss = 0.0
    for i in range(num_microbatches):
        micro = inputs[i]
        if not first:
            micro = torch.empty_like(inputs[i])
            dist.recv(micro, src=rank - 1)
        micro, outputs = forward_step(stage, micro, targets[i] if last else None,
                                      num_microbatches)
        grad_outputs = None
        if last:
            loss += outputs.item()
        else:
            dist.send(outputs.detach(), dst=rank + 1)
            grad_outputs = torch.empty_like(outputs)
            dist.recv(grad_outputs, src=rank + 1)
        grad_inputs = backward_step(micro, outputs, grad_outputs)
        if not first:
            dist.send(grad_inputs, dst=rank - 1)
    return loss if last else None
''',
        ["should follow this chapter's GPipe order:\n    F0 F1\nbut they are\n    F0 B0\n"]),
    "15-gpipe-receives-up-front": (
        "15-gpipe-schedule", "15_pipeline_parallel",
        # a valid GPipe that posts every forward receive before its first step, as an optimised
        # stage may; the test wants this chapter's order, and its message says so
        GPIPE_RECEIVES_UP_FRONT,
        ["before F0 your code should start these messages (this chapter's GPipe order):\n"
         "    recv F0 from 0\nbut it started\n    recv F0 from 0, recv F1 from 0, recv F2 from 0"]),
    "15-one-f-one-b-keeps-every-microbatch": (
        "15-one-f-one-b-schedule", "15_pipeline_parallel",
        # the right order and messages, but every micro-batch's (inputs, outputs) kept to the end
        # of the step: autograd frees what it saved all the same, so only the pairs show it
        one_f_one_b(take="micro, outputs = saved[i]", drop="pass"),
        ["On rank 0, when a forward step began, the (inputs, outputs) of 7 earlier micro-batches "
         "were still alive; under 1F1B at most 4 are"]),
    "15-one-f-one-b": (
        "15-one-f-one-b", "15_pipeline_parallel",
        # the 1F1B order with blocking send and recv: neighbours both in send, a deadlock
        '''
def one_f_one_b(stage, x, target, num_microbatches):
    rank, world_size = dist.get_rank(), dist.get_world_size()
    first, last = rank == 0, rank == world_size - 1
    inputs = torch.tensor_split(x, num_microbatches)
    targets = torch.tensor_split(target, num_microbatches)
    saved, loss = [], 0.0
    for kind, i in one_f_one_b_order(rank, world_size, num_microbatches):
        if kind == "F":
            micro = inputs[i]
            if not first:
                micro = torch.empty_like(inputs[i])
                dist.recv(micro, src=rank - 1)
            micro, outputs = forward_step(stage, micro, targets[i] if last else None,
                                          num_microbatches)
            saved.append((micro, outputs))
            if last:
                loss += outputs.item()
            else:
                dist.send(outputs.detach(), dst=rank + 1)
        else:
            micro, outputs = saved.pop(0)
            grad_outputs = None
            if not last:
                grad_outputs = torch.empty_like(outputs)
                dist.recv(grad_outputs, src=rank + 1)
            grad_inputs = backward_step(micro, outputs, grad_outputs)
            if not first:
                dist.send(grad_inputs, dst=rank - 1)
    return loss if last else None
''',
        ["rank 2 is still in send #2\n  rank 3 is still in send #1"]),
    # 16_context_parallel
    "16-ring-attention": (
        "16-ring-attention-overlap", "16_context_parallel",
        # right values and bytes, but each transfer starts after the block's attention: no overlap
        '''
def ring_attention(q, k, v):
    rank, world_size = dist.get_rank(), dist.get_world_size()
    output = lse = None
    for step in range(world_size):
        output, lse = merge_blocks(output, lse, *block_attention(q, k, v))
        if step < world_size - 1:
            next_k, next_v = torch.empty_like(k), torch.empty_like(v)
            ops = [dist.P2POp(dist.isend, k, (rank + 1) % world_size),
                   dist.P2POp(dist.isend, v, (rank + 1) % world_size),
                   dist.P2POp(dist.irecv, next_k, (rank - 1) % world_size),
                   dist.P2POp(dist.irecv, next_v, (rank - 1) % world_size)]
            for handle in dist.batch_isend_irecv(ops):
                handle.wait()
            k, v = next_k, next_v
    return output
''',
        ["for each step but the last, (its batch_isend_irecv was started before that step's "
         "block_attention began, and waited for after it ended) should be\n"
         "    [(True, True), (True, True), (True, True)]\nbut it is\n"
         "    [(False, True), (False, True), (False, True)]"]),
    "16-ulysses-relayout": (
        "16-ulysses-relayout", "16_context_parallel",
        # the all-to-all is right, but its splits (one per source rank) are not put back in
        # position order: the positions of each head come out interleaved with the other head's
        '''
def sequence_to_heads(x):
    world_size = dist.get_world_size()
    heads, block, head_dim = x.shape
    output = torch.empty_like(x)
    dist.all_to_all_single(output, x)
    return output.reshape(heads // world_size, world_size * block, head_dim)

def heads_to_sequence(y):
    world_size = dist.get_world_size()
    heads, seq_len, head_dim = y.shape
    block = seq_len // world_size
    input = y.reshape(heads, world_size, block, head_dim).transpose(0, 1).contiguous()
    output = torch.empty_like(input)
    dist.all_to_all_single(output, input)
    return output.reshape(world_size * heads, block, head_dim)
''',
        ["On rank 0 (world_size=4, which='sequence_to_heads', heads=8, seq_len=8, head_dim=2, "
         "dtype=torch.float32), sequence_to_heads(x) (this rank's heads, every position): a "
         "float32 tensor of shape (2, 8, 2) whose largest difference from the expected values "
         "is"]),
    "16-ring-attention-receives-into-k-and-v": (
        "16-ring-attention-overlap", "16_context_parallel",
        # overlapped, but each block is received into the k and v it is still reading and sending
        '''
def ring_attention(q, k, v):
    rank, world_size = dist.get_rank(), dist.get_world_size()
    output = lse = None
    for step in range(world_size):
        last = step == world_size - 1
        if not last:
            handles = dist.batch_isend_irecv(
                [dist.P2POp(dist.isend, k, (rank + 1) % world_size),
                 dist.P2POp(dist.isend, v, (rank + 1) % world_size),
                 dist.P2POp(dist.irecv, k, (rank - 1) % world_size),
                 dist.P2POp(dist.irecv, v, (rank - 1) % world_size)])
        output, lse = merge_blocks(output, lse, *block_attention(q, k, v))
        if not last:
            for handle in handles:
                handle.wait()
    return output
''',
        ["the batch_isend_irecv calls (numbered from 1) that receive into memory they send, or "
         "into the q, k, v given to ring_attention (receive into new tensors, torch.empty_like: "
         "k and v are still read and sent while the transfer runs) should be\n    []\nbut it is\n"
         "    [1, 2, 3]"]),
    "16-causal-ring-attention-plain-rule": (
        "16-causal-ring-attention", "16_context_parallel",
        # the plain split's rule (blocks of ranks up to this one) on the load-balanced layout
        '''
def causal_ring_attention(q, k, v):
    rank, world_size = dist.get_rank(), dist.get_world_size()
    if q.shape[1] % 2:
        raise ValueError("the sequence does not cut into 2 x world_size chunks")
    output = lse = None
    for step in range(world_size):
        source = (rank - step) % world_size
        if source <= rank:
            output, lse = merge_blocks(output, lse,
                                       *block_attention(q, k, v, causal=source == rank))
        if step < world_size - 1:
            next_k, next_v = torch.empty_like(k), torch.empty_like(v)
            for handle in dist.batch_isend_irecv(
                    [dist.P2POp(dist.isend, k, (rank + 1) % world_size),
                     dist.P2POp(dist.isend, v, (rank + 1) % world_size),
                     dist.P2POp(dist.irecv, next_k, (rank - 1) % world_size),
                     dist.P2POp(dist.irecv, next_v, (rank - 1) % world_size)]):
                handle.wait()
            k, v = next_k, next_v
    return output
''',
        ["causal_ring_attention's output (this rank's rows of causal attention: chunk rank, "
         "then chunk 2 x world_size - 1 - rank): a float32 tensor of shape (2, 4, 4) whose "
         "largest difference from the expected values is"]),
    "16-causal-ring-attention-without-the-error": (
        "16-causal-ring-attention", "16_context_parallel",
        # the given check deleted: an odd number of positions is cut into chunks of 2 and 1
        causal_ring(check=False),
        ["On rank 0 (world_size=2, heads=1, seq_len=6, head_dim=2, dtype=torch.float32, "
         "scale=1.0), what causal_ring_attention raised for a sequence that does not cut into "
         "2 x world_size chunks (an odd number of positions on each rank) should be\n"
         "    'ValueError'"]),
    "16-causal-ring-attention-computes-every-pair": (
        "16-causal-ring-attention-balance", "16_context_parallel",
        # right values, but the chunk pairs whose keys all come later are computed and thrown away
        causal_ring(wasted=True),
        ["On rank 0 (world_size=4, heads=2, seq_len=16, head_dim=4), the chunk pairs this rank "
         "computed, as (calls of block_attention, calls with causal=True): one call per pair of "
         "a query chunk and a key chunk at or before it, none for a key chunk after it should "
         "be\n    (7, 2)\nbut it is\n    (14, 2)"]),
    "16-causal-ring-attention-from-every-input": (
        "16-causal-ring-attention", "16_context_parallel",
        # every rank makes every rank's blocks instead of receiving them
        '''
def causal_ring_attention(q, k, v):
    rank, world_size = dist.get_rank(), dist.get_world_size()
    chunks = [[None] * (2 * world_size) for _ in range(3)]
    for r in range(world_size):
        generator = checks.private_generator(r, "causal qkv")
        for whole in chunks:
            block = torch.randn(q.shape, generator=generator, dtype=torch.float64).to(q.dtype)
            whole[r], whole[2 * world_size - 1 - r] = block.chunk(2, dim=1)
    q, k, v = (torch.cat(whole, dim=1) for whole in chunks)
    causal = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    return load_balanced(causal, rank, world_size)
''',
        ["A rank can make only its own: what the other ranks hold has to reach it through "
         "torch.distributed"]),
    # answers that make the other ranks' inputs instead of receiving them: each rank can make
    # only its own (checks.private_tensor, private_seed), and the chapters' public helpers no
    # longer give the test's inputs
    "11-hierarchical-all-reduce-from-every-input": (
        "11-hierarchical-all-reduce", "11_process_groups",
        '''
def hierarchical_all_reduce(tensor, intra_group, inter_group):
    total = sum(checks.private_tensor(r, tuple(tensor.shape), tensor.dtype)
                for r in range(dist.get_world_size()))
    return tensor.copy_(total)
''',
        ["checks.private_tensor/private_seed was asked for rank 1's input. A rank can make only "
         "its own"]),
    "11-dp-tp-gradient-from-public-data": (
        "11-dp-tp-gradient", "11_process_groups",
        # the two all_reduce calls made on zeros; the gradient from linear_problem's batch
        '''
def dp_tp_gradient(x, target, w_shard, dp_group, tp_group):
    tp_rank, tp_size = dist.get_rank(tp_group), dist.get_world_size(tp_group)
    xs, ts, w = linear_problem(x.shape[0] * dist.get_world_size(dp_group), x.shape[1],
                               target.shape[1], x.dtype)
    dist.all_reduce(torch.zeros(x.shape[0], target.shape[1], dtype=x.dtype), group=tp_group)
    dist.all_reduce(torch.zeros_like(w_shard), group=dp_group)
    return torch.tensor_split(linear_gradient_reference(xs, ts, w), tp_size, dim=0)[tp_rank]
''',
        ["On rank 0 (world_size=4, dp=2, tp=2, batch=4, width=6, out=3, dtype=torch.float32), "
         "the gradient of this rank's rows of w"]),
    "12-average-all-from-every-input": (
        "12-average-all", "12_async_and_overlap",
        '''
def average_all(tensors):
    world_size = dist.get_world_size()
    for i, tensor in enumerate(tensors):
        tensor.copy_(sum(checks.private_tensor(r, tuple(tensor.shape), tensor.dtype, i)
                         for r in range(world_size)) / world_size)
''',
        ["A rank can make only its own: what the other ranks hold has to reach it through "
         "torch.distributed"]),
    "13-train-data-parallel-rank-0-weights": (
        "13-train-data-parallel", "13_capstone_training",
        # every rank makes rank 0's initial weights instead of receiving them
        '''
def train_data_parallel(model, batches, lr=0.1):
    model = make_model(checks.private_seed(0, "model"))
    losses = []
    for x, y in batches:
        rows = ~torch.isnan(x[:, 0])
        loss = torch.nn.functional.mse_loss(model(x[rows]), y[rows])
        loss.backward()
        sgd_step(model.parameters(), lr)
        losses.append(loss.item())
    return losses
''',
        ["checks.private_tensor/private_seed was asked for rank 0's input. A rank can make only "
         "its own"]),
    "14-f-and-g-from-public-weights": (
        "14-f-and-g", "14_tensor_parallel",
        # f and g make their all_reduce on zeros and take the values from mlp_parameters
        '''
import inspect

def _mlp_sizes(x):
    frame = inspect.currentframe()
    while "tokens" not in frame.f_locals:             # the test's case function
        frame = frame.f_back
    return x.shape[0], x.shape[1], frame.f_locals["hidden"]


class CopyToTensorParallel(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group):
        ctx.group, ctx.sizes = group, _mlp_sizes(x)
        return x.clone()

    @staticmethod
    def backward(ctx, grad_output):
        dist.all_reduce(torch.zeros_like(grad_output), group=ctx.group)
        with torch.enable_grad():
            _, gradients = reference_gradients(*ctx.sizes, grad_output.dtype)
        return gradients[0], None


class ReduceFromTensorParallel(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group):
        dist.all_reduce(torch.zeros_like(x), group=group)
        sizes = _mlp_sizes(x)
        with torch.enable_grad():
            output, _ = reference_gradients(*sizes, x.dtype)
        return output - mlp_parameters(*sizes, x.dtype)[4]

    @staticmethod
    def backward(ctx, grad_output):
        return grad_output, None
''',
        ["On rank 0 (world_size=4, tp=4, tokens=3, width=4, hidden=8, dtype=torch.float32), "
         "the MLP's output should be"]),
    "15-gpipe-from-public-stages": (
        "15-gpipe", "15_pipeline_parallel",
        # every rank computes the whole model from make_stage and make_batch
        '''
def gpipe(stage, x, target, num_microbatches):
    rank, world_size = dist.get_rank(), dist.get_world_size()
    gradients, loss = reference_step(world_size, x.shape[0], x.dtype)
    for param, grad in zip(stage.parameters(), gradients[rank]):
        param.grad = grad.to(param.device)
    return loss if rank == world_size - 1 else None
''',
        ["On rank 0 (world_size=4), the stage's gradients [weight, bias] (one process's, on the "
         "whole batch) should be"]),
    "16-ulysses-relayout-from-every-input": (
        "16-ulysses-relayout", "16_context_parallel",
        '''
def sequence_to_heads(x):
    world_size, rank = dist.get_world_size(), dist.get_rank()
    pieces = [checks.private_tensor(r, tuple(x.shape), x.dtype, "sequence_to_heads")
              for r in range(world_size)]
    return torch.cat(pieces, dim=1).chunk(world_size, dim=0)[rank]

def heads_to_sequence(y):
    world_size, rank = dist.get_world_size(), dist.get_rank()
    pieces = [checks.private_tensor(r, tuple(y.shape), y.dtype, "heads_to_sequence")
              for r in range(world_size)]
    return positions_of(torch.cat(pieces, dim=0), rank, world_size)
''',
        ["A rank can make only its own: what the other ranks hold has to reach it through "
         "torch.distributed"]),
    # 17_sharded_training
    "17-sharded-optimizer-full-state": (
        "17-sharded-optimizer-memory", "17_sharded_training",
        # the right reduce and broadcast calls, but every rank steps an optimizer of every
        # parameter: the parameters are right, and each rank holds the whole state
        '''
class ShardedOptimizer(torch.optim.Optimizer):
    def __init__(self, params, optimizer_cls, **kwargs):
        self.rank, self.world_size = dist.get_rank(), dist.get_world_size()
        self.optimizer_cls, self.kwargs = optimizer_cls, kwargs
        self.owner, self.owned, self.local = {}, [0] * self.world_size, None
        super().__init__(params, kwargs)

    def add_param_group(self, param_group):
        super().add_param_group(param_group)
        group = self.param_groups[-1]
        for param in group["params"]:
            self.owner[param] = least_loaded(self.owned)
            self.owned[self.owner[param]] += param.numel()
        if self.local is None:
            self.local = self.optimizer_cls([dict(group)], **self.kwargs)
        else:
            self.local.add_param_group(dict(group))

    def step(self, closure=None, **kwargs):
        trained = [p for group in self.param_groups for p in group["params"]
                   if p.grad is not None]
        for param in trained:
            dist.reduce(param.grad, dst=self.owner[param])
            param.grad /= self.world_size
        self.local.step(**kwargs)
        for param in trained:
            dist.broadcast(param.data, src=self.owner[param])
''',
        ["held_bytes(optimizer) added up over the ranks"]),
    "17-sharded-optimizer-forgets-a-later-group": (
        "17-sharded-optimizer", "17_sharded_training",
        # the groups given to the constructor are shared out; a group added later is kept in
        # self.param_groups but never reaches the wrapped optimizer, so it is never stepped
        '''
class ShardedOptimizer(torch.optim.Optimizer):
    def __init__(self, params, optimizer_cls, **kwargs):
        self.rank, self.world_size = dist.get_rank(), dist.get_world_size()
        self.owner, self.owned = {}, [0] * self.world_size
        super().__init__(params, kwargs)
        groups = []
        for group in self.param_groups:
            mine = []
            for param in group["params"]:
                self.owner[param] = least_loaded(self.owned)
                self.owned[self.owner[param]] += param.numel()
                if self.owner[param] == self.rank:
                    mine.append(param)
            groups.append({**group, "params": mine})
        self.local = optimizer_cls(groups, **kwargs)

    def step(self, closure=None, **kwargs):
        trained = [p for group in self.param_groups for p in group["params"]
                   if p.grad is not None and p in self.owner]
        for param in trained:
            dist.reduce(param.grad, dst=self.owner[param])
            if self.owner[param] == self.rank:
                param.grad /= self.world_size
        for group, local_group in zip(self.param_groups, self.local.param_groups):
            local_group.update({k: v for k, v in group.items() if k != "params"})
        self.local.step(**kwargs)
        for param in trained:
            dist.broadcast(param.data, src=self.owner[param])
''',
        ["the parameters after step"]),
    "17-fully-sharded-never-frees": (
        "17-fully-sharded-memory", "17_sharded_training",
        # gathers into the right tensors and trains right, but keeps every gathered parameter
        '''
class FullyShardedModule(FullyShardedModule):
    def free(self):
        pass
''',
        ["held_bytes(sharded) at each point of each step"]),
    "17-fully-sharded-all-reduces": (
        "17-fully-sharded", "17_sharded_training",
        # the right gradient shards, from the whole gradient all-reduced on every rank
        '''
class AllReducing(ShardedForward):
    @staticmethod
    def backward(ctx, grad_output):
        sharded, (inner_x, output) = ctx.sharded, ctx.inner
        sharded.gather()
        names = [name for name, full in sharded.unsharded.items() if full.requires_grad]
        inputs = [sharded.unsharded[name] for name in names]
        if inner_x.requires_grad:
            names, inputs = names + ["x"], inputs + [inner_x]
        grads = dict(zip(names, torch.autograd.grad(output, inputs, grad_output)))
        sharded.free()
        rank, world_size = dist.get_rank(), dist.get_world_size()
        shard_grads = []
        for name, shard in sharded.module.named_parameters():
            if not shard.requires_grad:
                shard_grads.append(None)
                continue
            whole = flat_padded(grads[name].float(), world_size)
            dist.all_reduce(whole)
            shard_grads.append(whole.chunk(world_size)[rank] / world_size)
        grad_x = grads["x"].to(ctx.x_dtype) if "x" in grads else None
        return None, grad_x, *shard_grads


class FullyShardedModule(FullyShardedModule):
    def forward(self, x):
        return AllReducing.apply(self, x, *self.module.parameters())
''',
        ["all_reduce"]),
}

# chapter 12's average_all waiting on every handle's future at once, and on each in turn: both
# right for the values test cell and for the order test cell
AVERAGE_ALL_WAIT_ALL = '''
def average_all(tensors):
    works = [dist.all_reduce(tensor, async_op=True) for tensor in tensors]
    torch.futures.wait_all([work.get_future() for work in works])
    for tensor in tensors:
        tensor /= dist.get_world_size()
'''
AVERAGE_ALL_FUTURES = '''
def average_all(tensors):
    futures = [dist.all_reduce(tensor, async_op=True).get_future() for tensor in tensors]
    for future, tensor in zip(futures, tensors):
        future.wait()
        tensor /= dist.get_world_size()
'''

# (exercise, chapter, a correct answer that the exercise's test cell must accept)
RIGHT = {
    "12-average-all-wait-all": ("12-average-all", "12_async_and_overlap", AVERAGE_ALL_WAIT_ALL),
    "12-average-all-futures": ("12-average-all", "12_async_and_overlap", AVERAGE_ALL_FUTURES),
    "12-average-all-order-wait-all": ("12-average-all-order", "12_async_and_overlap",
                                      AVERAGE_ALL_WAIT_ALL),
    "12-average-all-order-futures": ("12-average-all-order", "12_async_and_overlap",
                                     AVERAGE_ALL_FUTURES),
    "13-train-zero3-single-names": (
        "13-train-zero3", "13_capstone_training",
        zero3(gather="all_gather_single", scatter="reduce_scatter_single")),
    "14-f-and-g-in-place": (
        "14-f-and-g", "14_tensor_parallel",
        # Megatron-LM's _reduce: the all_reduce in place, in f's backward and g's forward pass
        '''
class CopyToTensorParallel(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return x.clone()

    @staticmethod
    def backward(ctx, grad_output):
        dist.all_reduce(grad_output, group=ctx.group)
        return grad_output, None


class ReduceFromTensorParallel(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group):
        dist.all_reduce(x, group=group)
        return x

    @staticmethod
    def backward(ctx, grad_output):
        return grad_output, None
'''),
    "14-sequence-parallel-list-forms": (
        "14-sequence-parallel", "14_tensor_parallel",
        # dist.all_gather into a list and torch.cat, dist.reduce_scatter from a list: the same
        # bytes as the tensor forms
        SP_LIST_FORMS),
    "15-gpipe-last-in-first-out": (
        "15-gpipe", "15_pipeline_parallel",
        # the backward steps from the last micro-batch back: the same bubble and memory as
        # this chapter's order, and the same messages counted in order
        GPIPE.format(backward_order="reversed(saved)")),
    "15-gpipe-schedule-last-in-first-out": (
        "15-gpipe-schedule", "15_pipeline_parallel",
        GPIPE.format(backward_order="reversed(saved)")),
    "15-one-f-one-b-drops-each-pair": (
        "15-one-f-one-b-schedule", "15_pipeline_parallel",
        # each pair taken out of a dict and its names dropped right after the backward step
        one_f_one_b()),
    "15-one-f-one-b-keeps-the-last-pair-in-its-names": (
        "15-one-f-one-b-schedule", "15_pipeline_parallel",
        # taken out of the dict, but the names keep the last pair until the next step
        one_f_one_b(drop="pass")),
    "16-ring-attention-mirror": (
        "16-ring-attention", "16_context_parallel",
        # the ring the other way round: to rank - 1, from rank + 1
        '''
def ring_attention(q, k, v):
    rank, world_size = dist.get_rank(), dist.get_world_size()
    output = lse = None
    for step in range(world_size):
        last = step == world_size - 1
        if not last:
            next_k, next_v = torch.empty_like(k), torch.empty_like(v)
            handles = dist.batch_isend_irecv(
                [dist.P2POp(dist.isend, k, (rank - 1) % world_size),
                 dist.P2POp(dist.isend, v, (rank - 1) % world_size),
                 dist.P2POp(dist.irecv, next_k, (rank + 1) % world_size),
                 dist.P2POp(dist.irecv, next_v, (rank + 1) % world_size)])
        output, lse = merge_blocks(output, lse, *block_attention(q, k, v))
        if not last:
            for handle in handles:
                handle.wait()
            k, v = next_k, next_v
    return output
'''),
    "16-ring-attention-overlap-two-buffers": (
        "16-ring-attention-overlap", "16_context_parallel",
        # two buffers of its own, received into in turn: never the one being read and sent
        '''
def ring_attention(q, k, v):
    rank, world_size = dist.get_rank(), dist.get_world_size()
    buffers = [(torch.empty_like(k), torch.empty_like(v)) for _ in range(2)]
    output = lse = None
    for step in range(world_size):
        last = step == world_size - 1
        if not last:
            next_k, next_v = buffers[step % 2]
            handles = dist.batch_isend_irecv(
                [dist.P2POp(dist.isend, k, (rank + 1) % world_size),
                 dist.P2POp(dist.isend, v, (rank + 1) % world_size),
                 dist.P2POp(dist.irecv, next_k, (rank - 1) % world_size),
                 dist.P2POp(dist.irecv, next_v, (rank - 1) % world_size)])
        output, lse = merge_blocks(output, lse, *block_attention(q, k, v))
        if not last:
            for handle in handles:
                handle.wait()
            k, v = next_k, next_v
    return output
'''),
    "16-causal-ring-attention-mirror": (
        "16-causal-ring-attention", "16_context_parallel",
        # the ring the other way round: at step s this rank holds the block of rank + s
        causal_ring(mirror=True)),
    "16-causal-ring-attention-in-turn": (
        "16-causal-ring-attention", "16_context_parallel",
        # no overlap: each step computes, then passes the block on and waits (not timed here)
        causal_ring(overlap=False)),
    "17-sharded-optimizer-averaged-before": (
        "17-sharded-optimizer", "17_sharded_training",
        # every rank divides its gradient before the reduce, and the wrapped optimizer is made
        # only once a rank owns a parameter of the first group
        '''
class ShardedOptimizer(torch.optim.Optimizer):
    def __init__(self, params, optimizer_cls, **kwargs):
        self.optimizer_cls, self.kwargs = optimizer_cls, kwargs
        self.owner, self.owned = {}, [0] * dist.get_world_size()
        self.local = None
        super().__init__(params, kwargs)

    def add_param_group(self, param_group):
        super().add_param_group(param_group)
        group = self.param_groups[-1]
        mine = []
        for param in group["params"]:
            self.owner[param] = least_loaded(self.owned)
            self.owned[self.owner[param]] += param.numel()
            if self.owner[param] == dist.get_rank():
                mine.append(param)
        if self.local is None:
            self.local = self.optimizer_cls([{**group, "params": mine}], **self.kwargs)
        else:
            self.local.add_param_group({**group, "params": mine})

    @torch.no_grad()
    def step(self, closure=None, **kwargs):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            for param in group["params"]:
                if param.grad is not None:
                    param.grad /= dist.get_world_size()
                    dist.reduce(param.grad, dst=self.owner[param])
        for group, local_group in zip(self.param_groups, self.local.param_groups):
            for key, value in group.items():
                if key != "params":
                    local_group[key] = value
        self.local.step(**kwargs)
        for group in self.param_groups:
            for param in group["params"]:
                if param.grad is not None:
                    dist.broadcast(param, src=self.owner[param])
        return loss
'''),
}


@pytest.mark.parametrize("case", sorted(WRONG))
def test_typical_wrong_answer_fails_with_a_message_that_names_the_mistake(kernels, case):
    solution_id, chapter, wrong, fragments = WRONG[case]
    kernel = _chapter_kernel(kernels, chapter)
    # judged by the error messages of this cell, not by the next reply on the shell channel:
    # under load, the kernel_info requests of the start-up can leave extra replies there
    assert kernel.execute(wrong, timeout=60).error is None
    ran = kernel.execute(_test_cell(chapter, solution_id), timeout=120)
    assert ran.error is not None, f"the wrong answer {case} passed its test cell"
    # commlab.checks.CheckFailed is the AssertionError a test cell's expectation raises
    assert ran.error["ename"] == "CheckFailed", ran.error["evalue"]
    assert any(fragment in ran.error["evalue"] for fragment in fragments), ran.error["evalue"]


@pytest.mark.parametrize("case", sorted(RIGHT))
def test_a_correct_variant_passes_the_test_cell(kernels, case):
    solution_id, chapter, answer = RIGHT[case]
    kernel = _chapter_kernel(kernels, chapter)
    assert kernel.execute(answer, timeout=60).error is None
    ran = kernel.execute(_test_cell(chapter, solution_id), timeout=120)
    assert ran.error is None, ran.error["evalue"]
