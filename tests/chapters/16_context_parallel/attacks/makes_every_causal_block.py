r"""Causal ring attention from every rank's blocks, made on every rank with the test's own
generator: nothing received.

Answer cell: 16-causal-ring-attention
Test cell: 16-causal-ring-attention-test
Says: A rank can make only its own
In a kernel, says: A rank can make only its own: what the other ranks hold has to reach it \
    through torch.distributed
"""


def causal_ring_attention(q, k, v):
    rank, world_size = dist.get_rank(), dist.get_world_size()
    if q.shape[1] % 2:
        raise ValueError("an odd number of positions")
    chunks = [[None] * (2 * world_size) for _ in range(3)]
    for r in range(world_size):
        generator = checks.private_generator(r, "causal qkv")
        for whole in chunks:
            block = torch.randn(q.shape, generator=generator, dtype=torch.float64).to(q.dtype)
            whole[r], whole[2 * world_size - 1 - r] = block.chunk(2, dim=1)
    q, k, v = (torch.cat(whole, dim=1) for whole in chunks)
    causal = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    return load_balanced(causal, rank, world_size)
