"""Chapter 16's test helpers: the case functions and checks its visible test cells use.

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


# --- 16-ring-attention-test ------------------------------------------------------------------
def private_block(rank, world_size, heads, seq_len, head_dim, dtype, scale):
    """Rank `rank`'s positions block of q (times scale), k and v, with values only it knows."""
    block = positions_of(torch.empty(1, seq_len), rank, world_size).shape[1]
    generator = checks.private_generator(rank, "qkv")
    q, k, v = [torch.randn(heads, block, head_dim, generator=generator,
                           dtype=torch.float64).to(dtype) for _ in range(3)]
    return q * scale, k, v


def ring_case(rank, world_size, heads, seq_len, head_dim, dtype, scale):
    torch.set_num_threads(1)
    q, k, v = (t.to(commlab.device()) for t in
               private_block(rank, world_size, heads, seq_len, head_dim, dtype, scale))
    return ring_attention(q, k, v)


def check_ring(result, heads, seq_len, head_dim, dtype, scale):
    n = result.world_size
    context = dict(heads=heads, seq_len=seq_len, head_dim=head_dim, dtype=dtype, scale=scale)
    blocks = [private_block(r, n, heads, seq_len, head_dim, dtype, scale) for r in range(n)]
    q, k, v = (torch.cat(parts, dim=1) for parts in zip(*blocks))
    full = torch.nn.functional.scaled_dot_product_attention(q, k, v)
    for rank in range(n):
        checks.expect(result.returns[rank], positions_of(full, rank, n), rank=rank,
                      world_size=n, **context,
                      what="ring_attention's output (this rank's rows of full attention)")
    checks.expect_only(result, {"batch_isend_irecv"}, **context)
    block_bytes = 2 * positions_of(k, 0, n).nbytes               # K and V of one block
    for rank in range(n):
        got = [(c.sent_to, c.received_from) for c in result.calls("batch_isend_irecv", rank)]
        ring = [({(rank + 1) % n: block_bytes}, {(rank - 1) % n: block_bytes})] * (n - 1)
        mirror = [({(rank - 1) % n: block_bytes}, {(rank + 1) % n: block_bytes})] * (n - 1)
        checks.expect(got, mirror if got == mirror else ring, rank=rank, world_size=n, **context,
                      what="each step's batch_isend_irecv as ({rank sent to: bytes}, {rank "
                           "received from: bytes}): K and V of one block out to rank + 1 and in "
                           "from rank - 1 (or all the other way round), at every step but the "
                           "last")


# --- 16-ring-attention-overlap-test ----------------------------------------------------------
def memory_of(tensor):
    """The addresses a tensor's elements lie between, as (first byte, last byte + 1)."""
    elements = 1 + sum((size - 1) * stride for size, stride in zip(tensor.shape, tensor.stride()))
    return tensor.data_ptr(), tensor.data_ptr() + elements * tensor.element_size()


def overlap_case(rank, world_size, heads, seq_len, head_dim, dtype):
    torch.set_num_threads(1)
    q, k, v = make_qkv(heads, seq_len, head_dim, dtype)
    q, k, v = (positions_of(t, rank, world_size).to(commlab.device()) for t in (q, k, v))
    given, shared = [memory_of(t) for t in (q, k, v)], []
    batch_isend_irecv = dist.batch_isend_irecv

    def watched(p2p_op_list, *args, **kwargs):
        """Note whether this batch receives into memory it sends or the caller's q, k, v."""
        into = [memory_of(op.tensor) for op in p2p_op_list
                if getattr(op.op, "__name__", "") == "irecv"]
        read = given + [memory_of(op.tensor) for op in p2p_op_list
                        if getattr(op.op, "__name__", "") != "irecv"]
        shared.append(any(a < d and c < b for a, b in into for c, d in read))
        return batch_isend_irecv(p2p_op_list, *args, **kwargs)

    dist.batch_isend_irecv = watched
    try:
        spans()                                        # forget the spans of an earlier case
        ring_attention(q, k, v)
        return spans(), shared
    finally:
        dist.batch_isend_irecv = batch_isend_irecv


def check_overlap(result, heads, seq_len, head_dim, dtype):
    n = result.world_size
    context = dict(heads=heads, seq_len=seq_len, head_dim=head_dim, dtype=dtype)
    for rank in range(n):
        batches, (attended, shared) = result.calls("batch_isend_irecv", rank), result.returns[rank]
        checks.expect(len(attended), n, rank=rank, world_size=n, **context,
                      what="the number of block_attention calls (one per K/V block)")
        checks.expect([step + 1 for step, wrong in enumerate(shared) if wrong], [], rank=rank,
                      world_size=n, **context,
                      what="the batch_isend_irecv calls (numbered from 1) that receive into "
                           "memory they send, or into the q, k, v given to ring_attention "
                           "(receive into new tensors, torch.empty_like: k and v are still read "
                           "and sent while the transfer runs)")
        checks.expect([(c.started < s.started, c.finished is not None and c.finished > s.finished)
                       for c, s in zip(batches, attended)], [(True, True)] * (n - 1),
                      rank=rank, world_size=n, **context,
                      what="for each step but the last, (its batch_isend_irecv was started "
                           "before that step's block_attention began, and waited for after it "
                           "ended)")


# --- 16-causal-ring-attention-test -----------------------------------------------------------
def balanced_block(rank, world_size, heads, seq_len, head_dim, dtype, scale):
    """Rank `rank`'s q (times scale), k and v in the load-balanced layout (chunk rank, then
    chunk 2 x world_size - 1 - rank), with values only it knows."""
    generator = checks.private_generator(rank, "causal qkv")
    q, k, v = [torch.randn(heads, seq_len // world_size, head_dim, generator=generator,
                           dtype=torch.float64).to(dtype) for _ in range(3)]
    return q * scale, k, v


def in_order(blocks, world_size):
    """The whole (heads, seq_len, head_dim) tensor from every rank's load-balanced block."""
    chunks = [None] * (2 * world_size)
    for rank, block in enumerate(blocks):
        chunks[rank], chunks[2 * world_size - 1 - rank] = block.chunk(2, dim=1)
    return torch.cat(chunks, dim=1)


def causal_case(rank, world_size, heads, seq_len, head_dim, dtype, scale):
    torch.set_num_threads(1)
    q, k, v = (t.to(commlab.device()) for t in
               balanced_block(rank, world_size, heads, seq_len, head_dim, dtype, scale))
    if seq_len % (2 * world_size) == 0:
        return causal_ring_attention(q, k, v)
    try:
        causal_ring_attention(q, k, v)
    except ValueError:
        return "ValueError"
    return "no error"


def check_causal(result, heads, seq_len, head_dim, dtype, scale):
    n = result.world_size
    context = dict(heads=heads, seq_len=seq_len, head_dim=head_dim, dtype=dtype, scale=scale)
    if seq_len % (2 * n):
        for rank in range(n):
            checks.expect(result.returns[rank], "ValueError", rank=rank, world_size=n, **context,
                          what="what causal_ring_attention raised for a sequence that does not "
                               "cut into 2 x world_size chunks (an odd number of positions on "
                               "each rank)")
        return
    blocks = [balanced_block(r, n, heads, seq_len, head_dim, dtype, scale) for r in range(n)]
    q, k, v = (in_order(parts, n) for parts in zip(*blocks))
    causal = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    for rank in range(n):
        checks.expect(result.returns[rank], load_balanced(causal, rank, n), rank=rank,
                      world_size=n, **context,
                      what="causal_ring_attention's output (this rank's rows of causal "
                           "attention: chunk rank, then chunk 2 x world_size - 1 - rank)")
    checks.expect_only(result, {"batch_isend_irecv"}, **context)
    block_bytes = 2 * blocks[0][1].nbytes                      # K and V of one rank's block
    for rank in range(n):
        got = [(c.sent_to, c.received_from) for c in result.calls("batch_isend_irecv", rank)]
        ring = [({(rank + 1) % n: block_bytes}, {(rank - 1) % n: block_bytes})] * (n - 1)
        mirror = [({(rank - 1) % n: block_bytes}, {(rank + 1) % n: block_bytes})] * (n - 1)
        checks.expect(got, mirror if got == mirror else ring, rank=rank, world_size=n, **context,
                      what="each step's batch_isend_irecv as ({rank sent to: bytes}, {rank "
                           "received from: bytes}): K and V of one block out to rank + 1 and in "
                           "from rank - 1 (or all the other way round), at every step but the "
                           "last")


# --- 16-causal-ring-attention-balance-test ---------------------------------------------------
def balance_case(rank, world_size, heads, seq_len, head_dim):
    torch.set_num_threads(1)
    q, k, v = (load_balanced(t, rank, world_size).to(commlab.device())
               for t in make_qkv(heads, seq_len, head_dim))
    spans()                                            # forget the spans of an earlier case
    causal_ring_attention(q, k, v)
    computed = [s.label for s in spans()]
    return (computed.count("attention on one block"),
            computed.count("attention on a diagonal block"))


def check_balance(result, heads, seq_len, head_dim):
    n = result.world_size
    for rank in range(n):
        checks.expect(result.returns[rank], (2 * n - 1, 2), rank=rank, world_size=n,
                      heads=heads, seq_len=seq_len, head_dim=head_dim,
                      what="the chunk pairs this rank computed, as (calls of block_attention, "
                           "calls with causal=True): one call per pair of one query chunk and "
                           "one key chunk at or before it, none for a key chunk after it, as the "
                           "prompt asks. (Concatenating chunks, to compute several pairs in one "
                           "call, can give the right values too, as torch's own ring does; this "
                           "cell grades the calls the prompt describes.)")


# --- 16-ulysses-relayout-test ----------------------------------------------------------------
def layout_piece(rank, world_size, which, heads, seq_len, head_dim, dtype):
    """What rank `rank` holds before the call, with values only it knows: its positions block
    of every head (sequence_to_heads), or its heads block at every position."""
    if which == "sequence_to_heads":
        shape = (heads, seq_len // world_size, head_dim)
    else:
        shape = (heads // world_size, seq_len, head_dim)
    return checks.private_tensor(rank, shape, dtype, which)


def layout_case(rank, world_size, which, heads, seq_len, head_dim, dtype):
    x = layout_piece(rank, world_size, which, heads, seq_len, head_dim, dtype)
    if which == "sequence_to_heads":
        return sequence_to_heads(x.to(commlab.device()))
    return heads_to_sequence(x.to(commlab.device()))


def check_layout(result, which, heads, seq_len, head_dim, dtype):
    n = result.world_size
    pieces = [layout_piece(r, n, which, heads, seq_len, head_dim, dtype) for r in range(n)]
    if which == "sequence_to_heads":
        x = torch.cat(pieces, dim=1)                      # the whole (heads, seq_len, head_dim)
        checks.expect_per_rank(result, list(x.chunk(n, dim=0)),
                               what="sequence_to_heads(x) (this rank's heads, every position)")
    else:
        x = torch.cat(pieces, dim=0)
        checks.expect_per_rank(result, [positions_of(x, r, n) for r in range(n)],
                               what="heads_to_sequence(y) (every head, this rank's positions)")
    checks.expect_only(result, {"all_to_all_single", "all_to_all"})
    block = x.nbytes // (n * n)
    for rank in range(n):
        context = dict(which=which, heads=heads, seq_len=seq_len, head_dim=head_dim, dtype=dtype)
        calls = result.trace[rank]
        checks.expect(len(calls), 1, rank=rank, world_size=n, **context,
                      what="the number of all-to-all calls (one moves every block)")
        others = {peer: block for peer in range(n) if peer != rank}
        checks.expect((calls[0].sent_to, calls[0].received_from), (others, others), rank=rank,
                      world_size=n, **context,
                      what="the all-to-all's bytes as ({rank sent to: bytes}, {rank received "
                           "from: bytes}): one block of heads / n heads by seq_len / n "
                           "positions to and from every other rank")
