"""Chapter 00's test helpers: the case functions and checks its visible test cells use.

Each test cell defines them in the notebook's namespace with ``checks.test_helpers(...)``, as
if they stood in the cell: the names they use (the answers, the chapter's own definitions, its
imports) are the notebook's. Hidden tests are not here. Validate, ``make check`` and the grader
read the course's own copy of this file (in its notebooks/ folder): a copy in your work folder
is for reading, and editing it changes nothing.
"""

import torch
import torch.distributed as dist

from commlab import checks


# --- 00-whoami-test --------------------------------------------------------------------------
def whoami_case(rank, world_size):
    return whoami()


# --- 00-join-group-test ----------------------------------------------------------------------
def join_case(rank, world_size):
    got = join_group()
    state = (got, dist.is_initialized() and dist.get_backend(), dist.get_world_size())
    # only a group that joins every rank brings every rank's tensor into the sum (the group
    # stays open: the ranks' exit closes it after the test)
    total = checks.private_tensor(rank, (4,), torch.int64)
    dist.all_reduce(total)
    return (*state, total)


def check_join(result):
    world_size = result.world_size
    total = sum(checks.private_tensor(r, (4,), torch.int64) for r in range(world_size))
    checks.expect_per_rank(result, [(r, "gloo", world_size, total) for r in range(world_size)],
                           what="(join_group(), backend, world size, the all_reduce's sum)")
