"""The ring that this chapter's attention answers pass their key and value blocks around."""


def pass_on(k, v, backwards=False, into=None):
    """Start sending ``k`` and ``v`` to the next rank of the ring (rank + 1, or rank - 1 when
    ``backwards``) and receiving the previous rank's into ``into`` (new tensors if None);
    returns the transfer's handles and the blocks that will arrive."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    to, source = (rank - 1, rank + 1) if backwards else (rank + 1, rank - 1)
    next_k, next_v = into if into is not None else (torch.empty_like(k), torch.empty_like(v))
    handles = dist.batch_isend_irecv(
        [dist.P2POp(dist.isend, k, to % world_size),
         dist.P2POp(dist.isend, v, to % world_size),
         dist.P2POp(dist.irecv, next_k, source % world_size),
         dist.P2POp(dist.irecv, next_v, source % world_size)])
    return handles, (next_k, next_v)


def overlapped(q, k, v, backwards=False, into=None):
    """Ring attention with each step's transfer started before its block's attention and waited
    for after it; ``into(step, k, v)`` gives the tensors a step receives into (new ones if
    None)."""
    world_size = dist.get_world_size()
    output = lse = None
    for step in range(world_size):
        last = step == world_size - 1
        if not last:
            buffers = into(step, k, v) if into else None
            handles, (next_k, next_v) = pass_on(k, v, backwards, buffers)
        output, lse = merge_blocks(output, lse, *block_attention(q, k, v))
        if not last:
            for handle in handles:
                handle.wait()
            k, v = next_k, next_v
    return output
