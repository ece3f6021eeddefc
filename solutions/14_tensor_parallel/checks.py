"""Chapter 14's test helpers: the case functions and checks its visible test cells use.

Each test cell defines them in the notebook's namespace with ``checks.test_helpers(...)``, as
if they stood in the cell: the names they use (the answers, the chapter's own definitions, its
imports) are the notebook's. Hidden tests are not here. Validate, ``make check`` and the grader
read the course's own copy of this file (in its notebooks/ folder): a copy in your work folder
is for reading, and editing it changes nothing.
"""

import torch

import commlab
from commlab import checks


# --- 14-f-and-g-test -------------------------------------------------------------------------
def forward_backward(mlp, inputs, group=None):
    """On a rank: mlp(*inputs, group), then the backward pass of sum(output²) / 2. Returns the
    output, the gradients of the inputs, and how many traced calls the forward pass made."""
    calls = commlab.trace.current().calls
    first = len(calls)
    output = mlp(*inputs, group)
    forward_calls = len(calls) - first
    (output ** 2).sum().div(2).backward()
    return output.detach(), [t.grad for t in inputs], forward_calls


def collectives(result, rank, forward_calls):
    """The calls a rank made in the forward pass and in the backward pass, as
    (op, bytes sent, group); calls that move the same bytes under one name: torch's names for
    one operation (all_gather_single) under the first of checks.ALIASES, and the list forms
    (all_gather, then torch.cat; reduce_scatter on a list) under the tensor forms'."""
    same = {name: names[0] for names in checks.ALIASES for name in names}
    same.update(all_gather="all_gather_into_tensor", reduce_scatter="reduce_scatter_tensor")
    calls = [(same.get(c.op, c.op), c.bytes_sent, list(c.group_ranks)) for c in result.trace[rank]]
    return calls[:forward_calls], calls[forward_calls:]


def private_shards(rank, tp_rank, tp, tokens, width, hidden, dtype, rows=False):
    """Rank `rank`'s inputs of the MLP, as tensor_parallel_shards gives them, with values only
    that rank knows for its columns of w1 and b1 and its rows of w2 (and with rows=True its rows
    of x); all of x (rows=False) and b2 are mlp_parameters', the same on every rank."""
    x, _, _, _, b2 = mlp_parameters(tokens, width, hidden, dtype)
    part = len(torch.tensor_split(torch.arange(hidden), tp)[tp_rank])
    generator = checks.private_generator(rank, "mlp")

    def draw(*shape):
        return torch.randn(*shape, generator=generator, dtype=torch.float64).to(dtype)

    if rows:
        x = draw(len(torch.tensor_split(torch.arange(tokens), tp)[tp_rank]), width)
    return [x, draw(width, part) / width ** 0.5, draw(part) * 0.1,
            draw(part, width) / hidden ** 0.5, b2]


def group_reference(ranks, tokens, width, hidden, dtype, rows=False):
    """In one process, for the tp group `ranks`: the MLP's output and the gradients of
    sum(output²) / 2 with respect to x, w1, b1, w2 and b2, whole."""
    parts = [private_shards(r, t, len(ranks), tokens, width, hidden, dtype, rows)
             for t, r in enumerate(ranks)]
    x = torch.cat([p[0] for p in parts]) if rows else parts[0][0]
    inputs = [t.clone().requires_grad_() for t in (
        x, torch.cat([p[1] for p in parts], dim=1), torch.cat([p[2] for p in parts]),
        torch.cat([p[3] for p in parts]), parts[0][4])]
    x, w1, b1, w2, b2 = inputs
    output = torch.nn.functional.gelu(x @ w1 + b1) @ w2 + b2
    (output ** 2).sum().div(2).backward()
    return output.detach(), [t.grad for t in inputs]


def tp_case(rank, world_size, tp, tokens, width, hidden, dtype):
    group, tp_rank = None, rank
    if tp != world_size:          # the "tp" groups (rows) of a (world_size // tp, tp) mesh
        mesh = init_device_mesh(commlab.device().type, (world_size // tp, tp),
                                mesh_dim_names=("dp", "tp"))
        group, tp_rank = mesh["tp"].get_group(), mesh.get_local_rank("tp")
    inputs = [t.to(commlab.device()).requires_grad_() for t in
              private_shards(rank, tp_rank, tp, tokens, width, hidden, dtype)]
    return forward_backward(tensor_parallel_mlp, inputs, group)


def check_tp(result, tp, tokens, width, hidden, dtype):
    context = dict(tp=tp, tokens=tokens, width=width, hidden=hidden, dtype=dtype)
    for rank in range(result.world_size):
        t, group = rank % tp, list(range(rank - rank % tp, rank - rank % tp + tp))
        output, (x, w1, b1, w2, b2) = group_reference(group, tokens, width, hidden, dtype)
        size = output.numel() * output.element_size()      # the output and x: the same shape
        got_output, got_gradients, forward_calls = result.returns[rank]
        forward, backward = collectives(result, rank, forward_calls)
        where = dict(rank=rank, world_size=result.world_size, **context)
        checks.expect(forward, [("all_reduce", (tp - 1) * size, group)], **where,
                      what="the collectives of the forward pass, as (op, bytes sent, group): "
                           "g's all_reduce of the output, and nothing from f")
        checks.expect(backward, [("all_reduce", (tp - 1) * size, group)], **where,
                      what="the collectives of the backward pass, as (op, bytes sent, group): "
                           "f's all_reduce of x's gradient, and nothing from g (every rank "
                           "already has the whole gradient of the output)")
        checks.expect(got_output, output, **where, what="the MLP's output")
        wanted = [x, torch.tensor_split(w1, tp, dim=1)[t], torch.tensor_split(b1, tp)[t],
                  torch.tensor_split(w2, tp, dim=0)[t], b2]
        for name, got, want in zip(("x", "w1_shard", "b1_shard", "w2_shard", "b2"),
                                   got_gradients, wanted):
            checks.expect(got, want, **where,
                          what=f"{name}.grad (one process's gradient, of this rank's part)")


# --- 14-sequence-parallel-test ---------------------------------------------------------------
def sp_case(rank, world_size, tp, tokens, width, hidden, dtype):
    group, tp_rank = None, rank
    if tp != world_size:          # the "tp" groups (rows) of a (world_size // tp, tp) mesh
        mesh = init_device_mesh(commlab.device().type, (world_size // tp, tp),
                                mesh_dim_names=("dp", "tp"))
        group, tp_rank = mesh["tp"].get_group(), mesh.get_local_rank("tp")
    inputs = [t.to(commlab.device()).requires_grad_() for t in
              private_shards(rank, tp_rank, tp, tokens, width, hidden, dtype, rows=True)]
    return forward_backward(sequence_parallel_mlp, inputs, group)


def check_sp(result, tp, tokens, width, hidden, dtype):
    context = dict(tp=tp, tokens=tokens, width=width, hidden=hidden, dtype=dtype)
    for rank in range(result.world_size):
        t, group = rank % tp, list(range(rank - rank % tp, rank - rank % tp + tp))
        output, (x, w1, b1, w2, _) = group_reference(group, tokens, width, hidden, dtype,
                                                     rows=True)
        rows = output.numel() * output.element_size() // tp    # a rank's rows of x or output
        got_output, got_gradients, forward_calls = result.returns[rank]
        forward, backward = collectives(result, rank, forward_calls)
        where = dict(rank=rank, world_size=result.world_size, **context)
        halves = [("all_gather_into_tensor", (tp - 1) * rows, group),
                  ("reduce_scatter_tensor", (tp - 1) * rows, group)]
        checks.expect(forward, halves, **where,
                      what="the collectives of the forward pass, as (op, bytes sent, group): the "
                           "rows of x gathered, then the output's sums reduce-scattered to rows "
                           "(all_gather_single and reduce_scatter_single, and the list forms "
                           "all_gather and reduce_scatter, count under these older names)")
        checks.expect(backward, halves, **where,
                      what="the collectives of the backward pass, as (op, bytes sent, group): the "
                           "rows of the output's gradient gathered, then x's gradient "
                           "reduce-scattered to rows (all_gather_single and "
                           "reduce_scatter_single count under these older names)")
        checks.expect(got_output, torch.tensor_split(output, tp)[t], **where,
                      what="this rank's rows of the MLP's output")
        wanted = [torch.tensor_split(x, tp)[t], torch.tensor_split(w1, tp, dim=1)[t],
                  torch.tensor_split(b1, tp)[t], torch.tensor_split(w2, tp, dim=0)[t]]
        for name, got, want in zip(("x_rows", "w1_shard", "b1_shard", "w2_shard"),
                                   got_gradients, wanted):
            checks.expect(got, want, **where,
                          what=f"{name}.grad (one process's gradient, of this rank's part)")
