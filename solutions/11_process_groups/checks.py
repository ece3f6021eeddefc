"""Chapter 11's test helpers: the case functions and checks its visible test cells use.

Each test cell defines them in the notebook's namespace with ``checks.test_helpers(...)``, as
if they stood in the cell: the names they use (the answers, the chapter's own definitions, its
imports) are the notebook's. Hidden tests are not here. Validate, ``make check`` and the grader
read the course's own copy of this file (in its notebooks/ folder): a copy in your work folder
is for reading, and editing it changes nothing.
"""

import copy
import random

import torch
import torch.distributed as dist

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


# --- 11-diagnose-test ------------------------------------------------------------------------
# Calls each rank makes on its pair before the world's: more than the world's, so that a
# sequence number means something only together with its process group.
PAIR_CALLS = 8
VISIBLE_PLAN = {"kind": "late", "bad_rank": 2, "step": 5, "op": "all_reduce"}


def hang_plan(seed):
    """Which rank goes wrong, how (it never arrives, or it passes another count), and at which
    collective of the world group: drawn from `seed`."""
    chooser = random.Random(seed)
    kind, bad_rank = chooser.choice(["late", "count"]), chooser.randrange(4)
    step = chooser.randint(2, 6)
    # gloo may abort a process that receives more bytes than its broadcast expects: the count
    # goes wrong only in an all_reduce, where it times out
    op = chooser.choice(["all_reduce", "broadcast"]) if kind == "late" else "all_reduce"
    return dict(kind=kind, bad_rank=bad_rank, step=step, op=op)


def hang_steps(plan):
    """What every rank runs for `plan`: PAIR_CALLS all_reduces on its pair, then `plan["step"]`
    collectives on the world, of which the last goes wrong on rank `plan["bad_rank"]`."""
    def steps(rank, world_size):
        pair, _ = dist.new_subgroups(group_size=2)
        for _ in range(PAIR_CALLS):
            dist.all_reduce(torch.ones(2), group=pair)
        for step in range(1, plan["step"] + 1):
            numel = 4
            if rank == plan["bad_rank"] and step == plan["step"]:
                if plan["kind"] == "late":
                    return
                numel = 5
            tensor = torch.ones(numel)
            if plan["op"] == "broadcast":
                dist.broadcast(tensor, src=0)
            else:
                dist.all_reduce(tensor)
    return steps


def _world_calls(dumps):
    """rank -> {seq: (profiling_name, input_sizes)} of the world group ("0")."""
    return {rank: {e["collective_seq_id"]: (e["profiling_name"], e["input_sizes"])
                   for e in dump["entries"] if str(e["process_group"][0]) == "0"}
            for rank, dump in dumps.items()}


def _why(got, expected, plan, dumps):
    """The reason a student's (rank, name, seq) is wrong, in the words of the dumps."""
    rank, name, seq = got
    bad_rank, _, bad_seq = expected
    world = _world_calls(dumps)
    last = {r: max(calls, default=0) for r, calls in world.items()}
    if seq not in {s for calls in world.values() for s in calls} or seq > max(last.values()):
        return (f"no rank recorded a collective {seq!r} in the world group (process group \"0\"): "
                "sequence numbers count per process group, and each rank also made "
                f"{PAIR_CALLS} calls on its pair. Compare the ranks' entries of one process "
                "group at a time (entry[\"process_group\"]).")
    if seq == bad_seq - 1:
        return (f"collective {seq} is the last one every rank got through; the job is stuck in "
                f"the next one of the group, {bad_seq}.")
    if rank != bad_rank and rank in world:
        if plan["kind"] == "late":
            return (f"rank {rank} recorded collective {last[rank]} of the world group like the "
                    "others: it waited there, it did not fall behind (on gloo every entry's "
                    "state stays \"scheduled\"). The rank behind is the one whose last sequence "
                    "number in the group is the smallest.")
        return (f"rank {rank} called the same thing as most ranks at collective {bad_seq}; the "
                "rank at fault is the one whose profiling_name or input_sizes there differ from "
                "the others'.")
    return "look again at the entries of the world group around that sequence number."


def check_diagnose(seed=None):
    """diagnose names the rank, the collective and its sequence number of a real run that hung,
    from the ranks' flight-recorder dumps."""
    plan = VISIBLE_PLAN if seed is None else hang_plan(seed)
    dumps = {rank: dump for rank, (_, dump) in run_with_flight_recorder(hang_steps(plan)).items()}
    expected = (plan["bad_rank"], f"gloo:{plan['op']}", plan["step"])
    how = ("stopped before" if plan["kind"] == "late"
           else "passed a tensor of another size to")
    case = f"In a run where one rank {how} one collective of the world group"
    got = diagnose(copy.deepcopy(dumps))
    if not (isinstance(got, tuple) and len(got) == 3 and isinstance(got[0], int)
            and isinstance(got[2], int)):
        raise checks.CheckFailed(f"{case}, diagnose(dumps) should return a tuple (rank, "
                                 "profiling_name, collective_seq_id) of an int, a str and an "
                                 f"int, but it returned {got!r:.200}.")
    rank, name, seq = got
    if (rank, str(name).split(":")[-1], seq) == (expected[0], plan["op"], expected[2]):
        return
    raise checks.CheckFailed(f"{case}, diagnose(dumps) should return\n    {expected!r}\nbut it "
                             f"returned\n    {got!r:.200}\n{_why(got, expected, plan, dumps)}")
