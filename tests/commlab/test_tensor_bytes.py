"""helpers/commlab/tensor_bytes.py: a tensor as its bytes, dtype and shape, and back (the round
trips of every dtype and shape are in test_report_pickle.py, through a report)."""

from __future__ import annotations

import pytest
import torch

from commlab import plain
from commlab.tensor_bytes import from_bytes, to_bytes


def test_bytes_that_do_not_fit_the_dtype_and_shape_are_refused():
    data, dtype, shape = to_bytes(torch.arange(6, dtype=torch.int32).reshape(2, 3))
    assert from_bytes(data, dtype, shape).tolist() == [[0, 1, 2], [3, 4, 5]]
    with pytest.raises(ValueError, match="24 bytes are no torch.int32 tensor of shape \\[2, 4\\]"):
        from_bytes(data, dtype, (2, 4))
    for forged in [(data, "int32", shape), (data, dtype, (2, -3)), (data, dtype, [2, 3]),
                   (list(data), dtype, shape), (data, dtype, (True, 6))]:
        with pytest.raises(ValueError):
            from_bytes(*forged)


def test_plain_data_carries_a_tensor_as_its_bytes_and_refuses_a_forged_one():
    sent = {"w": torch.arange(4.0), "grad": torch.ones(2, requires_grad=True) * 2,
            "half": torch.zeros(3, dtype=torch.bfloat16), "empty": torch.zeros(0, 3),
            "scalar": torch.tensor(7, dtype=torch.int16)}
    back = plain.loads(plain.dumps(sent))
    assert {k: (type(v), v.dtype, v.tolist()) for k, v in back.items()} == {
        k: (torch.Tensor, v.dtype, v.tolist()) for k, v in sent.items()}
    forged = plain.dumps({"__commlab_record__": "tensor", "data": b"\0" * 3,
                          "dtype": torch.float32, "shape": (1,)})
    with pytest.raises(plain.NotPlain, match="3 bytes are no torch.float32 tensor"):
        plain.loads(forged)
