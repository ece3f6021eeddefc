"""The trace sees the collectives DTensor issues (torch's functional collectives), with the byte
model of the torch.distributed call that does the same."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol

import commlab
from commlab import functional
from commlab import trace as tracing

F = 4  # bytes per float32


def _redistributions(rank, world_size):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Partial, Replicate, Shard

    mesh = init_device_mesh("cpu", (world_size,))
    partial = DTensor.from_local(torch.full((4, 2), float(rank + 1)), mesh, [Partial()])
    summed = partial.redistribute(mesh, [Replicate()]).to_local()           # all_reduce
    mine = partial.redistribute(mesh, [Shard(0)]).to_local()                # reduce_scatter
    rows = DTensor.from_local(torch.full((1, 2), float(rank)), mesh, [Shard(0)])
    gathered = rows.redistribute(mesh, [Replicate()]).to_local()            # all_gather
    columns = DTensor.from_local(torch.full((2, 1), float(rank)), mesh, [Shard(1)])
    side_by_side = columns.redistribute(mesh, [Replicate()]).to_local()     # all_gather, dim 1
    by_hand = torch.full((4, 2), float(rank + 1))
    dist.all_reduce(by_hand)                                                # the same, by hand
    return (summed, mine, gathered, side_by_side), _parallelized_mlp(mesh)


def _parallelized_mlp(mesh):
    """Where the set-up, the forward and the backward pass of a tensor-parallel MLP begin and
    end in the trace."""
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        parallelize_module,
    )

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 8))
    calls = tracing.current().calls
    marks = [len(calls)]
    parallelize_module(model, mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})
    marks.append(len(calls))
    output = model(torch.ones(2, 8, requires_grad=True))
    marks.append(len(calls))
    output.sum().backward()
    return marks


def _on_groups(rank, world_size):
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    tp = mesh["tp"].get_group()
    summed = funcol.all_reduce(torch.full((3,), float(rank)), "sum", (mesh, 1)).wait()
    # src is a rank of the group: rank 1 of [0, 1] is global rank 1, of [2, 3] global rank 3
    sent = funcol.broadcast(torch.full((2,), float(rank)), 1, tp).wait()
    # uneven: rank r sends r + 1 rows to every peer of the world
    received = funcol.all_to_all_single(
        torch.ones(world_size * (rank + 1), 3), [r + 1 for r in range(world_size)],
        [rank + 1] * world_size, list(range(world_size))).wait()
    old_name = funcol.all_gather_tensor(torch.ones(2), 0, tp).wait()  # calls all_gather_single
    return summed, sent, received.shape[0], old_name


@pytest.fixture(scope="module")
def redistributed():
    return commlab.run(_redistributions, 4, timeout=60)


@pytest.fixture(scope="module")
def on_groups():
    return commlab.run(_on_groups, 4, timeout=60)


def _call(result, rank, label):
    op, index = label.split(" #")
    return next(c for c in result.trace[rank] if c.op == op and c.index == int(index))


def test_each_redistribution_is_recorded_as_the_collective_it_runs(redistributed):
    assert [(c.op, c.functional) for c in redistributed.trace[0][:5]] == [
        ("all_reduce", True), ("reduce_scatter_tensor", True),
        ("all_gather_into_tensor", True), ("all_gather_into_tensor", True),
        ("all_reduce", False)]
    summed, mine, gathered, side_by_side = redistributed.returns[2][0]
    assert torch.equal(summed, torch.full((4, 2), 10.0))
    assert torch.equal(mine, torch.full((1, 2), 10.0))
    assert torch.equal(gathered, torch.arange(4.0).repeat_interleave(2).reshape(4, 2))
    assert torch.equal(side_by_side, torch.arange(4.0).repeat(2, 1))


@pytest.mark.parametrize("label, sent", [
    ("all_reduce #1", 4 * 2 * F),             # the whole tensor to each other rank
    ("reduce_scatter_tensor #1", 1 * 2 * F),  # one block (one row) to each other rank
    ("all_gather_into_tensor #1", 1 * 2 * F),  # its own row to each other rank
    ("all_gather_into_tensor #2", 2 * 1 * F),  # its own column to each other rank
])
def test_bytes_follow_the_model_of_the_torch_distributed_call(redistributed, label, sent):
    for rank in range(4):
        call = _call(redistributed, rank, label)
        others = [r for r in range(4) if r != rank]
        assert call.sent_to == dict.fromkeys(others, sent)
        assert call.received_from == dict.fromkeys(others, sent)
        assert call.group_ranks == (0, 1, 2, 3)


def test_redistribute_sends_what_the_same_call_by_hand_sends(redistributed):
    for rank in range(4):
        functional_call, by_hand = redistributed.calls("all_reduce", rank)[:2]
        for field in ("sent_to", "received_from", "reduce_op", "tensors", "group_ranks"):
            assert getattr(functional_call, field) == getattr(by_hand, field), field
        assert functional_call.reduce_op == "SUM"


def test_values_before_and_after_are_kept_under_the_torch_distributed_names(redistributed):
    reduce_scatter = _call(redistributed, 1, "reduce_scatter_tensor #1")
    assert torch.equal(reduce_scatter.before["input"], torch.full((4, 2), 2.0))
    assert torch.equal(reduce_scatter.after["output"], torch.full((1, 2), 10.0))
    assert reduce_scatter.tensors["output"].shape == (1, 2)
    # gathered along dimension 1, kept as all_gather_into_tensor lays blocks out: one per rank
    # along dimension 0
    columns = _call(redistributed, 0, "all_gather_into_tensor #2")
    assert torch.equal(columns.after["output_tensor"],
                       torch.arange(4.0).repeat_interleave(2).reshape(8, 1))
    assert columns.tensors["output_tensor"].shape == (8, 1)


def test_a_functional_call_finishes_when_its_result_is_waited_for(redistributed):
    for call in redistributed.trace[3][:4]:
        assert call.finished is not None and call.finished >= call.started


def test_a_functional_call_can_be_drawn_like_the_call_by_hand(redistributed):
    figure = commlab.draw(redistributed, "reduce_scatter_tensor #1")
    assert figure.axes


def test_groups_are_global_ranks_and_a_broadcast_root_is_translated(on_groups):
    summed, sent, rows, old_name = on_groups.returns[3]
    assert torch.equal(summed, torch.full((3,), 5.0))    # ranks 2 and 3
    assert torch.equal(sent, torch.full((2,), 3.0))      # rank 1 of [2, 3]
    all_reduce = _call(on_groups, 3, "all_reduce #1")
    assert all_reduce.group_ranks == (2, 3) and all_reduce.sent_to == {2: 3 * F}
    broadcast = _call(on_groups, 2, "broadcast #1")
    assert (broadcast.root, broadcast.received_from, broadcast.sent_to) == (3, {3: 2 * F}, {})
    assert _call(on_groups, 3, "broadcast #1").sent_to == {2: 2 * F}


def test_uneven_all_to_all_and_old_names_are_counted_once(on_groups):
    assert on_groups.returns[2][2] == 1 + 2 + 3 + 4
    call = _call(on_groups, 2, "all_to_all_single #1")
    assert call.split_sizes == {"input": [3, 3, 3, 3], "output": [1, 2, 3, 4]}
    assert call.sent_to == {0: 3 * 3 * F, 1: 3 * 3 * F, 3: 3 * 3 * F}
    assert call.received_from == {0: 1 * 3 * F, 1: 2 * 3 * F, 3: 4 * 3 * F}
    assert [c.op for c in on_groups.trace[0]] == [
        "all_reduce", "broadcast", "all_to_all_single", "all_gather_into_tensor"]


def test_parallelize_module_all_reduces_once_forward_and_once_backward(redistributed):
    start, set_up, forward = redistributed.returns[0][1]
    calls = [(c.op, c.bytes_sent) for c in redistributed.trace[0][start:]]
    split = [calls[:set_up - start], calls[set_up - start:forward - start],
             calls[forward - start:]]
    # rank 0's weights: the column shards (4 x 8 weight, 4 bias) and the row shard (8 x 4)
    # scattered to 3 ranks, the replicated bias (8) broadcast to 3
    assert split[0] == [("scatter", 3 * 32 * F), ("scatter", 3 * 4 * F),
                        ("scatter", 3 * 32 * F), ("broadcast", 3 * 8 * F)]
    # g: the partial outputs summed; f: the partial input gradients summed
    assert split[1] == [("all_reduce", 3 * 2 * 8 * F)]
    assert split[2] == [("all_reduce", 3 * 2 * 8 * F)]


def test_install_wraps_and_undo_restores_the_functional_collectives():
    before = {name: getattr(funcol, name) for name in (*functional._RULES, "wait_tensor")}
    undo = functional.install(tracing.Recorder(0))
    try:
        for name, original in before.items():
            assert getattr(funcol, name) is not original
            assert getattr(funcol, name).__commlab_original__ is original
    finally:
        undo()
    assert {name: getattr(funcol, name) for name in before} == before
