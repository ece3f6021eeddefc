"""Chapter 02's test helpers: the case functions and checks its visible test cells use.

Each test cell defines them in the notebook's namespace with ``checks.test_helpers(...)``, as
if they stood in the cell: the names they use (the answers, the chapter's own definitions, its
imports) are the notebook's. Hidden tests are not here. Validate, ``make check`` and the grader
read the course's own copy of this file (in its notebooks/ folder): a copy in your work folder
is for reading, and editing it changes nothing.
"""

import torch

import commlab
from commlab import checks


# --- 02-my-scatter-test ----------------------------------------------------------------------
def piece(dst, src, shape, dtype):
    """What rank src holds for rank dst: different for every dst and every run."""
    return checks.private_tensor(src, shape, dtype, "piece", dst)


def scatter_case(rank, world_size, src, shape, dtype):
    tensor = torch.full(shape, -1, dtype=dtype, device=commlab.device())
    scatter_list = None
    if rank == src:
        scatter_list = [piece(dst, src, shape, dtype).to(commlab.device())
                        for dst in range(world_size)]
    my_scatter(tensor, scatter_list, src)
    return tensor


def check_my_scatter(result, src, shape, dtype):
    world_size = result.world_size
    expected = [piece(r, src, shape, dtype) for r in range(world_size)]
    checks.expect_per_rank(result, expected, what="the tensor after my_scatter")
    checks.expect_only(result, {"send", "recv"})
    size = expected[0].numel() * expected[0].element_size()
    checks.expect_bytes(result,
                        sent=[size * (world_size - 1) if r == src else 0
                              for r in range(world_size)],
                        received=[0 if r == src else size for r in range(world_size)])


# --- 02-shard-dataset-test -------------------------------------------------------------------
def dataset_of(src, shape, dtype):
    """Rank src's dataset: different on every run."""
    return checks.private_tensor(src, shape, dtype, "dataset")


def shard_case(rank, world_size, src, shape, dtype):
    dataset = None
    if rank == src:
        dataset = dataset_of(src, shape, dtype).to(commlab.device())
    return shard_dataset(dataset, shape, dtype, src)


def check_shard_dataset(result, src, shape, dtype):
    world_size = result.world_size
    full = dataset_of(src, shape, dtype)
    rows = shape[0] // world_size
    expected = [full[r * rows:(r + 1) * rows] for r in range(world_size)]
    checks.expect_per_rank(result, expected, what="the shard returned by shard_dataset")
    checks.expect_used(result, "scatter")
    size = expected[0].numel() * expected[0].element_size()
    checks.expect_bytes(result,
                        sent=[size * (world_size - 1) if r == src else 0
                              for r in range(world_size)],
                        received=[0 if r == src else size for r in range(world_size)])
