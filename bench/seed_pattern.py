"""The seeds' launch pattern, made importable so that mp.spawn can find the function.

In a notebook, mp.spawn of a function defined in a cell fails (the children can't import
``__main__``); the benchmark imports this module instead, so the pattern runs as the seeds meant.
"""

import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def example(rank, world_size, port):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    tensor = torch.ones(1, 5) * rank
    dist.all_reduce(tensor)
    dist.destroy_process_group()


def spawn(world_size, port):
    mp.spawn(example, args=(world_size, port), nprocs=world_size, join=True)
