r"""No broadcast: every rank trains from its own initial weights.

Answer cell: 13-train-data-parallel
Test cell: 13-train-data-parallel-test
Says: On rank 0 (world_size=4, steps=4, batch=16), the loss of each step (those of train_single \
    from rank 0's weights) should be
"""

from data_parallel import data_parallel_step


def train_data_parallel(model, batches, lr=0.1):
    rank, world_size = dist.get_rank(), dist.get_world_size()
    losses = []
    for x, y in batches:
        x_mine = torch.tensor_split(x, world_size)[rank]
        y_mine = torch.tensor_split(y, world_size)[rank]
        losses.append(data_parallel_step(model, x_mine, y_mine, lr))
    return losses
