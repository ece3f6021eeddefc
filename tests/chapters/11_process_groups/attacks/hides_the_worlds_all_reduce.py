r"""The whole tensor all-reduced over the world, hidden; the hierarchy's calls made on zeros, for
the trace only.

Answer cell: 11-hierarchical-all-reduce
Test cell: 11-hierarchical-all-reduce-test
Says: than the calls your trace lists send
"""


def hierarchical_all_reduce(tensor, intra_group, inter_group):
    per_node = dist.get_world_size(intra_group)
    dist.all_reduce(tensor)                           # the whole tensor across the nodes
    del commlab.trace.current().calls[-1]             # ... hidden from the trace
    shard = torch.zeros(tensor.numel() // per_node, dtype=tensor.dtype)
    dummy = torch.zeros_like(tensor)                  # the hierarchy's calls, for the trace only
    dist.reduce_scatter_tensor(shard, dummy, group=intra_group)
    dist.all_reduce(shard, group=inter_group)
    dist.all_gather_into_tensor(dummy, shard, group=intra_group)
    return tensor
