r"""Every rank computes on the whole batch, whose other rows it holds as NaN.

Answer cell: 13-train-zero3
Test cell: 13-train-zero3-test
Says: On rank 0 (world_size=4, steps=4, batch=16), the loss of each step (those of train_single \
    from rank 0's weights) should be
"""

from zero3 import train_zero3_with


def train_zero3(model, batches, lr=0.1):
    return train_zero3_with(model, batches, lr, whole_batch=True)
