"""helpers/commlab/report_pickle.py: a rank's report with its plain tensors as their bytes."""

from __future__ import annotations

import pickle

import cloudpickle
import pytest
import torch
import torch.distributed as dist

import commlab
from commlab import report_pickle, tensor_bytes

DTYPES = [torch.float32, torch.float64, torch.bfloat16, torch.float16, torch.int64, torch.int8,
          torch.uint8, torch.bool, torch.complex64]


def _round_trip(value):
    return pickle.loads(report_pickle.dumps(value))


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
    sent = {"columns": base[:, 1::2], "transposed": base.t(), "conj": complex_.conj(),
            "neg": torch._neg_view(base[0])}
    back = _round_trip(sent)
    for key, tensor in sent.items():
        assert torch.equal(back[key], tensor.resolve_conj().resolve_neg()), key


def test_a_tensor_that_comes_back_is_its_own_and_writable():
    base = torch.zeros(4)
    back = _round_trip([base[:2], base[2:]])
    back[0] += 1
    assert back[0].tolist() == [1.0, 1.0] and back[1].tolist() == [0.0, 0.0]
    assert base.tolist() == [0.0] * 4


def test_one_tensor_named_twice_comes_back_as_one():
    tensor = torch.ones(3)
    first, second = _round_trip([tensor, tensor])
    assert first is second


def test_what_is_more_than_its_bytes_is_pickled_as_before():
    parameter = torch.nn.Parameter(torch.ones(2))
    needs_grad = torch.ones(2, requires_grad=True)
    tagged = torch.ones(2)
    tagged.note = "kept"
    sparse = torch.eye(3).to_sparse()
    for tensor in (parameter, needs_grad, tagged, sparse):
        assert not tensor_bytes.is_bytes_only(tensor)
    back = _round_trip([parameter, needs_grad, tagged, sparse])
    assert type(back[0]) is torch.nn.Parameter and back[1].requires_grad
    assert back[2].note == "kept" and back[3].layout is torch.sparse_coo
    assert torch.equal(back[3].to_dense(), torch.eye(3))


def test_a_traced_run_takes_less_than_half_of_cloudpickles_bytes():
    def steps(rank, world_size):
        weights = [torch.full((8,), float(rank)) for _ in range(50)]
        for w in weights:
            dist.all_reduce(w)
        return weights

    result = commlab.run(steps, 2)
    calls = result.trace[0]
    assert len(calls) == 50 and all(torch.is_tensor(c.after["tensor"]) for c in calls)
    assert [c.after["tensor"].tolist() for c in calls] == [[1.0] * 8] * 50
    assert len(report_pickle.dumps(calls)) * 2 < len(cloudpickle.dumps(calls))
    assert pickle.loads(report_pickle.dumps(calls))[7].after["tensor"].tolist() == [1.0] * 8
