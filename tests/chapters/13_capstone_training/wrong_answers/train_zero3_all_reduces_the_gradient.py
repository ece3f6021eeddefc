r"""The right losses, but the whole gradient is all-reduced instead of reduce-scattered.

Answer cell: 13-train-zero3
Test cell: 13-train-zero3-test
Says: the bytes your code sent with each kind of call (all_gather_single and \
    reduce_scatter_single count under their older names, all_gather_into_tensor and \
    reduce_scatter_tensor) should be
        {'scatter': 972, 'all_gather_into_tensor': 3888, 'reduce_scatter_tensor': 3888, \
    'all_reduce': 48}
    but it is
        {'scatter': 972, 'all_gather_into_tensor': 3888, 'all_reduce': 15600}
"""

from zero3 import train_zero3_with


def all_reduced(flat, shard):
    rank, world_size = dist.get_rank(), dist.get_world_size()
    dist.all_reduce(flat)
    return torch.chunk(flat, world_size)[rank]


def train_zero3(model, batches, lr=0.1):
    return train_zero3_with(model, batches, lr, shard_of=all_reduced)
