"""What a rank finds already imported: the forkserver it is forked from preloads what the
chapters' code would otherwise import in every rank of every run (commlab.processes.PRELOAD)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

import commlab
from commlab import processes
from grader.course import SOLUTIONS


def _modules_after_an_optimizer_step(rank, world_size):
    before = set(sys.modules)
    params = [torch.nn.Parameter(torch.ones(3))]
    optimizer = torch.optim.AdamW(params, lr=0.1)
    params[0].grad = torch.ones(3)
    optimizer.step()
    return "torch._dynamo" in before, sorted(set(sys.modules) - before)


def _next_run_finds(ranks: str) -> None:
    """Have the next 2-rank run start its ranks itself ("started for the run") or find two
    started ahead of it and waiting ("started ahead")."""
    processes.close_ranks_started_ahead()
    if ranks == "started ahead":
        commlab.run(lambda rank, world_size: None, world_size=2)
        assert len(processes.ranks_started_ahead(timeout=60)) == 2


@pytest.mark.parametrize("ranks", ["started for the run", "started ahead"])
def test_a_torch_optim_step_in_a_rank_finds_torch_dynamo_imported(ranks):
    # torch.optim imports torch._dynamo on first use (with sympy and torch.fx): 1.4 s per rank
    # on an idle 2-core machine, 10 s at a load of 8, past a test case's 8 s; what is left to
    # import (a profiler module) takes milliseconds. Ranks started ahead of their run
    # (commlab.standby) rehearse its first steps meanwhile; nothing of that may change this.
    _next_run_finds(ranks)
    result = commlab.run(_modules_after_an_optimizer_step, world_size=2)
    for preloaded, new in result.returns:
        assert preloaded
        assert [name for name in new if name.split(".")[0] == "sympy"
                or name.startswith(("torch._dynamo", "torch.fx"))] == []


def _collector(rank, world_size):
    import gc

    return gc.isenabled(), gc.get_freeze_count()


@pytest.mark.parametrize("ranks", ["started for the run", "started ahead"])
def test_ranks_collect_garbage_and_never_walk_what_the_forkserver_imported(ranks):
    # the forkserver imports with the collector off (commlab.preload_start) and turns it on
    # again once it has frozen what the imports made (commlab.preload_memory)
    _next_run_finds(ranks)
    for collecting, frozen in commlab.run(_collector, world_size=2).returns:
        assert collecting
        assert frozen > 100_000  # torch's objects, among others


def _distribute(rank, world_size):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    mesh = init_device_mesh("cpu", (world_size,))
    distribute_tensor(torch.ones(4, 2), mesh, [Shard(0)])
    distribute_tensor(torch.ones(2), mesh, [Replicate()])


def test_dtensors_scatter_and_broadcast_are_traced_though_their_module_is_preloaded():
    # DTensor's _collective_utils takes scatter and broadcast by name, and torch._dynamo brings
    # it into the forkserver, before any rank installs its trace
    result = commlab.run(_distribute, world_size=2, timeout=30)
    assert [call.op for call in result.trace[0]] == ["scatter", "broadcast"]
    assert result.bytes_sent()[0] == 16 + 8


def test_runs_start_where_the_temp_dir_is_too_deep_for_the_forkservers_socket(tmp_path):
    # a test runner's or a cluster job's TMPDIR can be deeper than a Unix socket's 107 bytes
    # leave for multiprocessing's <temp dir>/pymp-XXXXXXXX/listener-XXXXXXXX
    deep = tmp_path / ("a-temp-dir-deeper-than-a-unix-socket-path-may-be-" * 2)
    deep.mkdir()
    code = ("import commlab\n"
            "result = commlab.run(lambda rank, world_size: rank, 2, timeout=60)\n"
            "print(result.returns)\n")
    out = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, TMPDIR=str(deep)),
                         capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip() == "[0, 1]"
    assert list(deep.iterdir()) == [], "multiprocessing's socket folder is gone at exit"


def test_the_ranks_of_runs_that_succeeded_all_end_and_wait_stopped_waits_for_them():
    # a run that succeeded returns once its ranks reported; their processes end in the
    # background (processes.stop_in_background)
    import psutil

    pids = []
    for _ in range(5):
        result = commlab.run(lambda rank, world_size: os.getpid(), world_size=4)
        pids += result.returns
        assert result.stdout == [""] * 4  # what the result shows is all there
    assert processes.wait_stopped(timeout=60)
    alive = [pid for pid in pids if psutil.pid_exists(pid)
             and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE]
    assert alive == []
    assert processes.wait_stopped(timeout=0)  # nothing left to wait for


def test_dynamo_is_preloaded_unless_every_chapter_is_known_to_do_without_it(tmp_path,
                                                                           monkeypatch):
    later = processes.PRELOAD_LATER
    assert processes.DYNAMO in processes.for_chapters(later, None)  # not a chapter's notebook
    assert processes.DYNAMO in processes.for_chapters(later, ["05_reduce", "17_sharded_training"])
    assert processes.DYNAMO in processes.for_chapters(later, ["05_reduce", "my_notes"])
    assert processes.DYNAMO_CHAPTERS <= {path.name for path in SOLUTIONS.iterdir()}
    without = processes.for_chapters(later, ["01_broadcast", "05_reduce"])
    assert processes.DYNAMO not in without and "commlab.preload_memory" in without
    for folder, chapter in [("05_reduce", ["05_reduce"]), ("work", None)]:
        (tmp_path / folder).mkdir()
        monkeypatch.chdir(tmp_path / folder)
        assert processes.notebook_chapter() == chapter
