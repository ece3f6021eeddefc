r"""Chapter 13's ZeRO-3 with torch's older names for the gather and the reduce-scatter,
all_gather_into_tensor and reduce_scatter_tensor, which do the same as the _single names.

Answer cell: 13-train-zero3
Test cell: 13-train-zero3-test
"""

from zero3 import train_zero3_with


def train_zero3(model, batches, lr=0.1):
    return train_zero3_with(model, batches, lr, gather="all_gather_into_tensor",
                            scatter="reduce_scatter_tensor")
