"""Chapter 16's causal_ring_attention with the parts that its other answers change as
arguments."""

from ring import pass_on


def causal_ring_with(q, k, v, check=True, backwards=False, overlap=True, wasted=False):
    """Causal ring attention on the load-balanced layout: with ``check``, the ValueError for a
    sequence that does not cut into 2 x world_size chunks; the ring to rank + 1 (or rank - 1,
    ``backwards``); each transfer overlapped with the step's blocks (or made after them); the
    chunk pairs whose keys all come later skipped (or, ``wasted``, computed and thrown away)."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    if check and q.shape[1] % 2:
        raise ValueError("the sequence does not cut into 2 x world_size chunks")
    mine = (rank, 2 * world_size - 1 - rank)
    outputs, lses = [None, None], [None, None]
    for step in range(world_size):
        last = step == world_size - 1
        if overlap and not last:
            handles, (next_k, next_v) = pass_on(k, v, backwards)
        source = (rank + step if backwards else rank - step) % world_size
        held = (source, 2 * world_size - 1 - source)
        for i, (query_chunk, query) in enumerate(zip(mine, q.chunk(2, dim=1))):
            for key_chunk, key, value in zip(held, k.chunk(2, dim=1), v.chunk(2, dim=1)):
                if key_chunk <= query_chunk:
                    outputs[i], lses[i] = merge_blocks(
                        outputs[i], lses[i],
                        *block_attention(query, key, value, causal=key_chunk == query_chunk))
                elif wasted:
                    block_attention(query, key, value)
        if not last:
            if not overlap:
                handles, (next_k, next_v) = pass_on(k, v, backwards)
            for handle in handles:
                handle.wait()
            k, v = next_k, next_v
    return torch.cat(outputs, dim=1)
