"""Chapter 04's test helpers: the case functions and checks its visible test cells use.

Each test cell defines them in the notebook's namespace with ``checks.test_helpers(...)``, as
if they stood in the cell: the names they use (the answers, the chapter's own definitions, its
imports) are the notebook's. Hidden tests are not here. Validate, ``make check`` and the grader
read the course's own copy of this file (in its notebooks/ folder): a copy in your work folder
is for reading, and editing it changes nothing.
"""

import torch

import commlab
from commlab import checks

# --- 04-my-all-gather-test -------------------------------------------------------------------
NO_ALL_GATHER = ("all_gather", "all_gather_into_tensor", "all_gather_object")


def all_gather_case(rank, world_size, shape, dtype):
    tensor = checks.private_tensor(rank, shape, dtype).to(commlab.device())
    tensor_list = [torch.zeros_like(tensor) for _ in range(world_size)]
    given = list(tensor_list)                    # the caller's tensors, to see they were filled
    my_all_gather(tensor_list, tensor)
    return given, tensor


def check_all_gather(result, shape, dtype):
    world_size = result.world_size
    everyone = [checks.private_tensor(r, shape, dtype) for r in range(world_size)]
    checks.expect_per_rank(result, [(everyone, everyone[r]) for r in range(world_size)],
                           what="(tensor_list, tensor) after my_all_gather")
    checks.expect_not_used(result, *NO_ALL_GATHER)
    size = everyone[0].nbytes
    broadcasts = world_size * (world_size - 1) * size          # each tensor to each other rank
    gather_first = (world_size - 1) * size + broadcasts        # ... after a gather on one rank
    checks.expect_total_bytes(
        result, at_most=gather_first,
        needs=f"each rank's {size}-byte tensor sent once to each other rank, {broadcasts} "
              f"bytes with a dist.broadcast from each rank ({gather_first} if gathered on one "
              "rank first). A reduction of zero-padded buffers also sends every rank's zeros "
              "to every rank: build my_all_gather from broadcasts.")


# --- 04-gather-full-parameter-test -----------------------------------------------------------
def shard_of(rank, world_size, shape, dtype):
    """Rank rank's flat shard of a parameter of shape: its own values, different on every run,
    and zeros where the shard runs past the parameter's end (the padding)."""
    numel = torch.Size(shape).numel()
    shard_numel = -(-numel // world_size)
    shard = checks.private_tensor(rank, (shard_numel,), dtype, "shard")
    shard[max(0, numel - rank * shard_numel):] = 0
    return shard


def unshard_case(rank, world_size, shape, dtype):
    shard = shard_of(rank, world_size, shape, dtype).to(commlab.device())
    kept = shard.clone()
    rebuilt = gather_full_parameter(shard, torch.Size(shape))
    return rebuilt, torch.equal(shard, kept)


def check_unshard(result, shape, dtype):
    world_size = result.world_size
    shards = [shard_of(r, world_size, shape, dtype) for r in range(world_size)]
    full = torch.cat(shards)[:torch.Size(shape).numel()].reshape(shape)
    checks.expect_per_rank(result, [(full, True)] * world_size,
                           what="(gather_full_parameter(shard, shape), shard unchanged)")
    checks.expect_only(result, {"all_gather_into_tensor"})   # by any of torch's names for it
    moved = [(world_size - 1) * shards[0].nbytes] * world_size
    checks.expect_bytes(result, sent=moved, received=moved)
