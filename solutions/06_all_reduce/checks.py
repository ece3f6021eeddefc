"""Chapter 06's test helpers: the case functions and checks its visible test cells use.

Each test cell defines them in the notebook's namespace with ``checks.test_helpers(...)``, as
if they stood in the cell: the names they use (the answers, the chapter's own definitions, its
imports) are the notebook's. Hidden tests are not here. Validate, ``make check`` and the grader
read the course's own copy of this file (in its notebooks/ folder): a copy in your work folder
is for reading, and editing it changes nothing.
"""

import torch

import commlab
from commlab import checks


# --- 06-my-all-reduce-test -------------------------------------------------------------------
def all_reduce_case(rank, world_size, shape, dtype):
    tensor = checks.private_tensor(rank, shape, dtype).to(commlab.device())
    my_all_reduce(tensor)
    return tensor


def check_all_reduce(result, shape, dtype):
    world_size = result.world_size
    expected = sum(checks.private_tensor(r, shape, dtype) for r in range(world_size))
    checks.expect_per_rank(result, [expected] * world_size, what="the tensor after my_all_reduce")
    checks.expect_not_used(result, "all_reduce", "all_reduce_coalesced")
    size = expected.nbytes
    padded = -(-expected.numel() // world_size) * world_size * expected.element_size()
    checks.expect_total_bytes(
        result, at_most=2 * (world_size - 1) * padded,
        needs=f"{2 * (world_size - 1) * size} bytes with dist.reduce then dist.broadcast, "
              f"{2 * (world_size - 1) * padded} with dist.reduce_scatter_single then "
              "dist.all_gather_single of the padded tensor. Gathering every rank's whole "
              "tensor on every rank and summing there moves world_size / 2 times as much: "
              "reduce first, then share the sum.")


# --- 06-average-gradients-test ---------------------------------------------------------------
BATCH = 12  # rows in all, split evenly over the ranks


def make_model(dtype, freeze_first_bias):
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    model = model.to(dtype)
    model[0].bias.requires_grad_(not freeze_first_bias)
    return model


def rows_of(rank, world_size, dtype):
    """Rank rank's part of the batch (x, y): only that rank can make it, and the check."""
    generator = checks.private_generator(rank, "batch")
    rows = BATCH // world_size
    return (torch.randn(rows, 4, generator=generator, dtype=dtype),
            torch.randn(rows, 2, generator=generator, dtype=dtype))


def data_parallel_case(rank, world_size, state, dtype, freeze_first_bias):
    model = make_model(dtype, freeze_first_bias)
    model.load_state_dict(state)
    model.to(commlab.device())
    x, y = rows_of(rank, world_size, dtype)
    prediction = model(x.to(commlab.device()))
    torch.nn.functional.mse_loss(prediction, y.to(commlab.device())).backward()
    average_gradients(model)
    return [param.grad for param in model.parameters()]


def check_average_gradients(result, state, dtype, freeze_first_bias):
    reference = make_model(dtype, freeze_first_bias)
    reference.load_state_dict(state)
    parts = [rows_of(r, result.world_size, dtype) for r in range(result.world_size)]
    x, y = torch.cat([x for x, _ in parts]), torch.cat([y for _, y in parts])
    torch.nn.functional.mse_loss(reference(x), y).backward()      # the whole batch, one process
    expected = [param.grad for param in reference.parameters()]
    checks.expect_per_rank(result, [expected] * result.world_size,
                           what="[param.grad for param in model.parameters()]")
    checks.expect_only(result, {"all_reduce"})
    grad_bytes = sum(p.numel() * p.element_size() for p in reference.parameters()
                     if p.requires_grad)
    moved = [(result.world_size - 1) * grad_bytes] * result.world_size
    checks.expect_bytes(result, sent=moved, received=moved)


def gradients_case(world_size, seed, dtype=torch.float32, freeze_first_bias=False):
    """A case: a model's initial weights, drawn from seed (the same on every rank)."""
    torch.manual_seed(seed)
    state = dict(make_model(dtype, freeze_first_bias).state_dict())
    return checks.Case(world_size, args=(state,), dtype=dtype,
                       freeze_first_bias=freeze_first_bias)
