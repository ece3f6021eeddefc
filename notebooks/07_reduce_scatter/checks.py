"""Chapter 07's test helpers: the case functions and checks its visible test cells use.

Each test cell defines them in the notebook's namespace with ``checks.test_helpers(...)``, as
if they stood in the cell: the names they use (the answers, the chapter's own definitions, its
imports) are the notebook's. Hidden tests are not here. Validate, ``make check`` and the grader
read the course's own copy of this file (in its notebooks/ folder): a copy in your work folder
is for reading, and editing it changes nothing.
"""

import torch

from commlab import checks


# --- 07-my-reduce-scatter-test ---------------------------------------------------------------
def inputs_of(rank, world_size, shape, dtype):
    # block i of rank r: made on rank r only (and in the check)
    return [checks.private_tensor(rank, shape, dtype, "block", i) for i in range(world_size)]


def reduce_scatter_case(rank, world_size, shape, dtype):
    input_list = inputs_of(rank, world_size, shape, dtype)
    output = torch.full(shape, -1, dtype=dtype)  # left-over values to overwrite
    my_reduce_scatter(output, input_list)
    return output


def check_my_reduce_scatter(result, shape, dtype):
    world_size = result.world_size
    everyone = [inputs_of(r, world_size, shape, dtype) for r in range(world_size)]
    expected = [torch.stack([everyone[r][i] for r in range(world_size)]).sum(dim=0)
                for i in range(world_size)]
    checks.expect_per_rank(result, expected, what="output after my_reduce_scatter")
    # reduce_scatter_tensor stands for each of torch's names for it
    checks.expect_not_used(result, "reduce_scatter", "reduce_scatter_tensor")
    block = expected[0].numel() * expected[0].element_size()
    checks.expect_bytes(result, sent=[block * (world_size - 1)] * world_size,
                        received=[block * (world_size - 1)] * world_size)


# --- 07-zero2-step-test ----------------------------------------------------------------------
def batch_of(rank, n_features, dtype):
    generator = checks.private_generator(rank, "batch")  # made on rank `rank` only
    x = torch.randn(8, n_features, generator=generator, dtype=dtype)
    y = torch.randn(8, generator=generator, dtype=dtype)
    return x, y


def gradient(weight, x, y):
    weight = weight.detach().clone().requires_grad_(True)
    loss = ((x @ weight - y) ** 2).mean()
    loss.backward()
    return weight.grad


def zero2_case(rank, world_size, k, dtype, lr):
    weight = torch.linspace(-1, 1, world_size * k, dtype=dtype)  # the same on every rank
    grad = gradient(weight, *batch_of(rank, world_size * k, dtype))
    param_shard = weight[rank * k:(rank + 1) * k].clone()
    return zero2_step(param_shard, grad, lr)


def check_zero2_step(result, k, dtype, lr):
    world_size = result.world_size
    # one process, all batches at once: the step data parallelism must reproduce
    weight = torch.linspace(-1, 1, world_size * k, dtype=dtype)
    batches = [batch_of(r, world_size * k, dtype) for r in range(world_size)]
    x = torch.cat([b[0] for b in batches])
    y = torch.cat([b[1] for b in batches])
    new_weight = weight - lr * gradient(weight, x, y)
    checks.expect_per_rank(result, [new_weight[r * k:(r + 1) * k] for r in range(world_size)],
                           what="the shard returned by zero2_step")
    checks.expect_used(result, "reduce_scatter_tensor")   # or reduce_scatter_single
    shard_bytes = k * new_weight.element_size()
    checks.expect_bytes(result, sent=[shard_bytes * (world_size - 1)] * world_size,
                        received=[shard_bytes * (world_size - 1)] * world_size)
