"""Which backend a run uses, how its process group is built, and each rank's device.

``backend="auto"`` takes the NCCL branch when NCCL is there and the machine has a GPU per rank,
else gloo on the CPU. The NCCL branch builds a *mixed* group, ``"cpu:gloo,cuda:nccl"``: CUDA
tensors go through NCCL and CPU tensors through gloo, so a cell that builds a CPU tensor still
works on a multi-GPU machine. :class:`commlab.RunResult` ``.backend`` says which branch was taken
(``"nccl"`` or ``"gloo"``); ``dist.get_backend()`` inside a rank names the group's backends.

Testing aid: ``COMMLAB_PRETEND_GPUS=N`` in the environment makes commlab count N GPUs, so that
a CPU machine (CI) takes the NCCL branch as a student with N GPUs would. Where NCCL can't
really run the ranks (no CUDA, no NCCL, or fewer real GPUs than ranks), the CUDA half of the
mixed group falls back to gloo (``"cpu:gloo,cuda:gloo"``) and :func:`commlab.device` stays the
CPU. Real GPUs are never pretended away: the variable only counts for a machine that has fewer.
"""

from __future__ import annotations

import os

import torch

PRETEND_GPUS = "COMMLAB_PRETEND_GPUS"

_DEVICE: torch.device | None = None


def _real_gpu_count() -> int:
    try:
        return torch.cuda.device_count() if torch.cuda.is_available() else 0
    except Exception:  # noqa: BLE001 - a broken driver means no GPUs for us
        return 0


def _pretended() -> int:
    try:
        return max(int(os.environ.get(PRETEND_GPUS, "0")), 0)
    except ValueError:
        return 0


def gpu_count() -> int:
    """GPUs this process may use, or the number ``COMMLAB_PRETEND_GPUS`` pretends."""
    return max(_real_gpu_count(), _pretended())


def _nccl_usable(world_size: int) -> bool:
    """Whether NCCL can really run ``world_size`` ranks here (one real GPU each)."""
    return torch.distributed.is_nccl_available() and _real_gpu_count() >= world_size


def choose_backend(backend: str, world_size: int) -> str:
    """``"nccl"`` or ``"gloo"`` for ``backend`` on this machine; refuses what can't work."""
    if backend not in ("auto", "gloo", "nccl"):
        raise ValueError(f"backend must be 'auto', 'gloo' or 'nccl', got {backend!r}.")
    gpus = gpu_count()
    nccl = torch.distributed.is_nccl_available() or _pretended() > 0
    if backend == "auto":
        return "nccl" if nccl and gpus >= world_size else "gloo"
    if backend == "nccl" and (not nccl or gpus < world_size):
        have = f"{gpus} GPU{'s' if gpus != 1 else ''}" + ("" if nccl else " and no NCCL")
        raise ValueError(
            f"backend='nccl' needs one GPU per rank: world_size={world_size}, but this machine "
            f"has {have}. Use backend='auto' (it picks gloo on the CPU here) or a world_size of "
            f"at most {gpus}." if nccl and gpus else
            f"backend='nccl' needs one GPU per rank: world_size={world_size}, but this machine "
            f"has {have}. Use backend='auto', which picks gloo on the CPU here.")
    return backend


def group_backend(chosen: str, world_size: int) -> str:
    """What ``init_process_group`` is given for the branch ``chosen`` (see the docstring)."""
    if chosen != "nccl":
        return "gloo"
    return "cpu:gloo,cuda:nccl" if _nccl_usable(world_size) else "cpu:gloo,cuda:gloo"


def pick_device(chosen: str, local_rank: int, world_size: int) -> torch.device:
    """The rank's device: its own GPU on the NCCL branch (when CUDA is there), else the CPU."""
    if chosen == "nccl" and _nccl_usable(world_size):
        torch.cuda.set_device(local_rank)
        return torch.device("cuda", local_rank)
    return torch.device("cpu")


def current_device() -> torch.device | None:
    """The device of the rank this process is running, or ``None`` outside a rank."""
    return _DEVICE


def set_current_device(device: torch.device | None) -> None:
    global _DEVICE
    _DEVICE = device
