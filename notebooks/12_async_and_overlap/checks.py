"""Chapter 12's test helpers: the case functions and checks its visible test cells use.

Each test cell defines them in the notebook's namespace with ``checks.test_helpers(...)``, as
if they stood in the cell: the names they use (the answers, the chapter's own definitions, its
imports) are the notebook's. Hidden tests are not here. Validate, ``make check`` and the grader
read the course's own copy of this file (in its notebooks/ folder): a copy in your work folder
is for reading, and editing it changes nothing.
"""

import torch

import commlab
from commlab import checks


# --- 12-average-all-test ---------------------------------------------------------------------
def average_case(rank, world_size, shapes, dtype):
    # numbers only this rank knows: the average reaches a rank only through the calls
    tensors = [checks.private_tensor(rank, shape, dtype, i).to(commlab.device())
               for i, shape in enumerate(shapes)]
    average_all(tensors)
    return tensors


def check_average(world_size, shapes, dtype=torch.float32):
    context = dict(shapes=shapes, dtype=dtype)
    result = checks.run(average_case, world_size, args=(shapes, dtype), **context)
    expected = [sum(checks.private_tensor(r, shape, dtype, i) for r in range(world_size))
                / world_size for i, shape in enumerate(shapes)]
    checks.expect_per_rank(result, [expected] * world_size,
                           what="the tensors after average_all", **context)
    checks.expect_only(result, {"all_reduce"}, **context)


# --- 12-average-all-order-test ---------------------------------------------------------------
def order_case(rank, world_size, shapes, dtype):
    tensors = [checks.private_tensor(rank, shape, dtype, i).to(commlab.device())
               for i, shape in enumerate(shapes)]
    # the last rank starts average_all only once the others have started all their calls
    with checks.late_rank("all_reduce", len(shapes)):
        average_all(tensors)


def check_order(world_size, shapes, dtype=torch.float32):
    context = dict(shapes=shapes, dtype=dtype)
    result = checks.run(order_case, world_size, args=(shapes, dtype), **context)
    for rank in range(world_size):
        calls = result.calls("all_reduce", rank)
        checks.expect([c.async_op for c in calls], [True] * len(shapes), rank=rank,
                      world_size=world_size, what="async_op of each all_reduce call", **context)
    late = world_size - 1
    joined = min(c.started for c in result.calls("all_reduce", late))
    for rank in range(late):
        started = sum(c.started < joined for c in result.calls("all_reduce", rank))
        checks.expect(started, len(shapes), rank=rank, world_size=world_size, **context,
                      what=f"the number of all_reduce calls this rank had started when rank "
                           f"{late} (held back by the test) made its first one (start them "
                           "all, then wait: a wait cannot end before every rank made the call)")


# --- 12-bucketed-ddp-test --------------------------------------------------------------------
class Reversed(torch.nn.Module):
    """The chapter's MLP with its layers registered last first: its gradients become ready in
    the opposite order to its buckets'."""

    def __init__(self):
        super().__init__()
        self.last = torch.nn.Linear(16, 4)
        self.middle = torch.nn.Linear(16, 16)
        self.first = torch.nn.Linear(8, 16)

    def forward(self, x):
        return self.last(torch.relu(self.middle(torch.relu(self.first(x)))))


def variant(model, seed, device="cpu"):
    """The chapter's MLP ("plain") from `seed`, or a variant DistributedDataParallel handles:
    a frozen bias ("frozen"), a layer used twice ("shared"), layers registered in reverse."""
    torch.manual_seed(seed)
    if model == "reversed":
        return Reversed().to(device)
    hidden = torch.nn.Linear(16, 16)
    layers = [torch.nn.Linear(8, 16), torch.nn.ReLU(), hidden, torch.nn.ReLU()]
    if model == "shared":
        layers += [hidden, torch.nn.ReLU()]
    module = torch.nn.Sequential(*layers, torch.nn.Linear(16, 4)).to(device)
    if model == "frozen":
        module[2].bias.requires_grad_(False)
    return module


def private_data(rank, world_size, batch=16):
    """Rank `rank`'s share of the batch (as make_data's), with values only that rank knows."""
    rows = len(torch.tensor_split(torch.arange(batch), world_size)[rank])
    generator = checks.private_generator(rank, "data")
    return torch.randn(rows, 8, generator=generator), torch.randn(rows, 4, generator=generator)


def named(module):
    return {name: param.detach().clone() for name, param in module.named_parameters()}


def ddp_case(rank, world_size, momentum, model, bucket_cap_bytes, steps):
    device = commlab.device()
    x, y = (t.to(device) for t in private_data(rank, world_size))
    # initial weights only this rank knows: the right result needs rank 0's, broadcast
    ours = BucketedDDP(variant(model, checks.private_seed(rank, "model"), device),
                       bucket_cap_bytes)
    # torch.optim imports torch._dynamo, seconds per rank: only on 2 ranks
    optimizer = torch.optim.SGD(ours.parameters(), lr=0.1, momentum=0.9) if momentum else None
    for _ in range(steps):
        if optimizer is not None:
            optimizer.zero_grad()
        torch.nn.functional.mse_loss(ours(x), y).backward()
        ours.finish_gradient_synchronization()
        if optimizer is not None:
            optimizer.step()
        else:
            sgd_step(ours.parameters())
    return named(ours.module)


def averaged_gradient_reference(model, world_size, steps, momentum):
    """What DistributedDataParallel reaches, in one process: from rank 0's weights, each step
    the average of the ranks' gradients on their own data, applied by sgd_step or, with
    momentum, by torch.optim.SGD's rule (lr=0.1, momentum=0.9)."""
    module = variant(model, checks.private_seed(0, "model"))
    trainable = [param for param in module.parameters() if param.requires_grad]
    data = [private_data(r, world_size) for r in range(world_size)]
    velocity = [None] * len(trainable)
    for _ in range(steps):
        gradients = [torch.autograd.grad(torch.nn.functional.mse_loss(module(x), y), trainable)
                     for x, y in data]
        with torch.no_grad():
            for i, (param, *per_rank) in enumerate(zip(trainable, *gradients)):
                step = sum(per_rank) / world_size
                if momentum:
                    velocity[i] = step if velocity[i] is None else 0.9 * velocity[i] + step
                    step = velocity[i]
                param -= 0.1 * step
    return named(module)


def check_ddp(result, momentum, model, bucket_cap_bytes, steps):
    world_size = result.world_size
    context = dict(model=model, bucket_cap_bytes=bucket_cap_bytes, steps=steps)
    expected = averaged_gradient_reference(model, world_size, steps, momentum)
    for rank in range(world_size):
        checks.expect(result.returns[rank], expected, rank=rank, world_size=world_size,
                      **context, what=f"the parameters after {steps} steps (those "
                                      "DistributedDataParallel reaches)")
    # the trace's byte model: rank 0's weights broadcast once, each step every trainable
    # gradient all-reduced once
    module = variant(model, 0)
    weights = sum(p.numel() * p.element_size() for p in module.parameters())
    gradients = sum(p.numel() * p.element_size() for p in module.parameters() if p.requires_grad)
    each_step = steps * (world_size - 1) * gradients
    checks.expect_bytes(result, **context,
                        sent=[each_step + (world_size - 1) * weights * (r == 0)
                              for r in range(world_size)],
                        received=[each_step + weights * (r != 0) for r in range(world_size)])


MODELS = ("plain", "frozen", "shared", "reversed")


# --- 12-bucketed-ddp-buckets-test ------------------------------------------------------------
def buckets_case(rank, world_size, model, bucket_cap_bytes, steps):
    device = commlab.device()
    x, y = make_data(rank, world_size, device=device)
    ours = BucketedDDP(variant(model, seed=rank, device=device), bucket_cap_bytes)
    # (name, time) of each gradient: a hook on the node that accumulates it, which runs after
    # every hook the wrapper put on the parameter and before the next gradient is computed
    ready, ends, accumulators = [], [], []     # (the nodes kept alive, with their hooks)
    for name, param in ours.module.named_parameters():
        if param.requires_grad:
            accumulators.append(torch.autograd.graph.get_gradient_edge(param).node)
            accumulators[-1].register_hook(
                lambda *_, name=name: ready.append((name, time.perf_counter())))
    began = time.perf_counter()
    for _ in range(steps):
        torch.nn.functional.mse_loss(ours(x), y).backward()
        ends.append(time.perf_counter())          # when each loss.backward() returned
        ours.finish_gradient_synchronization()
        sgd_step(ours.parameters())
    return ready, ends, (began, time.perf_counter())


def check_buckets(result, model, bucket_cap_bytes, steps):
    world_size = result.world_size
    context = dict(model=model, bucket_cap_bytes=bucket_cap_bytes, steps=steps)
    module = variant(model, seed=0)
    names = {param: name for name, param in module.named_parameters()}
    trainable = [param for param in module.parameters() if param.requires_grad]
    buckets = [[names[p] for p in bucket] for bucket in make_buckets(trainable, bucket_cap_bytes)]
    sizes = [sum(p.numel() * p.element_size() for p in trainable if names[p] in bucket)
             for bucket in buckets]
    for rank in range(world_size):
        ready, ends, (began, trained) = result.returns[rank]
        calls = [c for c in result.calls("all_reduce", rank) if began < c.started < trained]
        checks.expect(len(calls), steps * len(buckets), rank=rank, world_size=world_size,
                      **context, what=f"the number of all_reduce calls ({len(buckets)} buckets "
                                      f"x {steps} steps)")
        for step in range(steps):
            these = calls[step * len(buckets):(step + 1) * len(buckets)]
            checks.expect([c.tensors["tensor"].nbytes for c in these], sizes, rank=rank,
                          world_size=world_size, **context, step=step,
                          what="the bytes of the step's all_reduce calls, in the order they were "
                               "started (one per bucket, bucket 0 first: every rank starts them "
                               "in bucket order)")
            checks.expect([c.async_op for c in these], [True] * len(buckets), rank=rank,
                          world_size=world_size, **context, step=step,
                          what="async_op of each bucket's all_reduce")
            # when each gradient of this step was done with, after the wrapper's hooks on it
            since = ends[step - 1] if step else float("-inf")
            events = [(name, t) for name, t in ready if since < t < ends[step]]
            order = [name for name, _ in events]
            completing, in_time = [], []
            for i, call in enumerate(these):
                # the gradient after which bucket i, and every bucket before it, is complete
                last = max(order.index(name) for bucket in buckets[:i + 1] for name in bucket)
                completing.append(order[last])
                in_time.append(call.started < events[last][1])
            checks.expect(in_time, [True] * len(buckets), rank=rank, world_size=world_size,
                          **context, step=step,
                          what="for each bucket, whether its all_reduce started as soon as it "
                               "could, from the hook of the gradient that completed it "
                               f"({completing}, one per bucket), before the backward pass went "
                               "on to the next gradient")
