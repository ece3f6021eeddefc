"""Building a process group: no rank leaves it half built for a slower peer, and the NCCL branch
can be taken on a CPU machine (``COMMLAB_PRETEND_GPUS``) as a student with GPUs would take it."""

from __future__ import annotations

import os
import time

import pytest
import torch
import torch.distributed as dist

import commlab
from grader import course
from support.nccl_branch import (
    PLAIN_CALLS,
    beyond_the_plain_calls,
    chapter_code,
    chapters_beyond_the_plain_calls,
    every_plain_call,
)

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


# --- the chapters' plain calls, the same on both branches ----------------------------------------
# (the chapters that use more of torch.distributed run end to end on the NCCL branch:
# tests/course/test_nccl_path.py; support/nccl_branch.py tells the two kinds apart)

@pytest.fixture(scope="module")
def on_both_branches():
    if torch.cuda.is_available():
        pytest.skip("this machine has real GPUs")
    gloo = commlab.run(every_plain_call, 4, timeout=60)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("COMMLAB_PRETEND_GPUS", "4")
        nccl = commlab.run(every_plain_call, 4, timeout=60)
    return gloo, nccl


def test_each_plain_call_of_the_chapters_gives_every_rank_the_same_on_both_branches(
        on_both_branches):
    gloo, nccl = on_both_branches
    assert (gloo.backend, nccl.backend) == ("gloo", "nccl")
    for rank, (on_gloo, on_nccl) in enumerate(zip(gloo.returns, nccl.returns)):
        differ = sorted(name for name in on_gloo if on_gloo[name] != on_nccl.get(name))
        assert differ == [], f"rank {rank}: {differ} differ between the branches"
    assert (gloo.stdout, gloo.warnings) == (nccl.stdout, nccl.warnings)
    # and the trace the pictures are drawn from says the same of every call
    assert _what_moved(gloo.trace) == _what_moved(nccl.trace)


def _what_moved(trace):
    fields = ("op", "index", "root", "reduce_op", "group_ranks", "sent_to", "received_from",
              "split_sizes", "async_op", "error")
    return [[tuple(getattr(call, f) for f in fields) for call in calls] for calls in trace]


def test_the_run_makes_every_call_it_names_with_what_torch_gives(on_both_branches):
    gloo, _ = on_both_branches
    made = {name.split()[0] for name in gloo.returns[0]}
    assert made == PLAIN_CALLS - {"group"}  # dist.group.WORLD: an argument, not a call
    # a few values worked out by hand, so that two wrong branches cannot agree on nothing
    assert gloo.returns[0]["all_reduce SUM"] == [60.0, 64.0, 68.0, 72.0]
    assert gloo.returns[1]["send"] == [0.0, 0.0] and gloo.returns[0]["recv"] == [3.0, 3.0]
    assert gloo.returns[2]["batch_isend_irecv"] == [11.0, 11.0]
    assert gloo.returns[0]["all_to_all"] == [[0.0], [10.0], [20.0], [30.0]]


@pytest.mark.parametrize("source, beyond", [
    ("dist.all_reduce(t, op=dist.ReduceOp.MAX)\nwork = dist.isend(t, 1)", set()),
    ("group = dist.new_group([0, 1])\ndist.all_reduce(t, group=group)", {"new_group"}),
    ("print(dist.get_backend())", {"get_backend"}),
    ("from torch.distributed.tensor import DTensor", {"torch.distributed.tensor"}),
    ("import torch.distributed.checkpoint as dcp", {"torch.distributed.checkpoint"}),
])
def test_code_beyond_the_plain_calls_is_told_apart(source, beyond):
    assert beyond_the_plain_calls(source) == beyond


def test_a_chapter_that_builds_its_own_groups_runs_end_to_end_on_the_nccl_branch():
    chosen = chapters_beyond_the_plain_calls()
    for chapter in course.chapters():
        assert (chapter in chosen) == bool(beyond_the_plain_calls(chapter_code(chapter)))
    assert "11_process_groups" in chosen and "01_broadcast" not in chosen
