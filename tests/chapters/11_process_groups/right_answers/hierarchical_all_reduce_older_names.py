r"""The hierarchy under the older names, dist.reduce_scatter_tensor and
dist.all_gather_into_tensor, which do the same as the _single names the prompt gives.

Answer cell: 11-hierarchical-all-reduce
Test cell: 11-hierarchical-all-reduce-test
"""


def hierarchical_all_reduce(tensor, intra_group, inter_group):
    per_node = dist.get_world_size(intra_group)
    shard = torch.empty(tensor.numel() // per_node, dtype=tensor.dtype, device=tensor.device)
    dist.reduce_scatter_tensor(shard, tensor, group=intra_group)
    dist.all_reduce(shard, group=inter_group)
    dist.all_gather_into_tensor(tensor, shard, group=intra_group)
    return tensor
