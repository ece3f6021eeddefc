"""Chapter 01's test helpers: the case functions and checks its visible test cells use.

Each test cell defines them in the notebook's namespace with ``checks.test_helpers(...)``, as
if they stood in the cell: the names they use (the answers, the chapter's own definitions, its
imports) are the notebook's. Hidden tests are not here. Validate, ``make check`` and the grader
read the course's own copy of this file (in its notebooks/ folder): a copy in your work folder
is for reading, and editing it changes nothing.
"""

import torch

import commlab
from commlab import checks


# --- 01-my-broadcast-test --------------------------------------------------------------------
def broadcast_case(rank, world_size, src, shape, dtype):
    # different on every rank and every run: the others can end with src's only by receiving it
    tensor = checks.private_tensor(rank, shape, dtype).to(commlab.device())
    my_broadcast(tensor, src)
    return tensor


def check_my_broadcast(result, src, shape, dtype):
    world_size = result.world_size
    expected = checks.private_tensor(src, shape, dtype)
    checks.expect_per_rank(result, [expected] * world_size, what="the tensor after my_broadcast")
    checks.expect_only(result, {"send", "recv"})
    size = expected.numel() * expected.element_size()
    checks.expect_bytes(result,
                        sent=[size * (world_size - 1) if r == src else 0
                              for r in range(world_size)],
                        received=[0 if r == src else size for r in range(world_size)])


# --- 01-share-initial-weights-test -----------------------------------------------------------
def make_model(sizes):
    return torch.nn.Sequential(*[torch.nn.Linear(a, b) for a, b in zip(sizes, sizes[1:])])


def initial_state(seed, sizes):
    torch.manual_seed(seed)
    return dict(make_model(sizes).state_dict())


def share_case(rank, world_size, src, sizes):
    # every rank initialises different weights, and only src knows src's
    torch.manual_seed(checks.private_seed(rank, "model"))
    model = make_model(sizes).to(commlab.device())
    share_initial_weights(model.state_dict(), src)
    return {name: tensor.clone() for name, tensor in model.state_dict().items()}


def check_share(result, src, sizes):
    world_size = result.world_size
    expected = initial_state(checks.private_seed(src, "model"), sizes)
    checks.expect_per_rank(result, [expected] * world_size,
                           what="the model's state_dict after share_initial_weights")
    checks.expect_used(result, "broadcast")
    size = sum(t.numel() * t.element_size() for t in expected.values())
    checks.expect_bytes(result,
                        sent=[size * (world_size - 1) if r == src else 0
                              for r in range(world_size)],
                        received=[0 if r == src else size for r in range(world_size)])
