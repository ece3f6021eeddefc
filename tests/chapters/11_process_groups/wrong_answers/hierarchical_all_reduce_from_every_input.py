r"""The sum of every rank's tensor, asked for by its rank (checks.private_tensor): neither group
carries anything.

Answer cell: 11-hierarchical-all-reduce
Test cell: 11-hierarchical-all-reduce-test
Says: checks.private_tensor/private_seed was asked for rank 1's input. A rank can make only its own
"""


def hierarchical_all_reduce(tensor, intra_group, inter_group):
    total = sum(checks.private_tensor(r, tuple(tensor.shape), tensor.dtype)
                for r in range(dist.get_world_size()))
    return tensor.copy_(total)
