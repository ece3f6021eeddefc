"""Run a notebook cell's function on N ranks, see what each rank printed, returned and sent.

Example:
    >>> import torch, torch.distributed as dist, commlab
    >>> def example(rank, world_size):
    ...     tensor = torch.ones(2, device=commlab.device()) * (rank + 1)
    ...     dist.all_reduce(tensor)
    ...     print(f"rank {rank} has {tensor.tolist()}")
    >>> commlab.run(example, world_size=4)
"""

import sys

from .errors import CollectiveTimeout, CommlabError, DrawError, RankCrashed, RankError


def device():
    """The device of the rank calling it: ``cuda:<rank>`` under NCCL, else the CPU.

    Raises:
        CommlabError: when called outside a function that ``commlab.run`` runs.
    """
    from .backend import current_device

    found = current_device()
    if found is None:
        raise CommlabError("commlab.device() tells a rank its device, so it only works inside "
                           "a function run by commlab.run (or under torchrun).")
    return found


# In a notebook's kernel the import cell is followed by runs: the launcher (and torch) load now,
# and the forkserver and the first run's ranks start once the cell is done. In any other process
# each part loads on first use: the grader and `make check` read notebooks with the grading rule
# (commlab.cells) and never import torch for it.
if "ipykernel" in sys.modules:
    from .launch import start_ahead_after_this_cell

    start_ahead_after_this_cell()

# The launcher needs torch, and the pictures matplotlib, which the ranks never do.
_LAZY = {"run": "launch", "DEFAULT_TIMEOUT": "launch", "RunResult": "result", "Call": "trace",
         "TensorInfo": "trace", "choose_backend": "backend", "draw": "drawing",
         "draw_ring": "ring", "draw_groups": "groups", "bytes_by_group": "groups",
         "draw_timeline": "timeline"}


def __getattr__(name):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module 'commlab' has no attribute {name!r}")


def __dir__():
    # what a notebook's completion offers after ``commlab.``: the names not yet loaded too
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "Call",
    "CollectiveTimeout",
    "CommlabError",
    "DEFAULT_TIMEOUT",
    "DrawError",
    "RankCrashed",
    "RankError",
    "RunResult",
    "TensorInfo",
    "choose_backend",
    "device",
    "bytes_by_group",
    "draw",
    "draw_groups",
    "draw_ring",
    "draw_timeline",
    "run",
]
