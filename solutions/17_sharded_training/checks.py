"""Chapter 17's test helpers: the case functions and checks its visible test cells use.

Each test cell defines them in the notebook's namespace with ``checks.test_helpers(...)``, as
if they stood in the cell: the names they use (the answers, the chapter's own definitions, its
imports) are the notebook's. Hidden tests are not here. Validate, ``make check`` and the grader
read the course's own copy of this file (in its notebooks/ folder): a copy in your work folder
is for reading, and editing it changes nothing.
"""

import io

import torch

import commlab
from commlab import checks


# --- 17-sharded-optimizer-test ---------------------------------------------------------------
def private_batches(rank, steps, rows):
    """Rank `rank`'s rows of every batch, x and y, with values only that rank knows."""
    return make_batches(steps, rows, generator=checks.private_generator(rank, "rows"))


def optimizer_settings(kind):
    """The optimizer class and keyword arguments the tests use for `kind`."""
    return {"AdamW": (torch.optim.AdamW, dict(lr=0.01, weight_decay=0.1, eps=1e-5)),
            "SGD": (torch.optim.SGD, dict(lr=0.05, momentum=0.9)),
            "Adam": (torch.optim.Adam, dict(lr=0.02, amsgrad=True, eps=1e-5))}[kind]


def make_optimizer(kind, params, sharded):
    optimizer_cls, kwargs = optimizer_settings(kind)
    if sharded:
        return ShardedOptimizer(params, optimizer_cls, **kwargs)
    return optimizer_cls(params, **kwargs)


def first_groups(model):
    """The optimizer's groups at the start: every parameter but the head's, which join later."""
    return parameter_groups((name, param) for name, param in model.named_parameters()
                            if not name.startswith("head."))


def follow_schedule(optimizer, model, step, unfreeze_at, halve_lr_at):
    """The test's schedule at step `step`: `head` joins the optimizer as a group of its own at
    step unfreeze_at; the first group's learning rate is halved at step halve_lr_at."""
    if step == unfreeze_at:
        model.head.requires_grad_(True)
        optimizer.add_param_group({"params": list(model.head.parameters()), "lr": 0.03})
    if step == halve_lr_at:
        optimizer.param_groups[0]["lr"] /= 2


def average_gradients(optimizer, model, batches_per_rank, step):
    """Each parameter's gradient: the average over the ranks of the gradient of each rank's mean
    squared error on its rows of batch `step` (on a rank, batches_per_rank holds its own)."""
    grads = {}
    for batches in batches_per_rank:
        optimizer.zero_grad()
        x, y = batches[step]
        torch.nn.functional.mse_loss(model(x), y).backward()
        for param in model.parameters():
            if param.grad is not None:
                grads[param] = grads.get(param, 0) + param.grad
    if len(batches_per_rank) > 1:
        for param, grad in grads.items():
            param.grad = grad / len(batches_per_rank)


def train_with(optimizer, model, batches_per_rank, unfreeze_at, halve_lr_at, calls=(),
               closure=False):
    """The test's training loop. The gradient is the average over the ranks of the gradient of
    each rank's mean squared error on its rows (on a rank, batches_per_rank holds its own rows
    only). `head` joins the optimizer as a group of its own at step unfreeze_at; the first
    group's learning rate is halved at step halve_lr_at. With `closure` (on a rank), the
    gradients are computed by a closure given to step(), as LBFGS-style training loops do.
    Returns the parameters after each step, the optimizer's parameters and those it trained at
    each step, where each step() began and ended in the trace `calls` (on a rank), and whether
    each step() returned what the closure returned (None without a closure)."""
    history, held, trained, marks, returned = [], [], [], [], []
    for step in range(len(batches_per_rank[0])):
        follow_schedule(optimizer, model, step, unfreeze_at, halve_lr_at)
        losses = []
        if closure:
            x, y = batches_per_rank[0][step]

            def compute_loss(x=x, y=y, losses=losses):
                optimizer.zero_grad()
                losses.append(torch.nn.functional.mse_loss(model(x), y))
                losses[-1].backward()
                return losses[-1]
        else:
            average_gradients(optimizer, model, batches_per_rank, step)
        held.append([p for group in optimizer.param_groups for p in group["params"]])
        trained.append([p for p in held[-1] if p.grad is not None])
        marks.append(len(calls))
        if closure:
            result = optimizer.step(compute_loss)
            returned.append(len(losses) == 1 and result is losses[0])
        else:
            optimizer.step()
            returned.append(None)
        marks.append(len(calls))
        history.append([p.detach().clone() for p in model.parameters()])
    return history, held, trained, marks, returned


def optimizer_case(rank, world_size, optimizer, steps, rows, unfreeze_at, halve_lr_at,
                   closure=False):
    torch.set_num_threads(1)
    device = commlab.device()
    model = make_model(device=device)
    sharded = make_optimizer(optimizer, first_groups(model), sharded=True)
    mine = [(x.to(device), y.to(device)) for x, y in private_batches(rank, steps, rows)]
    calls = commlab.trace.current().calls
    first = len(calls)                            # this case's calls begin here
    history, _, _, marks, returned = train_with(sharded, model, [mine], unfreeze_at,
                                                halve_lr_at, calls, closure)
    return history, [mark - first for mark in marks], returned


def bytes_per_root(calls, op):
    """{root: bytes of the tensors} over the calls of kind op."""
    found = {}
    for call in calls:
        if call.op == op:
            found[call.root] = found.get(call.root, 0) + next(iter(call.tensors.values())).nbytes
    return dict(sorted(found.items()))


def check_optimizer(result, optimizer, steps, rows, unfreeze_at, halve_lr_at, closure=False):
    n = result.world_size
    context = dict(optimizer=optimizer, steps=steps, rows=rows, unfreeze_at=unfreeze_at,
                   halve_lr_at=halve_lr_at, closure=closure)
    model = make_model()
    every_rank = [private_batches(r, steps, rows) for r in range(n)]
    expected, held, trained, _, _ = train_with(
        make_optimizer(optimizer, first_groups(model), False), model, every_rank, unfreeze_at,
        halve_lr_at)
    checks.expect_only(result, {"reduce", "broadcast"}, **context)
    for rank in range(n):
        history, marks, returned = result.returns[rank]
        where = dict(rank=rank, world_size=n, **context)
        if closure:
            checks.expect(returned, [True] * steps, **where,
                          what="whether each step(closure) called the closure once and returned "
                               "what it returned (the loss): a training loop may compute the "
                               "gradients in a closure that it gives to step()")
        calls = result.trace[rank]
        windows = [calls[marks[2 * step]:marks[2 * step + 1]] for step in range(steps)]
        checks.expect(len(calls) - sum(len(window) for window in windows), 0, **where,
                      what="the number of calls your code made outside step() (in the "
                           "constructor, add_param_group or zero_grad): ZeRO-1 communicates in "
                           "step() only")
        for step in range(steps):
            checks.expect(history[step], expected[step], **where,
                          what=f"the parameters after step {step} (model.parameters(): those "
                               f"the unsharded {optimizer} gives on every rank's rows)")
            reduced = bytes_per_root(windows[step], "reduce")
            sent = bytes_per_root(windows[step], "broadcast")
            checks.expect(sum(reduced.values()), sum(p.nbytes for p in trained[step]), **where,
                          what=f"the bytes of the gradients your step() reduced in step {step} "
                               "(each trained parameter's gradient once, none for a frozen one)")
            checks.expect(sent, reduced, **where,
                          what=f"the bytes each rank broadcast in step {step}, as {{src: bytes}}: "
                               "a rank sends back the parameters whose gradients it received, "
                               "as many bytes as your reduce calls sent it ({dst: bytes})")
            fair = (-(-sum(p.nbytes for p in held[step]) // n)
                    + max(p.nbytes for p in held[step]))
            checks.expect({r: b for r, b in sent.items() if b > fair}, {}, **where,
                          what=f"the ranks that own more than 1/{n} of the optimizer's "
                               f"parameters plus the largest one ({fair} bytes) in step {step}, "
                               "as {rank: bytes it broadcast}: share the parameters out by size")


# --- 17-sharded-optimizer-memory-test --------------------------------------------------------
def state_bytes(optimizer, model):
    """held_bytes of the optimizer, but for the model's parameters and gradients."""
    parameters = list(model.parameters())
    return held_bytes(optimizer, excluding=parameters + [p.grad for p in parameters])


def memory_case(rank, world_size, optimizer, steps, rows):
    torch.set_num_threads(1)
    device = commlab.device()
    model = make_model(device=device)
    model.head.requires_grad_(True)
    sharded = make_optimizer(optimizer, parameter_groups(model.named_parameters()), True)
    for x, y in private_batches(rank, steps, rows):
        sharded.zero_grad()
        torch.nn.functional.mse_loss(model(x.to(device)), y.to(device)).backward()
        sharded.step()
    return state_bytes(sharded, model), [p.detach().clone() for p in model.parameters()]


def check_memory(result, optimizer, steps, rows):
    n = result.world_size
    context = dict(optimizer=optimizer, steps=steps, rows=rows)
    model = make_model()
    model.head.requires_grad_(True)
    unsharded = make_optimizer(optimizer, parameter_groups(model.named_parameters()), False)
    every_rank = [private_batches(r, steps, rows) for r in range(n)]
    for step in range(steps):
        average_gradients(unsharded, model, every_rank, step)
        unsharded.step()
    for rank, (_, parameters) in enumerate(result.returns):
        checks.expect(parameters, list(model.parameters()), rank=rank, world_size=n, **context,
                      what=f"the parameters after the last step (the unsharded {optimizer}'s on "
                           "every rank's rows)")
    held = [state for state, _ in result.returns]
    whole = state_bytes(unsharded, model)
    checks.expect(sum(held), whole, world_size=n, **context,
                  what=f"held_bytes(optimizer) added up over the ranks ({held} per rank): the "
                       f"unsharded {optimizer}'s state, each parameter's on one rank only")
    fair = -(-whole // n) + max(held_bytes(state) for state in unsharded.state.values())
    checks.expect({rank: b for rank, b in enumerate(held) if b > fair}, {}, world_size=n,
                  **context, what=f"the ranks whose optimizer holds more than 1/{n} of the "
                                  f"unsharded state plus one parameter's ({fair} bytes), as "
                                  "{rank: bytes}")


# --- 17-resume-optimizer-test ----------------------------------------------------------------
def sized_model(seed, width, hidden):
    """A ToyModel of the given sizes, initialised from seed (the same on every rank)."""
    torch.manual_seed(seed)
    return ToyModel(width, hidden)


def resume_groups(model, unfreeze_at, before):
    """The optimizer's groups when `before` steps have been taken: the first groups, and
    `head`'s once training has unfrozen it (at step unfreeze_at), as train_steps adds it."""
    groups = first_groups(model)
    if unfreeze_at is not None and unfreeze_at < before:
        model.head.requires_grad_(True)
        groups.append({"params": list(model.head.parameters()), "lr": 0.03})
    return groups


def train_steps(optimizer, model, batches_per_rank, steps, unfreeze_at, halve_lr_at):
    """The training loop of check_optimizer's test, for the steps in `steps` only (numbered as
    in the whole run): the average of the ranks' gradients, `head` joining as a group of its
    own at step unfreeze_at, the first group's learning rate halved at step halve_lr_at.
    Returns the parameters after each of these steps."""
    history = []
    for step in steps:
        follow_schedule(optimizer, model, step, unfreeze_at, halve_lr_at)
        average_gradients(optimizer, model, batches_per_rank, step)
        optimizer.step()
        history.append([p.detach().clone() for p in model.parameters()])
    return history


def saved_and_loaded(value):
    """value written to a checkpoint file and read back: a copy that shares no tensor with it."""
    buffer = io.BytesIO()
    torch.save(value, buffer)
    buffer.seek(0)
    return torch.load(buffer)


def resume_case(rank, world_size, optimizer, seed, width, hidden, before, after, rows,
                unfreeze_at, halve_lr_at):
    """Train a ResumableShardedOptimizer `before` steps, checkpoint the model and the
    optimizer (state_dict(), through a file's bytes), build a fresh model and optimizer, load
    both, train `after` steps more; and, beside it, the same optimizer trained without a break.
    Returns both runs' parameters after each step, and held_bytes of the resumed optimizer."""
    torch.set_num_threads(1)
    mine = [private_batches_of(rank, before + after, rows, width)]
    steady_model = sized_model(seed, width, hidden)
    steady = make_resumable(optimizer, first_groups(steady_model))
    uninterrupted = train_steps(steady, steady_model, mine, range(before + after), unfreeze_at,
                                halve_lr_at)
    model = sized_model(seed, width, hidden)
    first = make_resumable(optimizer, first_groups(model))
    resumed = train_steps(first, model, mine, range(before), unfreeze_at, halve_lr_at)
    checkpoint = saved_and_loaded({"model": model.state_dict(), "optimizer": first.state_dict()})
    del model, first
    model = sized_model(seed + 1, width, hidden)          # other weights, until it loads them
    model.load_state_dict(checkpoint["model"])
    again = make_resumable(optimizer, resume_groups(model, unfreeze_at, before))
    again.load_state_dict(checkpoint["optimizer"])
    resumed += train_steps(again, model, mine, range(before, before + after), unfreeze_at,
                           halve_lr_at)
    return (uninterrupted, resumed, state_bytes(again, model),
            state_bytes(steady, steady_model))


def private_batches_of(rank, steps, rows, width):
    """Rank `rank`'s rows of every batch, `width` features wide, values only that rank knows."""
    return make_batches(steps, rows, width, generator=checks.private_generator(rank, "resume"))


def make_resumable(kind, params):
    optimizer_cls, kwargs = optimizer_settings(kind)
    return ResumableShardedOptimizer(params, optimizer_cls, **kwargs)


def one_process(kind, seed, width, hidden, before, after, rows, world_size, unfreeze_at,
                halve_lr_at, lose=None):
    """In one process, the unsharded optimizer on every rank's rows: the parameters after each
    step, resumed from a checkpoint after `before` steps. With `lose`, the checkpoint loses a
    part on the way, as a wrong answer would: "state" (every parameter's state), "step" (the
    step counts, back to 0) or "settings" (the groups' settings, back to those the optimizer
    was built with)."""
    optimizer_cls, kwargs = optimizer_settings(kind)
    every_rank = [private_batches_of(r, before + after, rows, width) for r in range(world_size)]
    model = sized_model(seed, width, hidden)
    optimizer = optimizer_cls(first_groups(model), **kwargs)
    history = train_steps(optimizer, model, every_rank, range(before), unfreeze_at, halve_lr_at)
    saved = saved_and_loaded(optimizer.state_dict())
    optimizer = optimizer_cls(resume_groups(model, unfreeze_at, before), **kwargs)
    built = [{k: v for k, v in group.items() if k != "params"} for group in optimizer.param_groups]
    if lose == "state":
        saved["state"] = {}
    if lose == "step":
        for state in saved["state"].values():
            if "step" in state:
                state["step"] = torch.zeros_like(state["step"])
    optimizer.load_state_dict(saved)
    if lose == "settings":
        for group, settings in zip(optimizer.param_groups, built):
            group.update(settings)
    return history + train_steps(optimizer, model, every_rank, range(before, before + after),
                                 unfreeze_at, halve_lr_at)


def what_was_lost(resumed, expected, kind, **case):
    """Words naming what the resumed run lost, when its parameters are those of a checkpoint
    that lost a part of the optimizer's state or settings (and that loss changes them)."""
    words = {
        "state": f"every parameter's state ({STATE_NAMES[kind]}): load_state_dict did not "
                 "restore the optimizer state, so the resumed optimizer started afresh",
        "step": "the step counts (state['step'], back to 0): the optimizer state was restored "
                "without them, so Adam's bias correction started again",
        "settings": "the groups' settings (the learning rate the training halved before the "
                    "checkpoint): load_state_dict restored the state but not param_groups, and "
                    "step() copies those settings into the wrapped optimizer"}
    for lose, said in words.items():
        lost = one_process(kind, lose=lose, **case)
        if not checks.same(lost, expected) and checks.same(resumed, lost):
            return f" The parameters are what you get when the checkpoint loses {said}."
    return ""


STATE_NAMES = {"AdamW": "exp_avg, exp_avg_sq and step",
               "Adam": "exp_avg, exp_avg_sq, max_exp_avg_sq and step",
               "SGD": "momentum_buffer"}


def check_resume(result, optimizer, seed, width, hidden, before, after, rows, unfreeze_at,
                 halve_lr_at):
    n = result.world_size
    context = dict(optimizer=optimizer, seed=seed, width=width, hidden=hidden, before=before,
                   after=after, rows=rows, unfreeze_at=unfreeze_at, halve_lr_at=halve_lr_at)
    case = dict(seed=seed, width=width, hidden=hidden, before=before, after=after, rows=rows,
                world_size=n, unfreeze_at=unfreeze_at, halve_lr_at=halve_lr_at)
    expected = one_process(optimizer, **case)
    for rank in range(n):
        uninterrupted, resumed, _, _ = result.returns[rank]
        where = dict(rank=rank, world_size=n, **context)
        checks.expect(uninterrupted, expected, **where,
                      what=f"the parameters after each step of the run without a checkpoint "
                           f"(those of one process's {optimizer} on every rank's rows): the "
                           "ShardedOptimizer of Exercise 1 must pass its test first")
        for step in range(before, before + after):
            if checks.same(resumed[step], expected[step]):
                continue
            lost = what_was_lost(resumed, expected, optimizer, **case)
            checks.expect(resumed[step], expected[step], **where,
                          what="the run resumed from the checkpoint drifts from the run without "
                               f"one: the resumed optimizer must go on from the state it was "
                               f"saved with, each parameter's state ({STATE_NAMES[optimizer]}) "
                               "on the rank that owns it, and the groups' settings."
                               f"{lost} Its parameters after step {step}, the "
                               f"{'first' if step == before else 'next'} after the checkpoint "
                               f"taken after {before} steps (those of the run without one, "
                               f"and of one process's {optimizer})")


def check_resume_memory(result, optimizer, **case):
    n = result.world_size
    for rank in range(n):
        _, _, resumed, steady = result.returns[rank]
        checks.expect(resumed, steady, rank=rank, world_size=n, optimizer=optimizer, **case,
                      what="held_bytes(optimizer) after training resumed from the checkpoint "
                           "(parameters and gradients excluded): what the same rank holds "
                           "without a checkpoint, its share of the state only. "
                           "load_state_dict keeps this rank's share: the state of the "
                           "parameters it owns")


# --- 17-fully-sharded-test -------------------------------------------------------------------
def make_trainer(kind, params):
    optimizer_cls, kwargs = {
        "AdamW": (torch.optim.AdamW, dict(lr=0.01, weight_decay=0.1, eps=1e-5)),
        "SGD": (torch.optim.SGD, dict(lr=0.05, momentum=0.9)),
        "Adam": (torch.optim.Adam, dict(lr=0.02, amsgrad=True, eps=1e-5))}[kind]
    return optimizer_cls(params, **kwargs)


def sharded_case(rank, world_size, optimizer, steps, rows, compute_dtype):
    torch.set_num_threads(1)
    device = commlab.device()
    # initial weights only this rank knows: the right parameters need rank 0's
    model = make_model(checks.private_seed(rank, "model"), device)
    sharded = FullyShardedModule(model, compute_dtype)
    trainer = make_trainer(optimizer, parameter_groups(sharded.named_parameters()))
    losses, shards, input_grads = [], [], []
    for x, y in private_batches(rank, steps, rows):
        trainer.zero_grad()
        # the input requires a gradient, as a layer's does when the layers before it train
        x = x.to(device).requires_grad_()
        loss = torch.nn.functional.mse_loss(sharded(x).float(), y.to(device))
        loss.backward()
        trainer.step()
        losses.append(loss.item())
        shards.append([p.detach().clone() for p in sharded.parameters()])
        input_grads.append(x.grad)
    return losses, shards, sharded.full_parameters(), input_grads


def reference(world_size, optimizer, steps, rows, compute_dtype):
    """In one process, from rank 0's weights: each rank's loss at each step, the parameters
    after each step, and the gradient of each rank's loss with respect to its rows at each step.
    The gradient is the average of the ranks' gradients in float32, each computed on the rank's
    rows (with a compute_dtype, on a copy of the weights in it)."""
    model = make_model(checks.private_seed(0, "model"))
    trainer = make_trainer(optimizer, parameter_groups(model.named_parameters()))
    every_rank = [private_batches(r, steps, rows) for r in range(world_size)]
    losses, history, input_grads = [], [], []
    for step in range(steps):
        computing = copy.deepcopy(model).to(compute_dtype) if compute_dtype else model
        grads, step_losses, step_input_grads = {}, [], []
        for batches in every_rank:
            computing.zero_grad()
            x, y = batches[step]
            x = x.clone().requires_grad_()
            output = computing(x.to(compute_dtype or x.dtype))
            loss = torch.nn.functional.mse_loss(output.float(), y)
            loss.backward()
            step_losses.append(loss.item())
            step_input_grads.append(x.grad)
            for name, param in computing.named_parameters():
                if param.grad is not None:
                    grads[name] = grads.get(name, 0) + param.grad.float()
        trainer.zero_grad()
        for name, param in model.named_parameters():
            if name in grads:
                param.grad = grads[name] / world_size
        trainer.step()
        losses.append(step_losses)
        input_grads.append(step_input_grads)
        history.append({name: p.detach().clone() for name, p in model.named_parameters()})
    return losses, history, input_grads


def sent_per_op(result, rank):
    """Bytes sent per kind of call, under one name whichever of torch's names was used."""
    sent = {}
    for call in result.trace[rank]:
        op = checks.canonical(call.op)
        sent[op] = sent.get(op, 0) + call.bytes_sent
    return sent


def check_sharded(result, optimizer, steps, rows, compute_dtype):
    n = result.world_size
    context = dict(optimizer=optimizer, steps=steps, rows=rows, compute_dtype=compute_dtype)
    losses, history, input_grads = reference(n, optimizer, steps, rows, compute_dtype)
    shard = {name: -(-p.numel() // n) for name, p in make_model().named_parameters()}
    trained = sum(shard[name] for name, p in make_model().named_parameters() if p.requires_grad)
    low = (compute_dtype or torch.float32).itemsize
    for rank in range(n):
        got_losses, got_shards, full, got_input_grads = result.returns[rank]
        where = dict(rank=rank, world_size=n, **context)
        checks.expect(got_losses, [step[rank] for step in losses], **where,
                      what="the loss at each step (on this rank's rows, training from rank 0's "
                           "weights)")
        for step in range(steps):
            checks.expect(got_shards[step], [torch.chunk(flat_padded(p, n), n)[rank]
                                             for p in history[step].values()], **where,
                          what=f"the module's parameters after step {step} (this rank's chunk "
                               "of each of one process's parameters, flat and padded)")
        checks.expect(full, history[-1], **where,
                      what="full_parameters() after the last step (one process's parameters, "
                           "by name)")
        checks.expect(got_input_grads, [step[rank] for step in input_grads], **where,
                      what="x.grad after each backward pass (the input required a gradient, as "
                           "it does when the layers before the module train: backward must "
                           "return the gradient of x, in x's dtype)")
        checks.expect(sent_per_op(result, rank), {
            "scatter": (n - 1) * 4 * sum(shard.values()) * (rank == 0),
            "all_gather_into_tensor": (n - 1) * (2 * steps * low + 4) * sum(shard.values()),
            "reduce_scatter_tensor": (n - 1) * steps * 4 * trained},
            **where, what="the bytes your code sent with each kind of call: rank 0's shards "
                          "scattered once; every shard gathered for each forward and each "
                          "backward pass (in the compute dtype) and once for full_parameters "
                          "(float32); the gradients of the trained parameters reduce-scattered "
                          "in float32 once per step (all_gather_single and "
                          "reduce_scatter_single count under their older names, "
                          "all_gather_into_tensor and reduce_scatter_tensor)")


# --- 17-fully-sharded-memory-test ------------------------------------------------------------
def module_memory_case(rank, world_size, steps, compute_dtype):
    torch.set_num_threads(1)
    device = commlab.device()
    model = make_model(checks.private_seed(rank, "model"), device)
    held = []
    model.register_forward_pre_hook(
        lambda module, inputs: held.append(("while computing", held_bytes(sharded))))
    sharded = FullyShardedModule(model, compute_dtype)
    trainer = torch.optim.SGD(sharded.parameters(), lr=0.05)
    for x, y in private_batches(rank, steps, rows=2):
        held.append(("before forward", held_bytes(sharded)))
        output = sharded(x.to(device))
        held.append(("after forward", held_bytes(sharded)))
        torch.nn.functional.mse_loss(output.float(), y.to(device)).backward()
        held.append(("after backward", held_bytes(sharded)))
        trainer.step()
        trainer.zero_grad()
    held.append(("after training", held_bytes(sharded)))
    return held, sharded.full_parameters()


def check_module_memory(result, steps, compute_dtype):
    n = result.world_size
    context = dict(steps=steps, compute_dtype=compute_dtype)
    model = make_model(checks.private_seed(0, "model"))
    trainer = torch.optim.SGD(model.parameters(), lr=0.05)
    every_rank = [private_batches(r, steps, rows=2) for r in range(n)]
    for step in range(steps):
        computing = copy.deepcopy(model).to(compute_dtype) if compute_dtype else model
        grads = {}
        for batches in every_rank:
            computing.zero_grad()
            x, y = batches[step]
            torch.nn.functional.mse_loss(computing(x.to(compute_dtype or x.dtype)).float(),
                                         y).backward()
            for name, param in computing.named_parameters():
                if param.grad is not None:
                    grads[name] = grads.get(name, 0) + param.grad.float()
        for name, param in model.named_parameters():
            param.grad = grads[name] / n if name in grads else None
        trainer.step()
    params = list(model.parameters())
    shards = sum(4 * -(-p.numel() // n) for p in params)
    grads = sum(4 * -(-p.numel() // n) for p in params if p.requires_grad)
    whole = sum(p.numel() for p in params) * (compute_dtype or torch.float32).itemsize
    wanted = [(point, size) for _ in range(steps) for point, size in (
        ("before forward", shards), ("after forward", shards), ("after backward", shards + grads))]
    for rank, (held, full) in enumerate(result.returns):
        where = dict(rank=rank, world_size=n, **context)
        checks.expect(full, dict(model.named_parameters()), **where,
                      what="full_parameters() after training (one process's parameters, by "
                           "name)")
        checks.expect([entry for entry in held if entry[0] != "while computing"],
                      wanted + [("after training", shards)], **where,
                      what="held_bytes(sharded) at each point of each step, as (point, bytes): "
                           "the shards alone, and after the backward pass their gradients too")
        computing = [size for point, size in held if point == "while computing"]
        checks.expect([min(size, whole) for size in computing] + [len(computing) >= steps],
                      [whole] * len(computing) + [True], **where,
                      what="held_bytes(sharded) each time the wrapped module's forward began "
                           f"(every parameter whole, in the compute dtype: at least {whole} "
                           "bytes), then whether it began at least once per step")
