"""Chapter 13's test helpers: the case functions and checks its visible test cells use.

Each test cell defines them in the notebook's namespace with ``checks.test_helpers(...)``, as
if they stood in the cell: the names they use (the answers, the chapter's own definitions, its
imports) are the notebook's. Hidden tests are not here. Validate, ``make check`` and the grader
read the course's own copy of this file (in its notebooks/ folder): a copy in your work folder
is for reading, and editing it changes nothing.
"""

import torch

import commlab
from commlab import checks


# --- 13-train-data-parallel-test -------------------------------------------------------------
def rows_seen(model):
    """The number of rows of each input the model is called on, noted by a hook of the test's."""
    rows = []
    model.register_forward_pre_hook(lambda module, inputs: rows.append(inputs[0].shape[0]))
    return rows


def private_rows(rank, world_size, steps, batch):
    """Rank `rank`'s rows of every batch's x (torch.tensor_split(x, world_size)[rank]), with
    values only that rank knows."""
    rows = len(torch.tensor_split(torch.arange(batch), world_size)[rank])
    return torch.randn(steps, rows, 8, generator=checks.private_generator(rank, "batches"))


def rank_batches(rank, world_size, steps, batch, device="cpu"):
    """The batches as rank `rank` gets them: its own rows filled, NaN in the other ranks'."""
    x = torch.full((steps, batch, 8), float("nan"))
    x[:, torch.tensor_split(torch.arange(batch), world_size)[rank]] = private_rows(
        rank, world_size, steps, batch)
    return [(xs.to(device), ys.to(device)) for xs, ys in
            zip(x, torch.sin(x.sum(dim=-1, keepdim=True)))]


def whole_batches(world_size, steps, batch):
    """Every rank's rows together: the batches one process trains on (make_batches' form)."""
    x = torch.cat([private_rows(r, world_size, steps, batch) for r in range(world_size)], dim=1)
    return list(zip(x, torch.sin(x.sum(dim=-1, keepdim=True))))


def dp_case(rank, world_size, steps, batch):
    device = commlab.device()
    # initial weights only this rank knows: the right curve needs rank 0's, broadcast
    model = make_model(checks.private_seed(rank, "model"), device)
    rows = rows_seen(model)
    return train_data_parallel(model, rank_batches(rank, world_size, steps, batch, device)), rows


def check_data_parallel(world_size, steps=4, batch=16):
    context = dict(steps=steps, batch=batch)
    result = checks.run(dp_case, world_size, args=(steps, batch), **context)
    expected = train_single(make_model(checks.private_seed(0, "model")),
                            whole_batches(world_size, steps, batch))
    for rank, (losses, rows) in enumerate(result.returns):
        checks.expect(losses, expected, rank=rank, world_size=world_size, **context,
                      what="the loss of each step (those of train_single from rank 0's weights)")
        checks.expect(rows, [batch // world_size] * max(len(rows), 1), rank=rank,
                      world_size=world_size, **context,
                      what="the rows of x in each forward pass (this rank's share of the batch, "
                           "torch.tensor_split(x, world_size)[rank])")
    checks.expect_only(result, {"broadcast", "all_reduce"}, **context)
    model_bytes = sum(p.numel() * p.element_size() for p in make_model().parameters())
    per_step = (world_size - 1) * (model_bytes + 4)
    sent = [steps * per_step + (world_size - 1) * model_bytes * (rank == 0)
            for rank in range(world_size)]
    received = [steps * per_step + model_bytes * (rank != 0) for rank in range(world_size)]
    checks.expect_bytes(result, sent=sent, received=received, **context)


# --- 13-train-zero3-test ---------------------------------------------------------------------
def zero3_case(rank, world_size, steps, batch):
    device = commlab.device()
    model = make_model(checks.private_seed(rank, "model"), device)
    rows = rows_seen(model)
    return train_zero3(model, rank_batches(rank, world_size, steps, batch, device)), rows


def sent_per_op(result, rank):
    """Bytes sent per kind of call, under one name whichever of torch's names was used."""
    sent = {}
    for call in result.trace[rank]:
        op = checks.canonical(call.op)
        sent[op] = sent.get(op, 0) + call.bytes_sent
    return sent


def check_zero3(world_size, steps=4, batch=16):
    context = dict(steps=steps, batch=batch)
    result = checks.run(zero3_case, world_size, args=(steps, batch), **context)
    expected = train_single(make_model(checks.private_seed(0, "model")),
                            whole_batches(world_size, steps, batch))
    numel = sum(p.numel() for p in make_model().parameters())
    shard_bytes = 4 * -(-numel // world_size)
    for rank, (losses, rows) in enumerate(result.returns):
        checks.expect(losses, expected, rank=rank, world_size=world_size, **context,
                      what="the loss of each step (those of train_single from rank 0's weights)")
        checks.expect(rows, [batch // world_size] * max(len(rows), 1), rank=rank,
                      world_size=world_size, **context,
                      what="the rows of x in each forward pass (this rank's share of the batch, "
                           "torch.tensor_split(x, world_size)[rank])")
        want = {"scatter": (world_size - 1) * shard_bytes * (rank == 0),
                "all_gather_into_tensor": steps * (world_size - 1) * shard_bytes,
                "reduce_scatter_tensor": steps * (world_size - 1) * shard_bytes,
                "all_reduce": steps * (world_size - 1) * 4}
        checks.expect(sent_per_op(result, rank), want, rank=rank, world_size=world_size,
                      **context, what="the bytes your code sent with each kind of call "
                                      "(all_gather_single and reduce_scatter_single count under "
                                      "their older names, all_gather_into_tensor and "
                                      "reduce_scatter_tensor)")


# --- 13-train-zero3-memory-test --------------------------------------------------------------
class Watched(list):
    """The batches, as a list that notes parameter_bytes(model) each time a batch is taken
    (and when the loop is done): what the model holds between steps."""

    def __init__(self, batches, model):
        super().__init__(batches)
        self.model, self.held = model, []

    def __iter__(self):
        for batch in list.__iter__(self):
            self.held.append(parameter_bytes(self.model))
            yield batch
        self.held.append(parameter_bytes(self.model))

    def __getitem__(self, index):
        self.held.append(parameter_bytes(self.model))
        return list.__getitem__(self, index)


def memory_case(rank, world_size, steps, batch):
    device = commlab.device()
    model = make_model(rank, device)
    batches = Watched(make_batches(steps, batch, device), model)
    train_zero3(model, batches)
    return batches.held + [parameter_bytes(model)]


def check_memory(world_size, steps=4, batch=16):
    context = dict(steps=steps, batch=batch)
    result = checks.run(memory_case, world_size, args=(steps, batch), **context)
    for rank, held in enumerate(result.returns):
        checks.expect(held, [0] * len(held), rank=rank, world_size=world_size, **context,
                      what="parameter_bytes(model) between steps (each time your loop took the "
                           "next batch, and after train_zero3 returned): free the model's own "
                           "weights after the scatter and the gathered ones after each step")
