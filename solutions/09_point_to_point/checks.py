"""Chapter 09's test helpers: the case functions and checks its visible test cells use.

Each test cell defines them in the notebook's namespace with ``checks.test_helpers(...)``, as
if they stood in the cell: the names they use (the answers, the chapter's own definitions, its
imports) are the notebook's. Hidden tests are not here. Validate, ``make check`` and the grader
read the course's own copy of this file (in its notebooks/ folder): a copy in your work folder
is for reading, and editing it changes nothing.
"""

import torch

import commlab
from commlab import checks

# --- 09-shift-right-test ---------------------------------------------------------------------
P2P = {"send", "recv", "isend", "irecv", "batch_isend_irecv"}


def shift_case(rank, world_size, shape, dtype):
    tensor = checks.private_tensor(rank, shape, dtype).to(commlab.device())
    received = shift_right(tensor)
    return received, tensor


def check_shift(world_size, shape=(4,), dtype=torch.float32):
    result = checks.run(shift_case, world_size, args=(shape, dtype), shape=shape, dtype=dtype)
    # every rank's tensor, made here as on its rank
    expected = [(checks.private_tensor((r - 1) % world_size, shape, dtype),
                 checks.private_tensor(r, shape, dtype)) for r in range(world_size)]
    checks.expect_per_rank(result, expected, what="(shift_right(tensor), tensor afterwards)",
                           shape=shape, dtype=dtype)
    checks.expect_only(result, P2P, shape=shape, dtype=dtype)
    nbytes = torch.empty(shape, dtype=dtype).nbytes
    checks.expect_bytes(result, sent=[nbytes] * world_size, received=[nbytes] * world_size,
                        shape=shape, dtype=dtype)


# --- 09-pipeline-forward-test ----------------------------------------------------------------
def pipeline_input(batch, dtype):
    """Rank 0's input batch: made on rank 0 only (and in the check)."""
    return torch.randn(batch, HIDDEN, generator=checks.private_generator(0, "input"),
                       dtype=dtype)


def pipeline_case(rank, world_size, batch, num_microbatches, dtype):
    if rank == 0:
        x = pipeline_input(batch, dtype).to(commlab.device())
    else:
        x = torch.full((batch, HIDDEN), float("nan"), dtype=dtype, device=commlab.device())
    return pipeline_forward(x, num_microbatches)


def run_pipeline(world_size, batch, num_microbatches, dtype):
    """Run pipeline_forward on world_size stages and check its output; return the run."""
    context = dict(batch=batch, num_microbatches=num_microbatches, dtype=dtype)
    result = checks.run(pipeline_case, world_size, args=(batch, num_microbatches, dtype),
                        **context)
    output = reference_forward(pipeline_input(batch, dtype), world_size)
    checks.expect_per_rank(result, [None] * (world_size - 1) + [output],
                           what="pipeline_forward's return value", **context)
    return result


def check_pipeline(world_size, batch=6, num_microbatches=3, dtype=torch.float32):
    result = run_pipeline(world_size, batch, num_microbatches, dtype)
    context = dict(batch=batch, num_microbatches=num_microbatches, dtype=dtype)
    checks.expect_only(result, P2P, **context)
    nbytes = torch.empty(batch, HIDDEN, dtype=dtype).nbytes
    checks.expect_bytes(result, sent=[nbytes] * (world_size - 1) + [0],
                        received=[0] + [nbytes] * (world_size - 1), **context)


# --- 09-pipeline-forward-micro-batches-test --------------------------------------------------
def messages_sent(result, rank):
    count = 0
    for call in result.trace[rank]:
        if call.op in ("send", "isend"):
            count += 1
        elif call.op == "batch_isend_irecv":
            count += sum(kind == "isend" for kind, _, _ in call.ops)
    return count


def check_micro_batches(world_size, batch=6, num_microbatches=3, dtype=torch.float32):
    result = run_pipeline(world_size, batch, num_microbatches, dtype)
    for rank in range(world_size - 1):
        checks.expect(messages_sent(result, rank), num_microbatches, rank=rank,
                      what="the number of messages sent (one per micro-batch)",
                      world_size=world_size, batch=batch, num_microbatches=num_microbatches,
                      dtype=dtype)
