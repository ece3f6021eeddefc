"""commlab.context: the key/value blocks of a traced ring and who holds which (head, position);
and the timeline drawing point-to-point batches as in flight."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

import commlab
from commlab.context import draw_kv_ring, draw_layout, kv_blocks
from commlab.errors import DrawError
from commlab.result import RunResult
from commlab.timeline import draw_timeline, span, spans
from commlab.trace import Call, TensorInfo


def _ring(rank, world_size):
    """Two steps of a ring that sends its block to rank + 1, each batch started before the
    "computation" on the block held and waited for after it."""
    block = torch.full((2,), float(rank))
    for _ in range(world_size - 1):
        received = torch.empty_like(block)
        handles = dist.batch_isend_irecv([
            dist.P2POp(dist.isend, block, (rank + 1) % world_size),
            dist.P2POp(dist.irecv, received, (rank - 1) % world_size)])
        with span("compute"):
            block.sum()
        for handle in handles:
            handle.wait()
        block = received
    return spans()


@pytest.fixture(scope="module")
def ring():
    return commlab.run(_ring, world_size=3, backend="gloo")


def _batch(rank: int, index: int, sends: list[int], receives: list[int]) -> Call:
    info = TensorInfo((2,), "float32", "cpu", 8)
    return Call(op="batch_isend_irecv", index=index, seq=index - 1, rank=rank,
                group_ranks=(0, 1, 2), sent_to={peer: 8 for peer in sends},
                received_from={peer: 8 for peer in receives},
                ops=[("isend", p, info) for p in sends] + [("irecv", p, info) for p in receives])


def _result(trace: list[list[Call]]) -> RunResult:
    n = len(trace)
    return RunResult(n, "gloo", [None] * n, [""] * n, [""] * n, trace)


def test_blocks_follow_the_ring_from_the_trace(ring):
    assert kv_blocks(ring) == [[0, 1, 2], [2, 0, 1], [1, 2, 0]]


def test_blocks_of_a_ring_the_other_way_round():
    # rank r receives from r + 1: at step 1 it holds the block of rank r + 1
    trace = [[_batch(r, s, [(r - 1) % 3], [(r + 1) % 3]) for s in (1, 2)] for r in range(3)]
    assert kv_blocks(_result(trace)) == [[0, 1, 2], [1, 2, 0], [2, 0, 1]]


def test_a_run_without_batches_cannot_be_drawn():
    with pytest.raises(DrawError, match="made no batch_isend_irecv"):
        kv_blocks(_result([[], [], []]))


def test_ranks_with_different_numbers_of_steps_are_named():
    trace = [[_batch(0, 1, [1], [2])], [], [_batch(2, 1, [0], [1])]]
    with pytest.raises(DrawError, match="rank 0: 1, rank 1: 0, rank 2: 1"):
        kv_blocks(_result(trace))


def test_a_batch_receiving_from_two_ranks_is_not_a_ring():
    trace = [[_batch(r, 1, [(r + 1) % 3], [(r + 1) % 3, (r + 2) % 3])] for r in range(3)]
    with pytest.raises(DrawError, match=r"received from \[1, 2\]"):
        kv_blocks(_result(trace))


def test_ring_picture_has_a_cell_per_rank_and_step_and_an_arrow_per_transfer(ring):
    fig = draw_kv_ring(ring)
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.texts if t.get_text().startswith("K, V of rank")]
    assert labels.count("K, V of rank 0") == 3 and len(labels) == 9
    arrows = [p for p in ax.patches if type(p).__name__ == "FancyArrowPatch"]
    assert len(arrows) == 2 * 3
    assert any("each arrow carries 8 B" in t.get_text() for t in fig.texts)


def test_layout_colours_each_cell_by_the_rank_holding_it():
    before = [torch.tensor([[0, 1], [4, 5]]), torch.tensor([[2, 3], [6, 7]])]  # 2 heads x 4
    after = [torch.tensor([0, 1, 2, 3]), torch.tensor([4, 5, 6])]             # 7 not held
    fig = draw_layout([[before[0], after[0]], [before[1], after[1]]], heads=2, seq_len=4,
                      titles=["before", "after"])
    cells = [p for p in fig.axes[1].patches if type(p).__name__ == "Rectangle"]
    faces = {(int(p.get_x()), int(p.get_y())): p.get_facecolor() for p in cells}
    blue, orange = (0.0, 0.447, 0.698), (0.902, 0.624, 0.0)
    assert faces[(3, 0)][:3] == pytest.approx(blue, abs=1e-3)        # head 0, position 3
    assert faces[(0, 1)][:3] == pytest.approx(orange, abs=1e-3)      # head 1, position 0
    assert faces[(3, 1)][:3] == pytest.approx((1.0, 1.0, 1.0))       # held by no rank


def test_layout_refuses_ids_outside_the_grid_and_missing_panels():
    with pytest.raises(DrawError, match="outside a grid of 2 heads x 4 positions"):
        draw_layout([[torch.tensor([8])]], heads=2, seq_len=4, titles=["before"])
    with pytest.raises(DrawError, match="a list of 2 tensors"):
        draw_layout([torch.tensor([0])], heads=2, seq_len=4, titles=["before", "after"])


def test_timeline_draws_a_batch_as_in_flight_from_start_to_wait(ring):
    fig = draw_timeline(ring, ring.returns)
    hatched = [p for p in fig.axes[0].patches if p.get_hatch() == "///"]
    assert len(hatched) == len(ring.calls("batch_isend_irecv"))
    for rank in range(3):
        for call, compute in zip(ring.calls("batch_isend_irecv", rank), ring.returns[rank]):
            assert call.started < compute.started and call.finished > compute.finished
