"""commlab.run as a student meets it: cells executed in a real Jupyter kernel."""

from __future__ import annotations

import textwrap

import pytest

from support.kernel import Kernel, wait_for_no_children

EXAMPLE = textwrap.dedent("""
    def example(rank, world_size):
        tensor = torch.ones(1, 5) * rank
        print(f"Rank {rank} before reduce: {tensor.tolist()}")
        dist.reduce(tensor, dst=0, op=dist.ReduceOp.SUM)
        if rank == 0:
            print(f"Rank {rank} after reduce (sum): {tensor.tolist()}")
        return tensor
    commlab.run(example, world_size=4)
""")


@pytest.fixture(scope="module")
def example(kernel: Kernel):
    """The cell above, run once in the kernel: a function defined in a cell, on four ranks."""
    run = kernel.execute(EXAMPLE)
    assert run.status == "ok", run.error
    return run


def test_ranks_show_in_rank_order(example):
    shown = "".join(example.text)
    positions = [shown.index(f"── rank {r} ──") for r in range(4)]
    assert positions == sorted(positions)


def test_each_rank_shows_what_it_printed(example):
    shown = "".join(example.text)
    assert "Rank 0 after reduce (sum): [[6.0, 6.0, 6.0, 6.0, 6.0]]" in shown
    assert "Rank 3 before reduce: [[3.0, 3.0, 3.0, 3.0, 3.0]]" in shown


def test_a_run_that_succeeds_writes_nothing_on_the_cells_stderr(example):
    assert example.stderr == ""


def test_the_html_view_labels_every_rank(example):
    assert all(f'rank {r}</div>' in "".join(example.html) for r in range(4))


def test_the_same_cell_run_again_shows_the_same_output(kernel: Kernel, example):
    again = [kernel.execute(EXAMPLE) for _ in range(3)]
    assert all(run.text == example.text and run.html == example.html for run in again)


def test_closures_lambdas_and_notebook_globals_reach_the_ranks(kernel: Kernel):
    run = kernel.execute(textwrap.dedent("""
        SCALE = 10
        def make(offset):
            def body(rank, world_size):
                return torch.tensor([rank * SCALE + offset])
            return body
        closure = commlab.run(make(3), 3).returns
        lam = commlab.run(lambda rank, world_size, k: rank * k, 2, args=(7,)).returns
        print([t.item() for t in closure], lam)
    """))
    assert run.status == "ok", run.error
    assert run.stdout.strip() == "[3, 13, 23] [0, 7]"


def test_rank_that_raises_is_named_with_its_own_cell_line(kernel: Kernel):
    run = kernel.execute(textwrap.dedent("""
        def broken(rank, world_size):
            print(f"rank {rank} got here")
            if rank == 2:
                raise ValueError("rank two is unhappy")
            dist.barrier()
        commlab.run(broken, world_size=4)
    """))
    assert run.status == "error"
    assert run.error["ename"] == "RankError"
    message = run.error["evalue"]
    assert "Rank 2 raised" in message
    assert 'raise ValueError("rank two is unhappy")' in message
    assert "notebook cell, line 4, in broken" in message
    assert "ranks 0, 1, 3 stopped in barrier #1" in message
    assert "rank 1 got here" in message  # the other ranks' output is kept
    assert wait_for_no_children(kernel) == []


def test_shape_mismatch_abort_names_the_rank_the_signal_and_the_cause(kernel: Kernel):
    run = kernel.execute(textwrap.dedent("""
        def mismatch(rank, world_size):
            tensor = torch.ones(1000 if rank == 1 else 10)
            dist.all_reduce(tensor)
        try:
            commlab.run(mismatch, world_size=2)
        except commlab.RankCrashed as err:
            print(sorted(err.signals.items()))
            print(err)
    """))
    assert run.status == "ok", run.error
    assert "SIGABRT" in run.stdout
    assert "while in all_reduce #1" in run.stdout
    assert "different shapes or dtypes" in run.stdout
    assert wait_for_no_children(kernel) == []


def test_skipped_collective_is_reported_within_the_timeout(kernel: Kernel):
    run = kernel.execute(textwrap.dedent("""
        def extra(rank, world_size):
            tensor = torch.ones(2)
            dist.all_reduce(tensor)
            if rank == 3:
                dist.all_reduce(tensor)
        commlab.run(extra, world_size=4, timeout=3)
    """))
    assert run.status == "error"
    assert run.error["ename"] == "CollectiveTimeout"
    assert "rank 3 is still in all_reduce #2" in run.error["evalue"]
    assert "ranks 0-2 finished" in run.error["evalue"]
    assert run.seconds < 3 + 5
    assert wait_for_no_children(kernel) == []


def test_success_leaves_nothing_on_stderr_even_with_warnings(kernel: Kernel):
    run = kernel.execute(textwrap.dedent("""
        import warnings
        def noisy(rank, world_size):
            warnings.warn("a worker warning")
            tensor = torch.ones(3)
            dist.all_reduce(tensor)
            return tensor.sum().item()
        result = commlab.run(noisy, 4, debug=True)
        print(result.returns, len(result.warnings[0]))
    """))
    assert run.status == "ok", run.error
    assert run.stderr == ""
    assert run.stdout.strip() == "[12.0, 12.0, 12.0, 12.0] 1"


def test_interrupt_stops_every_rank():
    kernel = Kernel()
    try:
        kernel.execute("import torch, torch.distributed as dist, commlab")
        run = kernel.execute(textwrap.dedent("""
            import time
            def slow(rank, world_size):
                dist.barrier()
                time.sleep(60)
            commlab.run(slow, world_size=4, timeout=120)
        """), timeout=60, interrupt_after=4)
        assert run.status == "error"
        assert run.error["ename"] == "KeyboardInterrupt"
        assert run.seconds < 30
        assert wait_for_no_children(kernel) == []
        after = kernel.execute("print(commlab.run(lambda rank, world_size: rank, 2).returns)")
        assert after.stdout.strip() == "[0, 1]", after.error and after.error["evalue"]
    finally:
        kernel.shutdown()


def test_the_import_cell_starts_the_forkserver_and_the_first_runs_ranks():
    kernel = Kernel()
    try:
        kernel.execute("import torch, torch.distributed as dist, commlab")
        # the next cell finds them started in the background, before any run
        run = kernel.execute(textwrap.dedent("""
            import os
            from commlab import processes
            waiting = processes.ranks_started_ahead(timeout=120)
            result = commlab.run(lambda rank, world_size: os.getpid(), 4)
            print(len(waiting), sorted(result.returns) == sorted(waiting))
        """), timeout=180)
        assert run.status == "ok", run.error
        assert run.stdout.strip() == "4 True"
    finally:
        kernel.shutdown()


def test_an_import_cell_that_sends_every_run_elsewhere_starts_nothing():
    # a grader's scoring kernel: its runs go to a rank host with a forkserver of its own
    kernel = Kernel()
    try:
        kernel.execute(textwrap.dedent("""
            import commlab
            from commlab import launch
            launch.launch_elsewhere(lambda *args, **kwargs: None)
        """))
        run = kernel.execute(textwrap.dedent("""
            import time
            from multiprocessing import forkserver
            time.sleep(1)
            print(forkserver._forkserver._forkserver_pid)
        """))
        assert run.stdout.strip() == "None", run.error
    finally:
        kernel.shutdown()
