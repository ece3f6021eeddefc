"""Chapter 10's test helpers: the case functions and checks its visible test cells use.

Each test cell defines them in the notebook's namespace with ``checks.test_helpers(...)``, as
if they stood in the cell: the names they use (the answers, the chapter's own definitions, its
imports) are the notebook's. Hidden tests are not here. Validate, ``make check`` and the grader
read the course's own copy of this file (in its notebooks/ folder): a copy in your work folder
is for reading, and editing it changes nothing.
"""

import torch
import torch.distributed as dist

import commlab
from commlab import checks

# --- 10-ring-all-reduce-test -----------------------------------------------------------------
P2P = {"send", "recv", "isend", "irecv", "batch_isend_irecv"}


def ring_case(rank, world_size, numel, dtype):
    tensor = checks.private_tensor(rank, (numel,), dtype).to(commlab.device())
    returned = ring_all_reduce(tensor)
    return returned, tensor


def messages_sent(result, rank):
    count = 0
    for call in result.trace[rank]:
        if call.op in ("send", "isend"):
            count += 1
        elif call.op == "batch_isend_irecv":
            count += sum(kind == "isend" for kind, _, _ in call.ops)
    return count


def ring_bytes(world_size, numel, dtype):
    """What each rank sends and receives under the ring schedule, from the chunk sizes."""
    itemsize = torch.empty(0, dtype=dtype).element_size()
    size = [len(c) * itemsize for c in torch.tensor_split(torch.arange(numel), world_size)]
    sent = [sum(size[(r - s) % world_size] + size[(r + 1 - s) % world_size]
                for s in range(world_size - 1)) for r in range(world_size)]
    received = [sent[(r - 1) % world_size] for r in range(world_size)]
    return sent, received


SCHEDULE = ("The chunk order differs from the ring schedule: at step s of the reduce-scatter, "
            "rank r sends chunk (r - s) % world_size; at step s of the all-gather, chunk "
            "(r + 1 - s) % world_size.")


def check_ring(result, numel, dtype):
    world_size = result.world_size
    total = sum(checks.private_tensor(r, (numel,), dtype) for r in range(world_size))
    checks.expect_per_rank(result, [(total, total)] * world_size,
                           what="(ring_all_reduce(tensor), tensor afterwards)")
    checks.expect_only(result, P2P)
    # how many messages: the ranks' own report (their trace); the bytes below are what moved
    for rank in range(world_size):
        checks.expect(messages_sent(result, rank), 2 * (world_size - 1), rank=rank,
                      what="the number of chunks sent, 2 * (world_size - 1),",
                      world_size=world_size, **result.context)
    sent, received = ring_bytes(world_size, numel, dtype)
    checks.expect_bytes(result, sent=sent, received=received, hint=SCHEDULE)


# --- 10-predict-all-reduce-test --------------------------------------------------------------
# predict_all_reduce communicates nothing, so its inputs are public by design; the traced runs
# below make the test's own calls, on public tensors, only to compare its bytes with a real run's.
def predictions(rank, world_size, cases):
    """predict_all_reduce on each (algorithm, size, world_size, alpha, bandwidth), on one rank."""
    return [predict_all_reduce(*case) for case in cases]


def check_predictions(cases, expected):
    result = checks.run(predictions, 1, args=(cases,))
    for (algorithm, size, n, alpha, bandwidth), got, want in zip(cases, result.returns[0],
                                                                 expected):
        checks.expect(tuple(got) if isinstance(got, (list, tuple)) else got, want,
                      what="predict_all_reduce's (bytes_sent, seconds)", algorithm=algorithm,
                      size=size, world_size=n, alpha=alpha, bandwidth=bandwidth)


def worked_example(algorithm, size, expected_bytes, expected_seconds):
    """A case of the worked example (8 ranks, 10 us, 50 GB/s) and its expected prediction."""
    return (algorithm, size, 8, 10e-6, 50e9), (float(expected_bytes), expected_seconds)


def traced_bytes(rank, world_size, numel, algorithm):
    """Run the collectives whose bytes the trace counts like the algorithm (float32); return
    the prediction for the same all-reduce."""
    tensor = torch.ones(numel)
    if algorithm == "direct":
        dist.all_reduce(tensor)                          # traced as a direct exchange
    else:
        shard = torch.empty(numel // world_size)
        dist.reduce_scatter_single(shard, tensor)        # the ring's two halves
        dist.all_gather_single(tensor, shard)
    return predict_all_reduce(algorithm, 4 * numel, world_size, 1e-6, 1e9)


def check_against_trace(result, numel, algorithm):
    for rank, moved in enumerate(result.bytes_sent()):
        predicted = result.returns[rank]
        checks.expect(predicted[0] if isinstance(predicted, (list, tuple)) else predicted,
                      float(moved), rank=rank, world_size=result.world_size, numel=numel,
                      what=f"the bytes a rank sends in a traced {algorithm} all-reduce of "
                           f"{4 * numel} bytes (the first item predict_all_reduce returns)")


# --- 10-tensor-parallel-mlp-test -------------------------------------------------------------
def hidden_sizes(hidden, world_size):
    """How many hidden units each rank holds (tensor_split's cut)."""
    return [len(part) for part in torch.tensor_split(torch.arange(hidden), world_size)]


def mlp_shards(rank, world_size, width, hidden, dtype):
    """Rank rank's (w1_shard, b1_shard, w2_shard): made on that rank only (and in the check)."""
    generator = checks.private_generator(rank, "shards")
    columns = hidden_sizes(hidden, world_size)[rank]
    w1_shard = torch.randn(width, columns, generator=generator, dtype=dtype) / width ** 0.5
    b1_shard = torch.randn(columns, generator=generator, dtype=dtype) * 0.1
    w2_shard = torch.randn(columns, width, generator=generator, dtype=dtype) / hidden ** 0.5
    return w1_shard, b1_shard, w2_shard


def mlp_case(rank, world_size, batch, width, hidden, dtype):
    device = commlab.device()
    x, _, _, _, b2 = [t.to(device) for t in mlp_parameters(batch, width, hidden, dtype)]
    shards = [t.to(device) for t in mlp_shards(rank, world_size, width, hidden, dtype)]
    return tensor_parallel_mlp(x, *shards, b2)


def check_mlp(world_size, batch=3, width=4, hidden=8, dtype=torch.float32):
    context = dict(batch=batch, width=width, hidden=hidden, dtype=dtype)
    result = checks.run(mlp_case, world_size, args=(batch, width, hidden, dtype), **context)
    # the full parameters: every rank's shards, put together here in one process
    x, _, _, _, b2 = mlp_parameters(batch, width, hidden, dtype)
    shards = [mlp_shards(r, world_size, width, hidden, dtype) for r in range(world_size)]
    w1 = torch.cat([w1_shard for w1_shard, _, _ in shards], dim=1)
    b1 = torch.cat([b1_shard for _, b1_shard, _ in shards])
    w2 = torch.cat([w2_shard for _, _, w2_shard in shards], dim=0)
    expected = mlp_reference(x, w1, b1, w2, b2)
    checks.expect_per_rank(result, [expected] * world_size,
                           what="tensor_parallel_mlp's output", **context)
    checks.expect_only(result, {"all_reduce"}, **context)
    output_bytes = expected.nbytes
    for rank in range(world_size):
        reduced = [call.tensors["tensor"].nbytes for call in result.calls("all_reduce", rank)]
        checks.expect(reduced, [output_bytes], rank=rank, world_size=world_size,
                      what="the bytes of each all_reduce (one, of the output's size)", **context)
