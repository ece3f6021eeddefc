"""A chapter-style function, launched by torchrun instead of a notebook (see test_torchrun.py)."""

import os

import torch
import torch.distributed as dist

import commlab


def example(rank, world_size):
    tensor = torch.ones(1, 5, device=commlab.device()) * rank
    dist.all_reduce(tensor)
    print(f"Rank {rank} after all_reduce: {tensor.tolist()}")
    return tensor


if __name__ == "__main__":
    result = commlab.run(example, world_size=4)
    if int(os.environ["RANK"]) == 0:
        print(result)
        print("bytes sent per rank:", result.bytes_sent())
