"""The trace: every torch.distributed call, with shapes, peers and bytes, from unchanged code."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
from torch.distributed import all_reduce as imported_all_reduce

import commlab

F = 4  # bytes per float32


def _every_collective(rank, world_size):
    t = torch.full((2, 3), float(rank))
    dist.broadcast(t, src=1)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    imported_all_reduce(t)
    dist.reduce(t, dst=2)
    outs = [torch.empty(2, 3) for _ in range(world_size)]
    dist.all_gather(outs, t)
    flat = torch.empty(world_size * 6)
    dist.all_gather_into_tensor(flat, t.view(-1))
    gathered = [torch.empty(2, 3) for _ in range(world_size)] if rank == 0 else None
    dist.gather(t, gather_list=gathered, dst=0)
    chunks = [torch.full((5,), float(i)) for i in range(world_size)] if rank == 3 else None
    mine = torch.empty(5)
    dist.scatter(mine, scatter_list=chunks, src=3)
    out = torch.empty(5)
    dist.reduce_scatter(out, [torch.ones(5) for _ in range(world_size)])
    dist.reduce_scatter_tensor(torch.empty(5), torch.ones(world_size * 5))
    dist.all_to_all([torch.empty(2) for _ in range(world_size)],
                    [torch.ones(2) * rank for _ in range(world_size)])
    # uneven: rank r sends r+1 rows to every peer
    send_splits = [rank + 1] * world_size
    recv_splits = [r + 1 for r in range(world_size)]
    received = torch.empty(sum(recv_splits), 3)
    dist.all_to_all_single(received, torch.ones(sum(send_splits), 3),
                           output_split_sizes=recv_splits, input_split_sizes=send_splits)
    dist.barrier()
    right, left = (rank + 1) % world_size, (rank - 1) % world_size
    buf = torch.empty(7)
    if rank % 2 == 0:
        dist.send(torch.ones(7), dst=right)
        dist.recv(buf, src=left)
    else:
        dist.recv(buf, src=left)
        dist.send(torch.ones(7), dst=right)
    ops = [dist.P2POp(dist.isend, torch.ones(3), right),
           dist.P2POp(dist.irecv, torch.empty(3), left)]
    for work in dist.batch_isend_irecv(ops):
        work.wait()
    objects = [None] * world_size
    dist.all_gather_object(objects, {"rank": rank})
    return objects


@pytest.fixture(scope="module")
def traced():
    return commlab.run(_every_collective, 4)


def _call(result, rank, label):
    op, index = label.split(" #")
    return next(c for c in result.trace[rank] if c.op == op and c.index == int(index))


def test_every_call_is_recorded_in_order_without_nested_calls(traced):
    ops = [c.op for c in traced.trace[0]]
    assert ops == ["broadcast", "all_reduce", "all_reduce", "reduce", "all_gather",
                   "all_gather_into_tensor", "gather", "scatter", "reduce_scatter",
                   "reduce_scatter_tensor", "all_to_all", "all_to_all_single", "barrier",
                   "send", "recv", "batch_isend_irecv", "all_gather_object"]
    assert [c.seq for c in traced.trace[0]] == list(range(len(ops)))
    assert traced.returns[2] == [{"rank": r} for r in range(4)]


@pytest.mark.parametrize("label, rank, sent, received, root", [
    ("broadcast #1", 1, {0: 24, 2: 24, 3: 24}, {}, 1),
    ("broadcast #1", 0, {}, {1: 24}, 1),
    ("all_reduce #1", 2, {0: 24, 1: 24, 3: 24}, {0: 24, 1: 24, 3: 24}, None),
    ("reduce #1", 0, {2: 24}, {}, 2),
    ("reduce #1", 2, {}, {0: 24, 1: 24, 3: 24}, 2),
    ("all_gather #1", 3, {0: 24, 1: 24, 2: 24}, {0: 24, 1: 24, 2: 24}, None),
    ("all_gather_into_tensor #1", 0, {1: 24, 2: 24, 3: 24}, {1: 24, 2: 24, 3: 24}, None),
    ("gather #1", 0, {}, {1: 24, 2: 24, 3: 24}, 0),
    ("gather #1", 1, {0: 24}, {}, 0),
    ("scatter #1", 3, {0: 20, 1: 20, 2: 20}, {}, 3),
    ("scatter #1", 1, {}, {3: 20}, 3),
    ("reduce_scatter #1", 1, {0: 20, 2: 20, 3: 20}, {0: 20, 2: 20, 3: 20}, None),
    ("reduce_scatter_tensor #1", 0, {1: 20, 2: 20, 3: 20}, {1: 20, 2: 20, 3: 20}, None),
    ("all_to_all #1", 2, {0: 8, 1: 8, 3: 8}, {0: 8, 1: 8, 3: 8}, None),
    # rank 2 sends 3 rows of 3 floats to each peer and receives r+1 rows from rank r
    ("all_to_all_single #1", 2, {0: 36, 1: 36, 3: 36}, {0: 12, 1: 24, 3: 48}, None),
    ("barrier #1", 0, {}, {}, None),
    ("send #1", 0, {1: 28}, {}, 1),
    ("recv #1", 0, {}, {3: 28}, 3),
    ("batch_isend_irecv #1", 1, {2: 12}, {0: 12}, None),
])
def test_bytes_and_peers_follow_each_collective(traced, label, rank, sent, received, root):
    call = _call(traced, rank, label)
    assert call.sent_to == sent
    assert call.received_from == received
    assert call.root == root
    assert call.peers == sorted(set(sent) | set(received))


def test_a_reduction_keeps_its_reduce_op(traced):
    assert _call(traced, 0, "all_reduce #1").reduce_op == "MAX"
    assert _call(traced, 0, "all_reduce #2").reduce_op == "SUM"


def test_a_call_keeps_the_shape_and_dtype_of_its_tensors(traced):
    info = _call(traced, 0, "all_reduce #1").tensors["tensor"]
    assert (info.shape, info.dtype) == ((2, 3), "float32")


def test_a_call_keeps_the_values_its_tensors_held_before_it(traced):
    before = _call(traced, 0, "all_reduce #1").before["tensor"]
    assert torch.equal(before, torch.full((2, 3), 1.0))  # rank 1's, after the broadcast


def test_a_call_keeps_the_values_its_tensors_hold_after_it(traced):
    gather = _call(traced, 0, "gather #1")
    for rank, received in enumerate(gather.after["gather_list"]):
        assert torch.equal(received, _call(traced, rank, "gather #1").before["tensor"])


def test_all_to_all_single_keeps_its_split_sizes(traced):
    splits = _call(traced, 3, "all_to_all_single #1").split_sizes
    assert splits == {"input": [4, 4, 4, 4], "output": [1, 2, 3, 4]}


def test_batch_isend_irecv_keeps_its_ops_in_order(traced):
    batch = _call(traced, 0, "batch_isend_irecv #1")
    assert [(op, peer) for op, peer, _ in batch.ops] == [("isend", 1), ("irecv", 3)]


def test_bytes_sent_of_a_run_add_up_its_calls(traced):
    assert traced.bytes_sent()[0] == sum(c.bytes_sent for c in traced.trace[0])


def test_calls_of_a_run_can_be_filtered_by_operation(traced):
    barriers = traced.calls("barrier")
    assert len(barriers) == 4 and all(c.op == "barrier" for c in barriers)


def test_large_tensors_keep_shape_but_not_values():
    def big(rank, world_size):
        tensor = torch.ones(100, 100)
        dist.all_reduce(tensor)

    call = commlab.run(big, 2).trace[0][0]
    assert call.before["tensor"] is None
    assert call.tensors["tensor"].nbytes == 100 * 100 * F


def test_a_failed_call_records_its_error():
    def bad(rank, world_size):
        dist.all_gather([torch.empty(2)] * world_size, torch.ones(3))

    with pytest.raises(commlab.RankError) as caught:
        commlab.run(bad, 2)
    failed = caught.value.ranks
    assert failed
    for rank in failed:
        (call,) = caught.value.result.trace[rank]
        assert call.op == "all_gather"
        assert "invalid tensor size" in call.error
