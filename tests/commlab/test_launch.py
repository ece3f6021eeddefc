"""commlab.run from plain Python: arguments, capture, results, failures, and what is left behind."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import threading
from pathlib import Path

import psutil
import pytest
import torch
import torch.distributed as dist

import commlab
from commlab import processes
from support.processes import descendants

# --- arguments are checked before anything starts ----------------------------------------------

@pytest.mark.parametrize("kwargs, error, words", [
    (dict(fn=42), TypeError, "needs a function"),
    (dict(world_size="4"), TypeError, "whole number of ranks"),
    (dict(world_size=True), TypeError, "whole number of ranks"),
    (dict(world_size=0), ValueError, "at least 1"),
    (dict(world_size=-2), ValueError, "at least 1"),
    (dict(args=[1]), TypeError, "args=(value,)"),
    (dict(timeout=0), ValueError, "positive number of seconds"),
    (dict(timeout=float("inf")), ValueError, "positive number of seconds"),
    (dict(backend="mpi"), ValueError, "'auto', 'gloo' or 'nccl'"),
    (dict(args=(threading.Lock(),)), TypeError, "can't be sent to the ranks"),
])
def test_bad_arguments_are_refused_before_any_process_starts(kwargs, error, words):
    before = {p.pid for p in descendants()}
    call = dict(fn=lambda rank, world_size, *a: None, world_size=2) | kwargs
    with pytest.raises(error, match=None) as caught:
        commlab.run(call.pop("fn"), **call)
    assert words in str(caught.value)
    assert {p.pid for p in descendants()} == before


@pytest.mark.skipif(torch.cuda.device_count() >= 4, reason="this machine has 4 GPUs")
def test_nccl_without_enough_gpus_is_refused_with_what_to_do(monkeypatch):
    monkeypatch.delenv("COMMLAB_PRETEND_GPUS", raising=False)
    with pytest.raises(ValueError, match="needs one GPU per rank") as caught:
        commlab.run(lambda rank, world_size: None, 4, backend="nccl")
    assert "backend='auto'" in str(caught.value)


def test_auto_backend_is_gloo_on_the_cpu_and_device_says_so(monkeypatch):
    if torch.cuda.device_count() >= 2:
        pytest.skip("enough GPUs for NCCL")
    monkeypatch.delenv("COMMLAB_PRETEND_GPUS", raising=False)
    result = commlab.run(lambda rank, world_size: str(commlab.device()), 2)
    assert result.backend == "gloo"
    assert result.returns == ["cpu", "cpu"]


def test_device_outside_a_rank_explains_itself():
    with pytest.raises(commlab.CommlabError, match="only works inside"):
        commlab.device()


# --- what comes back ----------------------------------------------------------------------------

def _talk(rank, world_size):
    print(f"python print from {rank}")
    print(f"to stderr from {rank}", file=sys.stderr)
    os.write(1, f"raw fd write from {rank}\n".encode())
    return {"rank": rank, "tensor": torch.arange(3) + rank}


def test_each_rank_output_and_return_come_back_in_rank_order():
    result = commlab.run(_talk, 3)
    for rank in range(3):
        assert f"python print from {rank}" in result.stdout[rank]
        assert f"raw fd write from {rank}" in result.stdout[rank]
        assert result.stderr[rank] == f"to stderr from {rank}\n"
        assert result.returns[rank]["rank"] == rank
        assert torch.equal(result.returns[rank]["tensor"], torch.arange(3) + rank)
    text = repr(result)
    assert text.index("── rank 0 ──") < text.index("── rank 1 ──") < text.index("── rank 2 ──")
    assert repr(commlab.run(_talk, 3)) == text


def test_a_return_that_cannot_be_sent_back_is_a_clear_rank_error():
    with pytest.raises(commlab.RankError, match="can't be sent back") as caught:
        commlab.run(lambda rank, world_size: threading.Lock() if rank == 1 else rank, 2)
    assert caught.value.ranks == [1]


def test_huge_output_is_cut_not_lost_track_of():
    result = commlab.run(lambda rank, world_size: print("x" * (3 << 20)), 1)
    assert len(result.stdout[0]) < (1 << 20) + 200
    assert "more bytes of stdout not kept" in result.stdout[0]


def test_function_can_init_the_process_group_itself_from_the_environment():
    def by_hand(rank, world_size):
        dist.init_process_group("gloo")
        tensor = torch.tensor([rank + 1])
        dist.all_reduce(tensor)
        seen = (os.environ["RANK"], os.environ["WORLD_SIZE"], os.environ["MASTER_ADDR"],
                os.environ["MASTER_PORT"].isdigit(), tensor.item())
        dist.destroy_process_group()
        return seen

    result = commlab.run(by_hand, 3, init_process_group=False)
    assert result.returns == [(str(r), "3", "127.0.0.1", True, 6) for r in range(3)]
    assert [c.op for c in result.trace[0]] == ["all_reduce"]


def test_notebook_environment_reaches_the_ranks(monkeypatch):
    monkeypatch.setenv("COMMLAB_TEST_VALUE", "from the notebook")
    result = commlab.run(lambda rank, world_size: os.environ["COMMLAB_TEST_VALUE"], 2)
    assert result.returns == ["from the notebook"] * 2


def _threads(rank, world_size):
    return os.environ.get("OMP_NUM_THREADS"), torch.get_num_threads()


def test_each_rank_computes_on_one_thread_unless_the_notebook_says_otherwise(monkeypatch):
    # as torchrun does for several processes on one machine
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert commlab.run(_threads, 2).returns == [("1", 1)] * 2
    assert "OMP_NUM_THREADS" not in os.environ
    # a process alone is left as it is
    assert commlab.run(_threads, 1).returns[0][0] is None
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert commlab.run(_threads, 2).returns == [("3", 3)] * 2


def _listening_addresses(port: int) -> list[str]:
    """The local addresses (hex, as /proc/net lists them) of the sockets listening on ``port``."""
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, hex_port = local.split(":")
            if state == "0A" and int(hex_port, 16) == port:  # 0A: LISTEN
                found.append(address)
    return found


def test_the_rendezvous_store_listens_on_the_loopback_alone():
    # an IPv4 loopback socket: the store's server names its peers from /etc/hosts, never over
    # the network, and no other machine can reach the store while a run lasts
    from commlab import rendezvous

    store = rendezvous.launch_store(5.0)
    try:
        assert _listening_addresses(store.port) == ["0100007F"]  # 127.0.0.1
        store.set("key", "value")
        assert store.get("key") == b"value"
    finally:
        del store


def test_ranks_name_the_store_with_quick_lookups_and_the_notebook_keeps_its_environment(
        monkeypatch):
    monkeypatch.delenv("RES_OPTIONS", raising=False)
    result = commlab.run(lambda rank, world_size: os.environ.get("RES_OPTIONS"), 2)
    assert result.returns == ["timeout:1 attempts:2"] * 2
    assert "RES_OPTIONS" not in os.environ
    monkeypatch.setenv("RES_OPTIONS", "timeout:3")  # the notebook's own choice is kept
    result = commlab.run(lambda rank, world_size: os.environ.get("RES_OPTIONS"), 2)
    assert result.returns == ["timeout:3"] * 2
    assert os.environ["RES_OPTIONS"] == "timeout:3"


def test_run_inside_a_rank_is_refused():
    with pytest.raises(commlab.RankError, match="called inside a rank"):
        commlab.run(lambda rank, world_size: commlab.run(print, 2), 2)


# --- ranks started ahead of their run ---------------------------------------------------------

def _pid_environment_and_folder(rank, world_size):
    return os.getpid(), os.environ.get("COMMLAB_TEST_VALUE"), os.getcwd()


def test_the_next_run_takes_the_ranks_started_ahead_and_sees_the_notebook_as_it_is_then(
        monkeypatch, tmp_path):
    processes.close_ranks_started_ahead()
    commlab.run(_pid_environment_and_folder, 3)  # starts 3 for the next run
    waiting = processes.ranks_started_ahead(timeout=60)
    assert len(waiting) == 3
    # what the notebook changes after they started reaches them with their launch
    monkeypatch.setenv("COMMLAB_TEST_VALUE", "set after they started")
    monkeypatch.chdir(tmp_path)
    result = commlab.run(_pid_environment_and_folder, 3)
    assert sorted(pid for pid, _, _ in result.returns) == sorted(waiting)
    assert {(value, folder) for _, value, folder in result.returns} == {
        ("set after they started", str(tmp_path))}


def test_a_run_of_more_ranks_than_wait_starts_the_rest_itself():
    processes.close_ranks_started_ahead()
    commlab.run(_pid_environment_and_folder, 2)  # starts 2 for the next run
    waiting = processes.ranks_started_ahead(timeout=60)
    assert len(waiting) == 2
    result = commlab.run(lambda rank, world_size: (os.getpid(), rank), 4)
    assert [rank for _, rank in result.returns] == [0, 1, 2, 3]
    assert len(set(waiting) & {pid for pid, _ in result.returns}) == 2


def test_nothing_of_the_rehearsal_of_a_rank_started_ahead_shows_in_its_run():
    def first_steps(rank, world_size):
        began_initialized = dist.is_initialized()
        dist.init_process_group("gloo")
        tensor = torch.ones(2)
        dist.all_reduce(tensor)
        groups = dist.get_world_size(), dist.distributed_c10d._world.group_count
        dist.destroy_process_group()
        return began_initialized, groups

    commlab.run(first_steps, 2, init_process_group=False)
    processes.ranks_started_ahead(timeout=60)
    result = commlab.run(first_steps, 2, init_process_group=False)
    # no group made before the function's own, one call in the trace, numbered from #1, and
    # nothing printed or warned
    assert result.returns == [(False, (2, 1))] * 2
    assert [[(c.op, c.index) for c in calls] for calls in result.trace] == [
        [("all_reduce", 1)]] * 2
    assert result.stdout == result.stderr == ["", ""]
    assert result.warnings == [[], []]


def test_ranks_started_ahead_end_when_closed_or_when_their_launcher_dies():
    script = textwrap.dedent("""
        import os, sys, time
        import commlab
        from commlab import processes
        from support.processes import forkserver_children
        commlab.run(lambda rank, world_size: rank, 2)
        waiting = processes.ranks_started_ahead(timeout=60)
        # the run's own ranks are stopped in the background, and may not have ended yet
        assert processes.wait_stopped(60)
        assert sorted(p.pid for p in forkserver_children()) == sorted(waiting), waiting
        processes.close_ranks_started_ahead()
        assert forkserver_children() == [], forkserver_children()
        commlab.run(lambda rank, world_size: rank, 2)
        print(" ".join(map(str, processes.ranks_started_ahead(timeout=60))), flush=True)
        time.sleep(120)
    """)
    launcher = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True,
                                env=dict(os.environ, PYTHONPATH=str(Path(__file__).parents[1])))
    try:
        line = launcher.stdout.readline()
        waiting = [psutil.Process(int(pid)) for pid in line.split()]
        assert len(waiting) == 2, launcher.stderr.read() if not line else line
    finally:
        launcher.kill()
        launcher.communicate(timeout=30)
    gone, alive = psutil.wait_procs(waiting, timeout=10)
    assert alive == []


def test_a_script_without_a_main_guard_runs_once_though_ranks_start_in_a_thread(tmp_path):
    # multiprocessing would re-run such a script in every process it starts; ranks started ahead
    # are started by a thread of their own while the script goes on
    script = tmp_path / "no_guard.py"
    script.write_text(textwrap.dedent("""
        import commlab
        from commlab import processes
        print("top of the script")
        for _ in range(3):
            commlab.run(lambda rank, world_size: rank, 2)
            processes.ranks_started_ahead(timeout=60)
        print("__file__" in globals(), __spec__)
    """))
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         timeout=180)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["top of the script", "True None"], out.stderr


# --- failures ------------------------------------------------------------------------------------

def test_sys_exit_in_a_rank_is_reported_as_that_rank_raising():
    with pytest.raises(commlab.RankError, match="SystemExit") as caught:
        commlab.run(lambda rank, world_size: sys.exit(3) if rank == 1 else dist.barrier(), 3)
    assert caught.value.ranks == [1]


def test_a_rank_that_kills_its_own_process_is_a_crash_with_its_exit_code():
    with pytest.raises(commlab.RankCrashed) as caught:
        commlab.run(lambda rank, world_size: os._exit(7) if rank == 0 else dist.barrier(), 2)
    assert caught.value.signals == {0: "exit code 7"}
    assert "Rank 0 died" in str(caught.value)


def test_an_endless_loop_outside_collectives_is_stopped_and_said_so():
    def spin(rank, world_size):
        dist.barrier()
        while rank == 1:
            pass

    with pytest.raises(commlab.CollectiveTimeout) as caught:
        commlab.run(spin, 2, timeout=2)
    assert caught.value.waiting[0] == "finished"
    assert caught.value.waiting[1].startswith("running its own code")
    assert "barrier #1" in caught.value.waiting[1]
    assert "endless loop" in str(caught.value)


def test_debug_turns_a_hang_into_an_immediate_mismatch_error():
    def extra(rank, world_size):
        tensor = torch.ones(2)
        if rank == 0:
            dist.all_reduce(tensor)
        dist.broadcast(tensor, src=0)

    with pytest.raises(commlab.RankError, match="mismatch between collectives") as caught:
        commlab.run(extra, 2, debug=True, timeout=8)
    assert not isinstance(caught.value, commlab.CollectiveTimeout)


def test_the_stop_button_while_the_forkserver_starts_does_not_break_the_next_run():
    # Jupyter's stop button sends SIGINT to the kernel's whole process group, forkserver
    # included; here it reaches a fresh forkserver while it is still importing torch.
    code = textwrap.dedent("""
        import os, signal, time
        from multiprocessing import forkserver
        import commlab
        from commlab import processes
        processes.mp_context()  # starts the forkserver and returns while it imports torch
        time.sleep(0.3)  # past the interpreter's start, into the import
        os.kill(forkserver._forkserver._forkserver_pid, signal.SIGINT)
        print(commlab.run(lambda rank, world_size: rank, 2).returns)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.stdout.strip() == "[0, 1]", out.stderr


# --- nothing left behind ------------------------------------------------------------------------

@pytest.fixture
def short_tmp():
    """A folder of its own directly under the temp dir, removed after the test."""
    folder = Path(tempfile.mkdtemp(prefix="leaks-"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.slow
def test_fifty_runs_in_a_row_leave_no_process_file_port_or_descriptor(short_tmp):
    # short: under a deep TMPDIR multiprocessing's folder would go to /tmp, out of this count
    private_tmp = short_tmp
    tests = Path(__file__).parents[1]
    check = subprocess.Popen([sys.executable, str(tests / "support" / "leak_check.py")],
                             env=dict(os.environ, TMPDIR=str(private_tmp), PYTHONPATH=str(tests)),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = check.communicate(timeout=300)
    assert check.returncode == 0, err
    assert out.strip() == "clean"
    assert list(private_tmp.iterdir()) == []
    if os.path.isdir("/dev/shm"):
        # multiprocessing names its shared-memory arenas after the process that made them
        assert [n for n in os.listdir("/dev/shm") if n.startswith(f"pym-{check.pid}-")] == []
