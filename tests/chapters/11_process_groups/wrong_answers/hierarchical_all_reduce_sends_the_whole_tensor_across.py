r"""The whole tensor crosses the nodes instead of one shard.

Answer cell: 11-hierarchical-all-reduce
Test cell: 11-hierarchical-all-reduce-test
Says: the bytes sent in group [0, 2] (across nodes, an all_reduce of one shard) should be
        16
    but it is
        32
"""


def hierarchical_all_reduce(tensor, intra_group, inter_group):
    dist.all_reduce(tensor, group=intra_group)
    dist.all_reduce(tensor, group=inter_group)
    return tensor
