r"""The all-to-all is right, but its splits (one per source rank) are not put back in position
order: the positions of each head come out interleaved with the other head's.

Answer cell: 16-ulysses-relayout
Test cell: 16-ulysses-relayout-test
Says: On rank 0 (world_size=4, which='sequence_to_heads', heads=8, seq_len=8, head_dim=2, \
    dtype=torch.float32), sequence_to_heads(x) (this rank's heads, every position): a float32 \
    tensor of shape (2, 8, 2) whose largest difference from the expected values is
"""


def sequence_to_heads(x):
    world_size = dist.get_world_size()
    heads, block, head_dim = x.shape
    output = torch.empty_like(x)
    dist.all_to_all_single(output, x)
    return output.reshape(heads // world_size, world_size * block, head_dim)

def heads_to_sequence(y):
    world_size = dist.get_world_size()
    heads, seq_len, head_dim = y.shape
    block = seq_len // world_size
    input = y.reshape(heads, world_size, block, head_dim).transpose(0, 1).contiguous()
    output = torch.empty_like(input)
    dist.all_to_all_single(output, input)
    return output.reshape(world_size * heads, block, head_dim)
