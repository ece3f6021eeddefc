"""Chapter 18's test helpers: the case functions and checks its visible test cells use.

Each test cell defines them in the notebook's namespace with ``checks.test_helpers(...)``, as
if they stood in the cell: the names they use (the answers, the chapter's own definitions, its
imports) are the notebook's. Hidden tests are not here. Validate, ``make check`` and the grader
read the course's own copy of this file (in its notebooks/ folder): a copy in your work folder
is for reading, and editing it changes nothing.
"""

import torch

import commlab
from commlab import checks

POINT_TO_POINT = {"send", "recv", "isend", "irecv", "batch_isend_irecv"}


# --- 18-composed-step-test -------------------------------------------------------------------
def composed_case(rank, world_size, dp, pp, tp, batch, num_microbatches, width, hidden, seed,
                  dtype):
    """This rank's part of one step on a (dp, pp, tp) mesh: its gradients and its loss. The
    model and the batch come from `seed`, which the test cell holds."""
    torch.set_num_threads(1)
    device = commlab.device()
    mesh = init_device_mesh(device.type, (dp, pp, tp), mesh_dim_names=("dp", "pp", "tp"))
    params, x, target = rank_inputs(mesh, batch, width, hidden, seed, dtype, device)
    loss = composed_step(params, x, target, mesh, num_microbatches)
    return {"gradients": [p.grad for p in params], "loss": loss}


def group_along(rank, shape, dimension):
    """The global ranks of `rank`'s group along mesh dimension `dimension` (0, 1 or 2)."""
    coordinates = list(mesh_coordinates(rank, shape))
    group = []
    for k in range(shape[dimension]):
        coordinates[dimension] = k
        group.append(mesh_rank(coordinates, shape))
    return tuple(group)


def expect_mesh_groups(result, dp, pp, tp, batch, num_microbatches, width):
    """Every collective ran on a tp group (the activations' sums) or a dp group (the
    gradients' average), and every message went to a neighbouring stage of the pp group."""
    shape, names = (dp, pp, tp), ("dp", "pp", "tp")
    micro = (batch // dp // num_microbatches, width)
    for rank, calls in enumerate(result.trace):
        where = f"On rank {rank} (dp={dp}, pp={pp}, tp={tp}; its coordinates " + ", ".join(
            f"{n}={c}" for n, c in zip(names, mesh_coordinates(rank, shape))) + ")"
        own = {n: group_along(rank, shape, d) for d, n in enumerate(names)}
        for call in calls:
            peers = sorted(set(call.sent_to) | set(call.received_from))
            if not peers:
                continue
            if call.op in POINT_TO_POINT:
                stage = mesh_coordinates(rank, shape)[1]
                neighbours = {own["pp"][s] for s in (stage - 1, stage + 1) if 0 <= s < pp}
                if not set(peers) <= neighbours:
                    raise checks.CheckFailed(
                        f"{where}, dist.{call.op} exchanged with rank {peers[0]}, which is not "
                        f"a neighbouring stage of this rank's pp group {list(own['pp'])}. "
                        "Stages pass activations and their gradients to the previous and next "
                        "rank of the pp group: group_dst=stage + 1 or group_src=stage - 1 with "
                        "group=mesh['pp'].get_group().")
                continue
            info = next(iter(call.tensors.values()), None)
            shape_of = tuple(getattr(info, "shape", ())) if info is not None else ()
            activation = shape_of == micro
            what = (f"dist.{call.op} of a {shape_of} tensor, "
                    + ("a micro-batch's activations or their gradient," if activation
                       else "a gradient of this rank's parameters,"))
            group = tuple(call.group_ranks)
            wanted = "tp" if activation else "dp"
            if group == own[wanted]:
                continue
            named = next((n for n in names if own[n] == group), None)
            ran = (f"ran on the {named} group {list(group)}" if named else
                   f"ran on ranks {list(group)}"
                   + (", the whole world" if len(group) == result.world_size else "")
                   + ", which is no group of the mesh")
            fix = ("the tensor-parallel sums (f and g) run on the tp group, mesh['tp']."
                   f"get_group(), ranks {list(own['tp'])}: pass it to tensor_parallel_mlp"
                   if activation else
                   "average the gradients over the dp group, mesh['dp'].get_group(), ranks "
                   f"{list(own['dp'])}: only these ranks hold the same shard of the same "
                   "stage, and other ranks' gradients belong to other weights")
            raise checks.CheckFailed(f"{where}, a {what} {ran}: {fix}.")


def check_composed(result, dp, pp, tp, batch, num_microbatches, width, hidden, seed, dtype):
    expect_mesh_groups(result, dp, pp, tp, batch, num_microbatches, width)
    stages = model_parameters(pp, width, hidden, seed, dtype)
    for stage in stages:
        for param in stage:
            param.requires_grad_()
    x, target = make_data(batch, width, seed, dtype)
    output = whole_model(stages, x)
    torch.nn.functional.mse_loss(output, target).backward()
    losses = [torch.nn.functional.mse_loss(o, t).item() for o, t in
              zip(torch.tensor_split(output.detach(), dp), torch.tensor_split(target, dp))]
    shape = (dp, pp, tp)
    for rank, got in enumerate(result.returns):
        d, s, t = mesh_coordinates(rank, shape)
        where = dict(rank=rank, world_size=result.world_size, dp=dp, pp=pp, tp=tp)
        wanted = shard_of([p.grad for p in stages[s]], t, tp)
        if dp > 1 and checks.same(got["gradients"], [dp * grad for grad in wanted]):
            raise checks.CheckFailed(
                f"On rank {rank} (dp={dp}, pp={pp}, tp={tp}), the gradients are {dp} times one "
                "process's: they are summed over the dp group, not averaged. Divide each by the "
                "dp group's size after the all_reduce.")
        checks.expect(got["gradients"], wanted, **where,
                      what=f"the gradients [w1, b1, w2, b2] of this rank's part of stage {s} "
                           "(one process's gradients of the mean loss over the whole batch, "
                           "cut as shard_of cuts the weights: averaged over dp, not summed)")
        checks.expect(got["loss"], losses[d] if s == pp - 1 else None, **where,
                      what="the returned loss (on the last stage, the mean squared error "
                           "over this dp replica's rows, the micro-batches' losses added up; "
                           "None on the other stages)")


# --- 18-composed-step-bytes-test -------------------------------------------------------------
def check_composed_bytes(result, dp, pp, tp, batch, num_microbatches, width, hidden, seed,
                         dtype):
    expect_mesh_groups(result, dp, pp, tp, batch, num_microbatches, width)
    shape = (dp, pp, tp)
    found = bytes_per_dimension(result, shape)
    itemsize = torch.empty((), dtype=dtype).element_size()
    activations = batch // dp * width * itemsize
    for rank in range(result.world_size):
        _, s, t = mesh_coordinates(rank, shape)
        shard = sum(p.numel() for p in shard_of(model_parameters(1, width, hidden)[0], t, tp))
        wanted = {"dp": (dp - 1) * shard * itemsize,
                  "pp": activations * ((s > 0) + (s < pp - 1)),
                  "tp": (tp - 1) * activations * (1 + (s > 0)), "across": 0}
        for name, want in wanted.items():
            got = found[name][rank]
            if got == want:
                continue
            hint = {
                "tp": "one all_reduce of each micro-batch's activations in the forward pass "
                      "(g), and one of their gradient in the backward pass (f) on every stage "
                      "but the first" + (
                          ": the first stage's input is data, which needs no gradient, so do "
                          "not make it require one" if s == 0 and got > want else ""),
                "pp": "each micro-batch's activations sent once to the next stage, and their "
                      "gradient once to the previous stage",
                "dp": "one all_reduce of each gradient on the dp group, once per step",
                "across": "nothing: every message goes along one dimension of the mesh"}[name]
            raise checks.CheckFailed(
                f"On rank {rank} (dp={dp}, pp={pp}, tp={tp}; stage {s}), the bytes sent along "
                f"{name}, as the trace counts them, should be\n    {want}\nbut they are\n    "
                f"{got}\nAlong {name} a step sends {hint}.")


# --- 18-choose-layout-test -------------------------------------------------------------------
def layout_problem(model, cluster, layout):
    """What keeps `layout` from being chosen on its own (a rule it breaks), or None."""
    dp, tp, pp, cp = layout
    gpus, per_node = cluster["gpus"], cluster["gpus_per_node"]
    if dp * tp * pp * cp != gpus:
        return (f"it uses dp · tp · pp · cp = {dp * tp * pp * cp} GPUs, and the cluster has "
                f"{gpus}: the four sizes multiply to the number of GPUs")
    if tp > per_node:
        return (f"tp={tp} spans more than one node of {per_node} GPUs: tensor parallelism "
                "all-reduces in every layer and stays on a node's links")
    for name, size, what in (("pp", pp, "layers"), ("dp", dp, "batch"), ("cp", cp, "sequence")):
        if model[what] % size:
            return f"{name}={size} does not divide the {what}, {model[what]}"
    memory = memory_per_gpu(model, dp, tp, pp, cp)
    if sum(memory.values()) > cluster["gpu_memory"]:
        kinds = ", ".join(f"{kind} {value / 1e9:.1f}" for kind, value in memory.items())
        return (f"it needs {sum(memory.values()) / 1e9:.1f} GB per GPU ({kinds} GB), more than "
                f"the GPU's {cluster['gpu_memory'] / 1e9:g} GB: every kind counts, the optimizer "
                "state included")
    return None


def check_layout(choose, model, cluster, expected):
    """choose(model, cluster) is `expected`; else a message that says what is wrong with it."""
    named = isinstance(model, str)
    values = MODELS[model] if named else model
    where = (f"For the {model} model" if named else "For a model of the test's own ("
             + ", ".join(f"{k}={v:g}" for k, v in values.items()) + ")")
    where += (f" on {cluster['gpus']} GPUs ({cluster['gpus_per_node']} per node, "
              f"{cluster['gpu_memory'] / 1e9:g} GB each)")
    got = choose(dict(values), dict(cluster))
    if got == expected:
        return
    if got is not None and not (isinstance(got, (tuple, list)) and len(got) == 4 and all(
            isinstance(size, int) and size >= 1 for size in got)):
        raise checks.CheckFailed(
            f"{where}, choose_layout returned {got!r}: it returns a tuple (dp, tp, pp, cp) of "
            "four ints of at least 1, or None when no layout fits.")
    if got is not None and tuple(got) == expected:
        return
    if got is None:
        memory = sum(memory_per_gpu(values, *expected).values())
        raise checks.CheckFailed(
            f"{where}, choose_layout returned None, but (dp, tp, pp, cp) = {expected} passes "
            f"every rule and fits, in {memory / 1e9:.1f} GB per GPU.")
    got = tuple(got)
    problem = layout_problem(values, cluster, got)
    if problem is not None:
        raise checks.CheckFailed(
            f"{where}, choose_layout chose (dp, tp, pp, cp) = {got}, but {problem}.")
    if expected is None:
        raise checks.CheckFailed(
            f"{where}, choose_layout chose (dp, tp, pp, cp) = {got}, but no layout fits.")
    mine = seconds_per_step(values, cluster, *got)
    best = seconds_per_step(values, cluster, *expected)
    if mine > best:
        raise checks.CheckFailed(
            f"{where}, choose_layout chose (dp, tp, pp, cp) = {got}, which fits but sends for "
            f"{mine:.4f} s per step, and {expected} fits too and takes {best:.4f} s. Of the "
            "layouts that fit, choose the one with the least seconds_per_step.")
    raise checks.CheckFailed(
        f"{where}, choose_layout chose (dp, tp, pp, cp) = {got}, and {expected} takes as long "
        f"({best:.4f} s per step): on a tie, take fewer pipeline stages, then the smaller tp, "
        "then the smaller cp.")
