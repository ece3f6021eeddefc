"""Building a process group: no rank leaves it half built for a slower peer, and the NCCL branch
can be taken on a CPU machine (``COMMLAB_PRETEND_GPUS``) as a student with GPUs would take it."""

from __future__ import annotations

import os
import time

import pytest
import torch
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


# --- the NCCL branch on a CPU machine ------------------------------------------------------------

def _sum_on_cpu(rank, world_size):
    tensor = torch.ones(3) * (rank + 1)  # a CPU tensor, as most chapter cells build
    dist.all_reduce(tensor)
    return tensor.tolist(), dist.get_backend(), str(commlab.device())


@pytest.fixture
def four_pretended_gpus(monkeypatch):
    if torch.cuda.is_available():
        pytest.skip("this machine has real GPUs")
    monkeypatch.setenv("COMMLAB_PRETEND_GPUS", "4")


def test_pretended_gpus_take_the_nccl_branch(four_pretended_gpus):
    assert commlab.run(_sum_on_cpu, 4).backend == "nccl"


def test_cpu_tensors_all_reduce_on_the_nccl_branch(four_pretended_gpus):
    result = commlab.run(_sum_on_cpu, 4)
    assert [values for values, _, _ in result.returns] == [[10.0, 10.0, 10.0]] * 4


def test_the_nccl_branch_without_cuda_builds_a_group_of_gloo_for_cpu_and_cuda(
        four_pretended_gpus):
    result = commlab.run(_sum_on_cpu, 4)
    assert {backend for _, backend, _ in result.returns} == {"cpu:gloo,cuda:gloo"}


def test_the_nccl_branch_without_cuda_puts_every_rank_on_the_cpu(four_pretended_gpus):
    result = commlab.run(_sum_on_cpu, 4)
    assert [device for _, _, device in result.returns] == ["cpu"] * 4


def test_more_ranks_than_pretended_gpus_stay_on_gloo(four_pretended_gpus):
    assert commlab.run(_sum_on_cpu, 5).backend == "gloo"
