r"""The right losses and bytes, but the gathered weights are never freed: every parameter stays a
view of one full vector for the whole run.

Answer cell: 13-train-zero3
Test cell: 13-train-zero3-memory-test
Says: parameter_bytes(model) between steps (each time your loop took the next batch, and after \
    train_zero3 returned): free the model's own weights after the scatter and the gathered ones \
    after each step should be
        [0, 0, 0, 0, 0, 0]
    but it is
        [0, 1296, 1296, 1296, 1296, 1296]
"""

from zero3 import train_zero3_with


def train_zero3(model, batches, lr=0.1):
    return train_zero3_with(model, batches, lr, free=False)
