"""A tensor as its bytes, dtype and shape, and back: how a grader's ranks send the small tensors
of their traces (:mod:`commlab.plain`) without torch's weights-only reader rebuilding each one.

Only tensors whose bytes are all there is to them go this way (:func:`is_bytes_only`); a tensor
read back is its own, writable, and contiguous.
"""

from __future__ import annotations

import math

import torch


def is_bytes_only(tensor: torch.Tensor) -> bool:
    """Whether ``tensor`` is nothing but its values, dtype and shape: a plain ``torch.Tensor``,
    strided, on the CPU, needing no gradient, with no attributes of its own."""
    return (type(tensor) is torch.Tensor and tensor.layout is torch.strided
            and tensor.device.type == "cpu" and not tensor.requires_grad
            and not tensor.is_quantized and not tensor.__dict__)


def to_bytes(tensor: torch.Tensor) -> tuple[bytes, torch.dtype, tuple[int, ...]]:
    """The values of ``tensor`` (:func:`is_bytes_only`) as bytes, in order, with its dtype and
    shape; a view, a conjugate or a negative view gives the values it shows."""
    values = tensor.detach().resolve_conj().resolve_neg().contiguous().reshape(-1)
    return values.view(torch.uint8).numpy().tobytes(), tensor.dtype, tuple(tensor.shape)


def from_bytes(data: bytes, dtype: torch.dtype, shape: tuple[int, ...]) -> torch.Tensor:
    """The tensor :func:`to_bytes` gave as ``data``, ``dtype`` and ``shape``. Raises ValueError
    when they do not fit together (a sender that is not :func:`to_bytes`)."""
    if not (isinstance(data, bytes) and isinstance(dtype, torch.dtype)
            and isinstance(shape, tuple)
            and all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in shape)):
        raise ValueError("not a tensor's bytes, dtype and shape")
    if len(data) != math.prod(shape) * dtype.itemsize:
        raise ValueError(f"{len(data)} bytes are no {dtype} tensor of shape {list(shape)}")
    if not data:
        return torch.empty(shape, dtype=dtype)
    return torch.frombuffer(bytearray(data), dtype=torch.uint8).view(dtype).reshape(shape)
