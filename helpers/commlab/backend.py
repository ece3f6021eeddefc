"""Which backend a run uses, and each rank's device.

``backend="auto"`` takes NCCL when NCCL is there and the machine has a GPU per rank, else gloo on
the CPU. Used by the launcher, the worker and torchrun alike.
"""

from __future__ import annotations

import torch

_DEVICE: torch.device | None = None


def gpu_count() -> int:
    """GPUs this process may use (counted without initialising CUDA where torch can)."""
    try:
        return torch.cuda.device_count() if torch.cuda.is_available() else 0
    except Exception:  # noqa: BLE001 - a broken driver means no GPUs for us
        return 0


def choose_backend(backend: str, world_size: int) -> str:
    """``"nccl"`` or ``"gloo"`` for ``backend`` on this machine; refuses what can't work."""
    if backend not in ("auto", "gloo", "nccl"):
        raise ValueError(f"backend must be 'auto', 'gloo' or 'nccl', got {backend!r}.")
    gpus = gpu_count()
    nccl = torch.distributed.is_nccl_available()
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
    """What ``init_process_group`` is given for the backend ``chosen``."""
    return chosen


def pick_device(chosen: str, local_rank: int, world_size: int) -> torch.device:
    """The rank's device: its own GPU under NCCL, else the CPU."""
    if chosen == "nccl":
        torch.cuda.set_device(local_rank)
        return torch.device("cuda", local_rank)
    return torch.device("cpu")


def current_device() -> torch.device | None:
    """The device of the rank this process is running, or ``None`` outside a rank."""
    return _DEVICE


def set_current_device(device: torch.device | None) -> None:
    global _DEVICE
    _DEVICE = device
