"""Chapter 15's test helpers: the case functions and checks its visible test cells use.

Each test cell defines them in the notebook's namespace with ``checks.test_helpers(...)``, as
if they stood in the cell: the names they use (the answers, the chapter's own definitions, its
imports) are the notebook's. Hidden tests are not here. Validate, ``make check`` and the grader
read the course's own copy of this file (in its notebooks/ folder): a copy in your work folder
is for reading, and editing it changes nothing.
"""

import torch

from commlab import checks


# --- 15-gpipe-test ---------------------------------------------------------------------------
def private_weights(rank, dtype):
    """Stage `rank`'s [weight, bias], with values only that rank knows."""
    generator = checks.private_generator(rank, "stage")
    return [torch.randn(*shape, generator=generator, dtype=torch.float64).to(dtype)
            / HIDDEN ** 0.5 for shape in ((HIDDEN, HIDDEN), (HIDDEN,))]


def load_private_weights(stage, rank, dtype):
    """Put stage `rank`'s private [weight, bias] into `stage` (or a module wrapping it)."""
    with torch.no_grad():
        for param, value in zip(stage.parameters(), private_weights(rank, dtype)):
            param.copy_(value)


def private_batch(rank, what, batch, dtype):
    """The inputs (on rank 0) or the targets (on the last rank), known to that rank only."""
    generator = checks.private_generator(rank, what)
    return torch.randn(batch, HIDDEN, generator=generator, dtype=torch.float64).to(dtype)


def with_private_inputs(schedule, rank, world_size, batch, dtype):
    """`schedule`, given this rank's stage with its own weights, and the inputs on rank 0 and
    the targets on the last rank with values only those ranks know (NaN elsewhere, as
    run_schedule makes them)."""
    def step(stage, x, target, num_microbatches):
        load_private_weights(stage, rank, dtype)
        if rank == 0:
            x = private_batch(rank, "inputs", batch, dtype).to(x.device)
        if rank == world_size - 1:
            target = private_batch(rank, "targets", batch, dtype).to(target.device)
        return schedule(stage, x, target, num_microbatches)
    return step


def private_reference(world_size, batch, dtype):
    """reference_step on the ranks' own weights, inputs and targets."""
    stages = [make_stage(s, dtype=dtype) for s in range(world_size)]
    for s, stage in enumerate(stages):
        load_private_weights(stage, s, dtype)
    x = private_batch(0, "inputs", batch, dtype)
    for stage in stages:
        x = stage(x)
    loss = torch.nn.functional.mse_loss(x, private_batch(world_size - 1, "targets", batch, dtype))
    loss.backward()
    return [[p.grad for p in stage.parameters()] for stage in stages], loss.item()


def check_values(result, batch, dtype):
    """Each stage's gradients, the loss, and the bytes of the messages."""
    world_size = result.world_size
    gradients, loss = private_reference(world_size, batch, dtype)
    for rank, got in enumerate(result.returns):
        checks.expect(got["gradients"], gradients[rank], rank=rank, world_size=world_size,
                      what="the stage's gradients [weight, bias] (one process's, on the "
                           "whole batch)")
        checks.expect(got["loss"], loss if rank == world_size - 1 else None, rank=rank,
                      world_size=world_size,
                      what="the returned loss (the batch's on the last rank, None elsewhere)")
    nbytes = make_batch(batch, dtype=dtype)[0].nbytes
    traffic = [nbytes * ((rank > 0) + (rank < world_size - 1)) for rank in range(world_size)]
    checks.expect_bytes(result, sent=traffic, received=traffic)


def gpipe_case(rank, world_size, batch, num_microbatches, dtype):
    schedule = with_private_inputs(gpipe, rank, world_size, batch, dtype)
    return run_schedule(schedule, rank, world_size, batch, num_microbatches, dtype)


def check_gpipe(result, batch, num_microbatches, dtype):
    check_values(result, batch, dtype)


# --- 15-gpipe-schedule-test ------------------------------------------------------------------
def gpipe_schedule_case(rank, world_size, batch, num_microbatches, dtype):
    return run_schedule(gpipe, rank, world_size, batch, num_microbatches, dtype)


def check_gpipe_schedule(result, batch, num_microbatches, dtype):
    world_size = result.world_size
    for rank, got in enumerate(result.returns):
        checks.expect(got["forwards"], num_microbatches, rank=rank, world_size=world_size,
                      what="how many times the stage ran forward (once per micro-batch, in "
                           "forward_step)")
    order = [("F", i) for i in range(num_microbatches)] + [
        ("B", i) for i in range(num_microbatches)]
    expect_schedule(result, [got["spans"] for got in result.returns],
                    [order] * world_size, "this chapter's GPipe order")


# --- 15-one-f-one-b-test ---------------------------------------------------------------------
def one_f_one_b_case(rank, world_size, batch, num_microbatches, dtype):
    schedule = with_private_inputs(one_f_one_b, rank, world_size, batch, dtype)
    return run_schedule(schedule, rank, world_size, batch, num_microbatches, dtype)


def check_one_f_one_b(result, batch, num_microbatches, dtype):
    check_values(result, batch, dtype)


# --- 15-one-f-one-b-schedule-test ------------------------------------------------------------
def one_f_one_b_schedule_case(rank, world_size, batch, num_microbatches, dtype):
    return run_schedule(one_f_one_b, rank, world_size, batch, num_microbatches, dtype)


def check_one_f_one_b_schedule(result, batch, num_microbatches, dtype):
    world_size = result.world_size
    for rank, got in enumerate(result.returns):
        checks.expect(got["forwards"], num_microbatches, rank=rank, world_size=world_size,
                      what="how many times the stage ran forward (once per micro-batch, in "
                           "forward_step)")
    expect_schedule(result, [got["spans"] for got in result.returns],
                    [one_f_one_b_order(r, world_size, num_microbatches)
                     for r in range(world_size)], "the 1F1B order")
    for rank, got in enumerate(result.returns):
        most = min(num_microbatches, world_size - rank)
        if got["held"] > most:
            raise checks.CheckFailed(
                f"On rank {rank}, the stage held the activations of {got['held']} "
                f"micro-batches at once; under 1F1B it holds at most {most}. Drop each "
                "micro-batch's (inputs, outputs) once its backward step has run, and do not "
                "keep the graph (retain_graph).")
        if got["kept"] > most:
            raise checks.CheckFailed(
                f"On rank {rank}, when a forward step began, the (inputs, outputs) of "
                f"{got['kept']} earlier micro-batches were still alive; under 1F1B at most "
                f"{most} are (those whose backward step has not run, and the one whose backward "
                "step just did). Drop each micro-batch's (inputs, outputs) once its backward "
                "step has run (take it out of the list that keeps it): kept to the end of the "
                "step, they hold every micro-batch's stage input, output and input gradient.")


# --- 15-recompute-test -----------------------------------------------------------------------
def recompute_case(rank, world_size, batch, num_microbatches, dtype):
    """This rank's stage, with weights and micro-batches only it has, run as Checkpointed in
    GPipe's order on one stage: every forward_step (with the loss, as on the last rank), then
    every backward_step. The stage's gradients, each micro-batch input's gradient, and what
    held_activations counted."""
    torch.set_num_threads(1)
    device = commlab.device()
    stage = make_stage(rank, device, dtype)
    load_private_weights(stage, rank, dtype)
    x = private_batch(rank, "inputs", batch, dtype).to(device)
    target = private_batch(rank, "targets", batch, dtype).to(device)
    wrapped = Checkpointed(stage)
    with held_activations(stage) as held:
        saved = [forward_step(wrapped, micro, micro_target, num_microbatches)
                 for micro, micro_target in zip(torch.tensor_split(x, num_microbatches),
                                                torch.tensor_split(target, num_microbatches))]
        for inputs, outputs in saved:
            backward_step(inputs, outputs, None)
    return {"gradients": [p.grad for p in stage.parameters()],
            "input_gradients": [inputs.grad for inputs, _ in saved],
            "held": held.peak, "forwards": held.forwards}


def plain_stage_gradients(rank, batch, num_microbatches, dtype):
    """In one process, the plain stage of rank `rank` on its micro-batches: the stage's
    gradients and each micro-batch input's gradient."""
    stage = make_stage(rank, dtype=dtype)
    load_private_weights(stage, rank, dtype)
    x = private_batch(rank, "inputs", batch, dtype)
    target = private_batch(rank, "targets", batch, dtype)
    input_gradients = []
    for micro, micro_target in zip(torch.tensor_split(x, num_microbatches),
                                   torch.tensor_split(target, num_microbatches)):
        micro = micro.clone().requires_grad_()
        (torch.nn.functional.mse_loss(stage(micro), micro_target) / num_microbatches).backward()
        input_gradients.append(micro.grad)
    return [p.grad for p in stage.parameters()], input_gradients


def check_recompute(result, batch, num_microbatches, dtype):
    world_size = result.world_size
    for rank, got in enumerate(result.returns):
        gradients, input_gradients = plain_stage_gradients(rank, batch, num_microbatches, dtype)
        where = dict(rank=rank, world_size=world_size, batch=batch,
                     num_microbatches=num_microbatches, dtype=dtype)
        checks.expect(got["gradients"], gradients, **where,
                      what="the stage's gradients [weight, bias] (the plain stage's: backward "
                           "must run the stage again with autograd and backward through it)")
        checks.expect(got["input_gradients"], input_gradients, **where,
                      what="each micro-batch input's gradient (what backward returns for x, "
                           "which goes back to rank - 1)")


# --- 15-recompute-memory-test ----------------------------------------------------------------
def recompute_memory_case(rank, world_size, batch, num_microbatches, dtype):
    return recompute_case(rank, world_size, batch, num_microbatches, dtype)


def check_recompute_memory(result, batch, num_microbatches, dtype):
    world_size = result.world_size
    for rank, got in enumerate(result.returns):
        where = dict(rank=rank, world_size=world_size, batch=batch,
                     num_microbatches=num_microbatches, dtype=dtype)
        checks.expect(got["forwards"], 2 * num_microbatches, **where,
                      what="how many times the stage ran forward: once in each forward step, "
                           "and again in each backward step (Recompute's backward runs the "
                           "stage again rather than keep its graph)")
        checks.expect(got["held"], 1, **where,
                      what="how many micro-batches' activations autograd held at once, at "
                           "most: one, during its backward step. Recompute's forward runs the "
                           "stage without autograd (a Function's forward does), saving only x")
