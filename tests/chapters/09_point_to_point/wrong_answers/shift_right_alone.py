r"""No communication: the left neighbour's tensor guessed as checks.rank_tensor.

Answer cell: 09-shift-right
Test cell: 09-shift-right-test
Says: On rank 0 (world_size=4, shape=(4,), dtype=torch.float32), (shift_right(tensor), tensor \
    afterwards) should be
"""


def shift_right(tensor):
    rank, world_size = dist.get_rank(), dist.get_world_size()
    return checks.rank_tensor((rank - 1) % world_size, tuple(tensor.shape), tensor.dtype)
