"""Chapter 11's test helpers: the case functions and checks its visible test cells use.

Each test cell defines them in the notebook's namespace with ``checks.test_helpers(...)``, as
if they stood in the cell: the names they use (the answers, the chapter's own definitions, its
imports) are the notebook's. Hidden tests are not here. Validate, ``make check`` and the grader
read the course's own copy of this file (in its notebooks/ folder): a copy in your work folder
is for reading, and editing it changes nothing.
"""

import torch

import commlab
from commlab import checks


# --- 11-hierarchical-all-reduce-test ---------------------------------------------------------
def hierarchy_case(rank, world_size, nodes, numel, dtype):
    mesh = init_device_mesh(commlab.device().type, (nodes, world_size // nodes),
                            mesh_dim_names=("inter", "intra"))
    # numbers only this rank knows: the sum reaches a rank only through the groups' calls
    tensor = checks.private_tensor(rank, (numel,), dtype).to(commlab.device())
    returned = hierarchical_all_reduce(tensor, mesh["intra"].get_group(),
                                       mesh["inter"].get_group())
    return returned, tensor


def check_hierarchy(world_size, nodes, numel, dtype=torch.float32):
    per_node = world_size // nodes
    context = dict(nodes=nodes, per_node=per_node, numel=numel, dtype=dtype)
    result = checks.run(hierarchy_case, world_size, args=(nodes, numel, dtype), **context)
    total = sum(checks.private_tensor(r, (numel,), dtype) for r in range(world_size))
    checks.expect_per_rank(result, [(total, total)] * world_size,
                           what="(hierarchical_all_reduce(tensor), tensor afterwards)", **context)
    shard = numel * torch.empty(0, dtype=dtype).element_size() // per_node
    sent = bytes_by_group(result)
    for rank in range(world_size):
        node = tuple(range(rank - rank % per_node, rank - rank % per_node + per_node))
        across = tuple(range(rank % per_node, world_size, per_node))
        for group, want, what in (
                (node, 2 * (per_node - 1) * shard, "inside its node, reduce_scatter + all_gather"),
                (across, (nodes - 1) * shard, "across nodes, an all_reduce of one shard")):
            checks.expect(sent.get(group, [0] * world_size)[rank], want, rank=rank,
                          world_size=world_size, **context,
                          what=f"the bytes sent in group {list(group)} ({what})")
        checks.expect(sent.get(tuple(range(world_size)), [0] * world_size)[rank], 0, rank=rank,
                      world_size=world_size, what="the bytes sent on the world group", **context)


# --- 11-dp-tp-gradient-test ------------------------------------------------------------------
def dp_tp_x(rank, dp, tp, batch, width, dtype):
    """Rank `rank`'s x: its dp coordinate's rows, with only the columns this rank uses filled,
    with values only it knows; NaN in the columns of the other ranks of its tp group."""
    row, col = divmod(rank, tp)
    rows = len(torch.tensor_split(torch.arange(batch), dp)[row])
    columns = torch.tensor_split(torch.arange(width), tp)[col]
    x = torch.full((rows, width), float("nan"), dtype=dtype)
    generator = checks.private_generator(rank, "x")
    x[:, columns] = torch.randn(rows, len(columns), generator=generator,
                                dtype=torch.float64).to(dtype)
    return x


def dp_tp_case(rank, world_size, dp, tp, batch, width, out, dtype):
    mesh = init_device_mesh(commlab.device().type, (dp, tp), mesh_dim_names=("dp", "tp"))
    _, target, w = [t.to(commlab.device()) for t in linear_problem(batch, width, out, dtype)]
    x = dp_tp_x(rank, dp, tp, batch, width, dtype).to(commlab.device())
    mine = mesh.get_local_rank("dp")
    return dp_tp_gradient(x, torch.tensor_split(target, dp)[mine],
                          torch.tensor_split(w, tp, dim=0)[mesh.get_local_rank("tp")],
                          mesh["dp"].get_group(), mesh["tp"].get_group())


def check_dp_tp(dp, tp, batch=4, width=6, out=3, dtype=torch.float32):
    world_size = dp * tp
    context = dict(dp=dp, tp=tp, batch=batch, width=width, out=out, dtype=dtype)
    result = checks.run(dp_tp_case, world_size, args=(dp, tp, batch, width, out, dtype), **context)
    for rank in range(world_size):
        row, col = divmod(rank, tp)
        tp_group, dp_group = list(range(row * tp, row * tp + tp)), list(range(col, world_size, tp))
        groups = [list(c.group_ranks) for c in result.calls("all_reduce", rank)]
        checks.expect(groups, [tp_group, dp_group], rank=rank, world_size=world_size, **context,
                      what="the groups of your all_reduce calls (the activations on the tp group, "
                           "then the gradient on the dp group)")
        checks.expect([c.op for c in result.trace[rank]], ["all_reduce", "all_reduce"], rank=rank,
                      world_size=world_size, what="the calls your code made", **context)
    _, target, w = linear_problem(batch, width, out, dtype)
    # the whole batch: every rank's filled columns of its rows
    x = torch.cat([sum(dp_tp_x(row * tp + col, dp, tp, batch, width, dtype).nan_to_num()
                       for col in range(tp)) for row in range(dp)])
    full = linear_gradient_reference(x, target, w)
    expected = [torch.tensor_split(full, tp, dim=0)[rank % tp] for rank in range(world_size)]
    checks.expect_per_rank(result, expected, what="the gradient of this rank's rows of w",
                           **context)
