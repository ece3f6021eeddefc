"""commlab.groups: bytes per process group from a run's trace, and the picture of the groups."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

import commlab
from commlab.groups import bytes_by_group, describe_groups, draw_groups


def _pairs_then_columns(rank, world_size):
    pairs = [dist.new_group([0, 1]), dist.new_group([2, 3])]
    columns = [dist.new_group([0, 2]), dist.new_group([1, 3])]
    dist.all_reduce(torch.ones(4), group=pairs[rank // 2])          # 16 bytes on a pair
    dist.all_reduce(torch.ones(2), group=columns[rank % 2])         # 8 bytes on a column
    dist.barrier()


@pytest.fixture(scope="module")
def result():
    return commlab.run(_pairs_then_columns, world_size=4, backend="gloo")


def test_bytes_by_group_counts_what_each_rank_sent_in_each_group(result):
    assert bytes_by_group(result) == {
        (0, 1): [16, 16, 0, 0],
        (0, 2): [8, 0, 8, 0],
        (0, 1, 2, 3): [0, 0, 0, 0],
        (1, 3): [0, 8, 0, 8],
        (2, 3): [0, 0, 16, 16],
    }


def test_describe_groups_says_what_ran_on_each_group(result):
    assert describe_groups(result) == [
        "ranks [0, 1]: all_reduce; 16 B sent per rank",
        "ranks [0, 2]: all_reduce; 8 B sent per rank",
        "ranks [0, 1, 2, 3]: barrier; 0 B sent per rank",
        "ranks [1, 3]: all_reduce; 8 B sent per rank",
        "ranks [2, 3]: all_reduce; 16 B sent per rank",
    ]


def test_draw_groups_frames_every_group_and_lists_it(result):
    fig = draw_groups(result, shape=(2, 2))
    texts = [t.get_text() for ax in fig.axes for t in ax.texts]
    assert [t for t in texts if t in {"G1", "G2", "G3", "G4", "G5"}] == [
        "G1", "G2", "G3", "G4", "G5"]
    assert "G2  ranks [0, 2]: all_reduce; 8 B sent per rank" in texts
    assert fig._repr_png_().startswith(b"\x89PNG")


def test_draw_groups_rejects_a_shape_that_does_not_hold_the_ranks(result):
    with pytest.raises(ValueError, match=r"shape \(3, 2\) holds 6 ranks, but the run had 4"):
        draw_groups(result, shape=(3, 2))
