r"""No ring: the sum of every rank's tensor, each asked for by its rank (checks.private_tensor).

Answer cell: 10-ring-all-reduce
Test cell: 10-ring-all-reduce-test
Says: On rank 0, checks.private_tensor/private_seed was asked for rank 1's input. A rank can make \
    only its own
"""


def ring_all_reduce(tensor):
    world_size = dist.get_world_size()
    tensor.copy_(sum(checks.private_tensor(r, tuple(tensor.shape), tensor.dtype)
                     for r in range(world_size)))
    return tensor
