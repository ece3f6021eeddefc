"""Chapter 03's test helpers: the case functions and checks its visible test cells use.

Each test cell defines them in the notebook's namespace with ``checks.test_helpers(...)``, as
if they stood in the cell: the names they use (the answers, the chapter's own definitions, its
imports) are the notebook's. Hidden tests are not here. Validate, ``make check`` and the grader
read the course's own copy of this file (in its notebooks/ folder): a copy in your work folder
is for reading, and editing it changes nothing.
"""

import torch

import commlab
from commlab import checks


# --- 03-my-gather-test -----------------------------------------------------------------------
def gather_case(rank, world_size, dst, shape, dtype):
    tensor = checks.private_tensor(rank, shape, dtype).to(commlab.device())
    gather_list = None
    if rank == dst:
        gather_list = [torch.full(shape, -1, dtype=dtype, device=commlab.device())
                       for _ in range(world_size)]
    my_gather(tensor, gather_list, dst)
    return gather_list


def check_my_gather(result, dst, shape, dtype):
    world_size = result.world_size
    pieces = [checks.private_tensor(r, shape, dtype) for r in range(world_size)]
    expected = [pieces if r == dst else None for r in range(world_size)]
    checks.expect_per_rank(result, expected, what="gather_list after my_gather")
    checks.expect_only(result, {"send", "recv"})
    size = pieces[0].numel() * pieces[0].element_size()
    checks.expect_bytes(result,
                        sent=[0 if r == dst else size for r in range(world_size)],
                        received=[size * (world_size - 1) if r == dst else 0
                                  for r in range(world_size)])


# --- 03-global-metrics-test ------------------------------------------------------------------
def metrics_of(rank):
    """One rank's evaluation of its shard, different on every run; the shards have different
    sizes."""
    generator = checks.private_generator(rank, "metrics")
    count = 8 + 3 * rank + int(torch.randint(0, 3, (), generator=generator))
    correct = int(torch.randint(0, count + 1, (), generator=generator))
    loss_sum = count * float(torch.rand((), generator=generator, dtype=torch.float64))
    return loss_sum, correct, count


def metrics_case(rank, world_size, dst):
    loss_sum, correct, count = metrics_of(rank)
    out = global_metrics(loss_sum, correct, count, dst=dst)
    return None if out is None else {key: float(value) for key, value in out.items()}


def check_global_metrics(result, dst):
    world_size = result.world_size
    loss_sums, corrects, counts = zip(*[metrics_of(r) for r in range(world_size)])
    expected = {"loss": sum(loss_sums) / sum(counts), "accuracy": sum(corrects) / sum(counts)}
    checks.expect_per_rank(result, [expected if r == dst else None for r in range(world_size)],
                           what="the value global_metrics returned")
    checks.expect_used(result, "gather")
