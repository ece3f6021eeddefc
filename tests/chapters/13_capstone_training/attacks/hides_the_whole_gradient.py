r"""ZeRO-3 whose gradient is all-reduced whole, hidden; a reduce_scatter of zeros for show.

Answer cell: 13-train-zero3
Test cell: 13-train-zero3-test
"""

from zero3 import train_zero3_with


def hidden_all_reduce(flat, shard):
    """The whole gradient all-reduced, hidden from the trace; a reduce_scatter of zeros for
    show."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    dist.all_reduce(flat)
    del commlab.trace.current().calls[-1]
    grad_shard = torch.chunk(flat, world_size)[rank].clone()
    dist.reduce_scatter_tensor(torch.empty_like(shard), torch.zeros_like(flat))
    return grad_shard


def train_zero3(model, batches, lr=0.1):
    return train_zero3_with(model, batches, lr, shard_of=hidden_all_reduce)
