r"""Sends of zeros; dst fills gather_list with every rank's input made from a public formula.

Answer cell: 03-my-gather
Test cell: 03-my-gather-test
Says: gather_list after my_gather should be
"""

from decoys import sends_to


def my_gather(tensor, gather_list, dst):
    sends_to(dst, tensor)
    if dist.get_rank() == dst:
        for src in range(dist.get_world_size()):
            gather_list[src].copy_(checks.rank_tensor(src, tuple(tensor.shape), tensor.dtype))
