"""Building a process group: no rank leaves it half built for a slower peer."""

from __future__ import annotations

import os
import time

import pytest
import torch.distributed as dist

import commlab

SLOW = 1.0  # seconds the slow rank takes after its group is built, before it is done building

_built_at: float | None = None


def _make_building_slow(slow_rank: int) -> None:
    """On ``slow_rank``, finish building each process group only SLOW seconds after the group's
    connections are up, and note when it was done."""
    import torch.distributed.distributed_c10d as c10d

    original = c10d._new_process_group_helper

    def built_slowly(*args, **kwargs):
        global _built_at
        made = original(*args, **kwargs)
        if int(os.environ["RANK"]) == slow_rank:
            time.sleep(SLOW)
        _built_at = time.monotonic()
        return made

    c10d._new_process_group_helper = built_slowly


class _SlowBuildOn:
    """An argument that, when a rank unpickles it (before commlab builds the group), makes
    building slow on one rank."""

    def __init__(self, rank: int):
        self.rank = rank

    def __reduce__(self):
        return _make_building_slow_on_arrival, (self.rank,)


def _make_building_slow_on_arrival(rank: int) -> _SlowBuildOn:
    _make_building_slow(rank)
    return _SlowBuildOn(rank)


def _own_group_built_and_closed(rank, world_size):
    _make_building_slow(1)
    dist.init_process_group("gloo")
    returned_at = time.monotonic()
    dist.destroy_process_group()
    return _built_at, returned_at


def _times_of_default_group(rank, world_size, slow):
    return _built_at, time.monotonic()


def _no_rank_returned_before_all_built(times: list[tuple[float, float]]) -> bool:
    last_built = max(built for built, _ in times)
    first_return = min(returned for _, returned in times)
    return first_return >= last_built


@pytest.mark.parametrize("world_size", [2, 4])
def test_no_rank_returns_from_building_its_own_group_before_every_rank_has_built_it(world_size):
    result = commlab.run(_own_group_built_and_closed, world_size, init_process_group=False,
                         timeout=30)
    assert _no_rank_returned_before_all_built(result.returns), result.returns


def test_no_rank_starts_its_function_before_every_rank_has_built_the_default_group():
    result = commlab.run(_times_of_default_group, 3, args=(_SlowBuildOn(1),), timeout=30)
    assert _no_rank_returned_before_all_built(result.returns), result.returns
