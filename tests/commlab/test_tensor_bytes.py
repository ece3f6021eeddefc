"""helpers/commlab/tensor_bytes.py: a tensor as its bytes, dtype and shape, and back; and the
plain data a grader's ranks send, which carries their tensors so."""

from __future__ import annotations

import pytest
import torch

from commlab import plain
from commlab.tensor_bytes import from_bytes, is_bytes_only, to_bytes

DTYPES = [torch.float32, torch.float64, torch.bfloat16, torch.float16, torch.int64, torch.int8,
          torch.uint8, torch.bool, torch.complex64]


def _round_trip(tensor: torch.Tensor) -> torch.Tensor:
    return from_bytes(*to_bytes(tensor))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(), (0,), (5,), (2, 3, 4), (3, 0, 2)], ids=str)
def test_a_plain_tensor_comes_back_equal_in_dtype_shape_and_values(dtype, shape):
    sent = (torch.randn(shape) * 50).to(dtype)
    back = _round_trip(sent)
    assert type(back) is torch.Tensor
    assert (back.dtype, back.shape) == (dtype, sent.shape)
    assert torch.equal(back, sent)


def test_views_conjugates_and_negatives_come_back_as_their_values():
    base = torch.arange(24.0).reshape(4, 6)
    complex_ = torch.randn(3, dtype=torch.complex64)
    for sent in (base[:, 1::2], base.t(), complex_.conj(), torch._neg_view(base[0])):
        assert torch.equal(_round_trip(sent), sent.resolve_conj().resolve_neg())


def test_a_tensor_that_comes_back_is_its_own_and_writable():
    base = torch.zeros(4)
    back = _round_trip(base[:2])
    back += 1
    assert back.tolist() == [1.0, 1.0] and base.tolist() == [0.0] * 4


def test_what_is_more_than_its_bytes_is_not_sent_as_bytes():
    tagged = torch.ones(2)
    tagged.note = "kept"
    for tensor in (torch.nn.Parameter(torch.ones(2)), torch.ones(2, requires_grad=True), tagged,
                   torch.eye(3).to_sparse()):
        assert not is_bytes_only(tensor)
    assert is_bytes_only(torch.ones(2))


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
