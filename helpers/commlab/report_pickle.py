"""A rank's report pickled with its plain CPU tensors as raw bytes.

A report carries the rank's trace, and the trace a CPU copy of every small tensor before and
after each call: a chapter's training run sends tens of thousands of them. Pickle writes a tensor
through ``torch.save`` of its storage and reads it through ``torch.load``, one whole save and one
whole load per tensor; as its bytes, dtype and shape a trace is written in about a fifth of
the time, read in about a tenth, and takes half the bytes (``make bench-report`` prints the
ratios).

Only tensors whose bytes are all there is to them go this way (:mod:`commlab.tensor_bytes`);
everything else (parameters, DTensors, CUDA, sparse or quantized tensors, tensors in an autograd
graph) is pickled as before. Two views of one storage come back as two tensors of their own; one
tensor named twice comes back as one.
"""

from __future__ import annotations

import io
import pickle
from typing import Any

import cloudpickle
import torch

from .tensor_bytes import from_bytes, is_bytes_only, to_bytes


def dumps(value: Any) -> bytes:
    """``value`` pickled with cloudpickle (the notebook's own functions and classes included),
    its plain CPU tensors as their bytes; read back with :func:`pickle.loads`."""
    buffer = io.BytesIO()
    _Pickler(buffer, protocol=pickle.HIGHEST_PROTOCOL).dump(value)
    return buffer.getvalue()


class _Pickler(cloudpickle.Pickler):
    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, torch.Tensor) and is_bytes_only(obj):
            return from_bytes, to_bytes(obj)
        return super().reducer_override(obj)
