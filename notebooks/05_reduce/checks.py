"""Chapter 05's test helpers: the case functions and checks its visible test cells use.

Each test cell defines them in the notebook's namespace with ``checks.test_helpers(...)``, as
if they stood in the cell: the names they use (the answers, the chapter's own definitions, its
imports) are the notebook's. Hidden tests are not here. Validate, ``make check`` and the grader
read the course's own copy of this file (in its notebooks/ folder): a copy in your work folder
is for reading, and editing it changes nothing.
"""

import torch
import torch.distributed as dist

import commlab
from commlab import checks

# --- 05-my-reduce-test -----------------------------------------------------------------------
POINT_TO_POINT = {"send", "recv", "isend", "irecv", "batch_isend_irecv"}


REFERENCE = {"SUM": lambda stacked: stacked.sum(0), "PRODUCT": lambda stacked: stacked.prod(0),
             "MIN": lambda stacked: stacked.amin(0), "MAX": lambda stacked: stacked.amax(0)}


def reduce_input(rank, shape, dtype):
    # whole numbers of random sign, different on every run: MIN and MAX pick different ranks
    return checks.private_tensor(rank, shape, dtype)


def reduce_case(rank, world_size, dst, op, shape, dtype):
    tensor = reduce_input(rank, shape, dtype).to(commlab.device())
    my_reduce(tensor, dst, getattr(dist.ReduceOp, op))
    return tensor


def check_reduce(result, dst, op, shape, dtype):
    stacked = torch.stack([reduce_input(r, shape, dtype) for r in range(result.world_size)])
    checks.expect(result.returns[dst], REFERENCE[op](stacked), rank=dst,
                  world_size=result.world_size, what="dst's tensor after my_reduce",
                  **result.context)
    checks.expect_only(result, POINT_TO_POINT)


# --- 05-global-loss-stats-test ---------------------------------------------------------------
def losses_of(rank, size, dtype):
    """Rank rank's per-sample losses (squared errors), different on every run."""
    generator = checks.private_generator(rank, "losses")
    return torch.randn(size, generator=generator, dtype=torch.float64).square().to(dtype)


def loss_case(rank, world_size, sizes, dst, dtype):
    losses = losses_of(rank, sizes[rank], dtype).to(commlab.device())
    return global_loss_stats(losses, dst)


def check_loss_stats(result, sizes, dst, dtype):
    all_losses = torch.cat([losses_of(r, size, dtype) for r, size in enumerate(sizes)])
    expected = [None] * result.world_size
    expected[dst] = (all_losses.mean().item(), all_losses.max().item())
    checks.expect_per_rank(result, expected, what="global_loss_stats(losses, dst)")
    checks.expect_only(result, {"reduce"})


def loss_stats_case(sizes, dst, dtype=torch.float32):
    """A case: rank r holds sizes[r] per-sample losses of its own."""
    return checks.Case(len(sizes), sizes=sizes, dst=dst, dtype=dtype)
