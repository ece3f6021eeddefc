"""A notebook's forkserver is forked from its kernel after the import cell
(commlab.kernel_forkserver): torch comes with it, and nothing of the kernel's reaches a rank."""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import psutil
import pytest
import torch

from commlab import kernel_forkserver
from support.kernel import Kernel

# the import cell, with a variable of the notebook's before it
IMPORT_CELL = "secret = 42\nimport os, sys, torch, torch.distributed as dist, commlab"

WHAT_A_RANK_FINDS = textwrap.dedent("""
    import psutil, socket
    # the kernel's sockets to the frontend: over TCP, or Unix sockets bound to a path (its
    # channels over IPC); the ranks' pipes, unnamed Unix sockets, are shared on purpose
    kernel_sockets = [os.readlink(f"/proc/self/fd/{c.fd}")
                      for c in psutil.Process().net_connections(kind="all")
                      if c.fd >= 0 and (c.family != socket.AF_UNIX or c.laddr)]

    def inside(rank, world_size, kernel_sockets):
        import ctypes
        from IPython import get_ipython
        from IPython.display import display
        try:
            input()
            read = "a line"
        except EOFError:
            read = "end of input"
        display(f"shown by rank {rank}")
        mine = set()
        for fd in os.listdir("/proc/self/fd"):
            try:
                mine.add(os.readlink(f"/proc/self/fd/{fd}"))
            except OSError:
                pass
        c10 = ctypes.CDLL(os.path.join(os.path.dirname(torch.__file__), "lib", "libc10.so"))
        return {"shell": get_ipython() is not None, "input": read,
                "notebook main": hasattr(sys.modules["__main__"], "secret"),
                "kernel sockets": sorted(mine & set(kernel_sockets)),
                "c10 log level": ctypes.c_int.in_dll(c10, "FLAGS_caffe2_log_level").value,
                # torch's init_process_group wraps the hook it finds: look inside too
                "kernel hooks": [repr(hook) for hook in [
                    sys.displayhook, sys.excepthook,
                    *(cell.cell_contents for cell in sys.excepthook.__closure__ or ())]
                    if "Shell" in repr(hook)],
                "dynamo": "torch._dynamo" in sys.modules}

    assert kernel_sockets, "the kernel's channels were not found"
    first = commlab.run(inside, 4, args=(kernel_sockets,))
    second = commlab.run(inside, 4, args=(kernel_sockets,))
""")


@pytest.fixture(scope="module")
def kernel():
    kernel = Kernel()
    try:
        run = kernel.execute(IMPORT_CELL)
        assert run.status == "ok", run.error
        yield kernel
    finally:
        kernel.shutdown()


def _forkserver_of(kernel: Kernel) -> psutil.Process:
    # once it has forked the first ranks, it has shed the kernel and taken its name
    run = kernel.execute("from multiprocessing import forkserver\n"
                         "commlab.processes.ranks_started_ahead(60)\n"
                         "print(forkserver._forkserver._forkserver_pid)")
    assert run.status == "ok", run.error
    return psutil.Process(int(run.stdout))


def test_the_forkserver_is_the_kernel_forked_and_says_what_it_is(kernel):
    server = _forkserver_of(kernel)
    assert server.ppid() == kernel.pid
    # a fork, not a new interpreter started with multiprocessing's command line
    assert server.cmdline() == psutil.Process(kernel.pid).cmdline()
    assert server.name() == kernel_forkserver.PROCESS_NAME


def test_a_rank_holds_nothing_of_the_kernel(kernel):
    run = kernel.execute(WHAT_A_RANK_FINDS + "import json\nprint(json.dumps(first.returns[0]))\n"
                         "print(first.stdout)", timeout=120)
    assert run.status == "ok", run.error
    found = json.loads(run.stdout.splitlines()[0])
    assert found["shell"] is False  # display() prints instead of writing to the kernel's socket
    assert found["input"] == "end of input"  # not the kernel's input(), which would wait
    assert found["notebook main"] is False
    assert found["kernel sockets"] == []
    assert found["c10 log level"] == 2  # TORCH_CPP_LOG_LEVEL=ERROR, as a new interpreter's
    assert found["kernel hooks"] == []
    assert "shown by rank 0" in run.stdout


def test_the_first_runs_ranks_import_dynamo_themselves_and_later_ones_find_it(kernel):
    # the forkserver preloads torch._dynamo once the first 4 ranks are forked (those of the
    # import cell's start_ahead), while it goes on reporting their exits to the kernel
    run = kernel.execute(WHAT_A_RANK_FINDS + textwrap.dedent("""
        third = commlab.run(inside, 4, args=(kernel_sockets,))
        print([r["dynamo"] for r in second.returns], [r["dynamo"] for r in third.returns])
    """), timeout=120)
    assert run.status == "ok", run.error
    assert run.stdout.strip() == "[True, True, True, True] [True, True, True, True]"


def test_a_notebook_in_a_chapter_folder_without_optimizers_gets_no_dynamo_and_is_told_if_needed(
        tmp_path):
    # a kernel's folder is its notebook's; 05_reduce is not among processes.DYNAMO_CHAPTERS
    folder = tmp_path / "05_reduce"
    folder.mkdir()
    kernel = Kernel(cwd=str(folder))
    try:
        kernel.execute(IMPORT_CELL)
        run = kernel.execute(textwrap.dedent("""
            commlab.processes.ranks_started_ahead(60)
            assert commlab.kernel_forkserver.preloaded(60)
            found = commlab.run(lambda rank, world_size: "torch._dynamo" in sys.modules, 2)
            print(found.returns)
        """), timeout=120)
        assert run.status == "ok", run.error
        assert run.stdout.strip() == "[False, False]"
        assert run.stderr == ""

        def steps(rank, world_size):
            optimizer = torch.optim.SGD([torch.nn.Parameter(torch.ones(2))], lr=0.1)
            optimizer.step()

        cell = f"{textwrap.dedent(inspect.getsource(steps))}commlab.run(steps, 2)\nNone"
        first, second = (kernel.execute(cell, timeout=120) for _ in range(2))
        assert first.status == second.status == "ok", (first.error, second.error)
        assert "imported torch._dynamo itself" in first.stderr
        assert "05_reduce is not one of them" in first.stderr
        assert second.stderr == ""  # said once
    finally:
        kernel.shutdown()


def test_the_import_cells_first_ranks_run_without_waiting_for_the_rest_of_the_preload():
    # the run comes milliseconds after the import cell; the preload takes over a second
    kernel = Kernel()
    try:
        kernel.execute(IMPORT_CELL)
        run = kernel.execute(textwrap.dedent("""
            result = commlab.run(lambda rank, world_size: "torch._dynamo" in sys.modules, 4)
            print(result.returns)
        """), timeout=120)
        assert run.status == "ok", run.error
        assert run.stdout.strip() == "[False, False, False, False]"
    finally:
        kernel.shutdown()


def test_ranks_started_before_the_preload_are_not_used_once_it_is_done():
    kernel = Kernel()
    try:
        kernel.execute(IMPORT_CELL)
        run = kernel.execute(textwrap.dedent("""
            from commlab import kernel_forkserver, processes
            early = processes.ranks_started_ahead(timeout=60)
            print(len(early), kernel_forkserver.preloaded(timeout=120))
            result = commlab.run(lambda rank, world_size: ("torch._dynamo" in sys.modules,
                                                           os.getpid()), 4)
            print([dynamo for dynamo, _ in result.returns],
                  set(early) & {pid for _, pid in result.returns})
        """), timeout=240)
        assert run.status == "ok", run.error
        assert run.stdout.splitlines() == ["4 True", "[True, True, True, True] set()"]
    finally:
        kernel.shutdown()


def test_the_forkserver_ends_with_its_kernel():
    kernel = Kernel()
    try:
        kernel.execute(IMPORT_CELL)
        server = _forkserver_of(kernel)
        assert server.is_running()
    finally:
        kernel.shutdown()
    server.wait(timeout=30)
    assert not psutil.pid_exists(server.pid) or server.status() == psutil.STATUS_ZOMBIE


def test_a_kernel_asked_to_shut_down_stops_by_itself_and_leaves_nothing(tmp_path):
    # Jupyter asks, waits, then kills: given 10 s here, a kernel still waiting on its children
    # (a forkserver never reaped, a resource tracker deaf to SIGTERM) would end by the signal
    kernel = Kernel(env={**os.environ, "TMPDIR": str(tmp_path)})
    kernel.manager.shutdown_wait_time = 20
    process = kernel.manager.provisioner.process
    try:
        kernel.execute(IMPORT_CELL)
        run = kernel.execute(textwrap.dedent(f"""
            import atexit, pathlib
            atexit.register(pathlib.Path({str(tmp_path / "exit handlers ran")!r}).touch)
            print(commlab.run(lambda rank, world_size: rank, 4).returns)
            print(len(commlab.processes.ranks_started_ahead(60)))
            import gc
            print(gc.get_freeze_count() > 100_000)
        """), timeout=120)
        assert run.status == "ok", run.error
        # torch's objects frozen once imported: a full collection, as at exit, skips them
        assert run.stdout.split() == ["[0,", "1,", "2,", "3]", "4", "True"]
        helpers = [child.pid for child in psutil.Process(process.pid).children()]
        assert len(helpers) >= 2  # the forkserver and the resource tracker
    finally:
        kernel.shutdown()
    assert process.wait(timeout=30) == 0  # not ended by a signal
    assert (tmp_path / "exit handlers ran").exists()
    assert [path.name for path in tmp_path.glob("pymp-*")] == []
    assert [pid for pid in helpers if psutil.pid_exists(pid)] == []


def test_a_process_that_started_cuda_another_thread_or_a_running_forkserver_is_not_forked(
        monkeypatch):
    from multiprocessing import forkserver

    monkeypatch.setattr(forkserver._forkserver, "_forkserver_pid", None)
    assert kernel_forkserver.why_not_fork() is None
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    assert kernel_forkserver.why_not_fork() == "CUDA is started in this process"
    assert kernel_forkserver.start([], [], 4) is False
    monkeypatch.undo()
    monkeypatch.setattr(forkserver._forkserver, "_forkserver_pid", os.getpid())
    assert kernel_forkserver.why_not_fork() == "a forkserver runs already"
    monkeypatch.undo()
    reasons = []
    thread = threading.Thread(target=lambda: reasons.append(kernel_forkserver.why_not_fork()))
    thread.start()
    thread.join()
    assert reasons == ["not the main thread"]


def test_a_process_that_loaded_cudas_driver_is_not_forked(tmp_path):
    # torch.cuda.is_available() loads libcuda.so without torch starting CUDA: a stand-in library
    # of that name, loaded the same way
    stand_in = tmp_path / "libcuda.so.1"
    stand_in.write_bytes(Path(_libm()).read_bytes())
    script = textwrap.dedent(f"""
        import ctypes, torch
        from commlab import kernel_forkserver
        print(kernel_forkserver.why_not_fork())
        ctypes.CDLL({str(stand_in)!r})
        print(kernel_forkserver.why_not_fork())
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120)
    assert done.stdout.splitlines() == ["None", "CUDA is started in this process"], done.stderr


def _libm() -> str:
    """The path of the C maths library this process has loaded."""
    with open("/proc/self/maps") as maps:
        return next(line.split()[-1] for line in maps if "/libm.so" in line)


@pytest.mark.parametrize("held", [0, 1536])
def test_a_forkserver_with_more_than_a_gigabyte_keeps_it_in_small_pages(held):
    # moving memory into huge pages copies it, and a kernel's forkserver shares the kernel's
    script = textwrap.dedent(f"""
        import ctypes
        import torch  # loaded before it, as in the forkserver (commlab.processes.PRELOAD)
        asked = []
        class Library:
            def __init__(self, *args, **kwargs):
                def madvise(*args):
                    asked.append(args)
                    return 0
                self.madvise = madvise
        ctypes.CDLL = Library
        held = bytearray({held} << 20)  # mapped, as a kernel's tensors would be
        import commlab.preload_memory  # (its import is what it does: not in this process)
        print(len(asked), commlab.preload_memory.COLLAPSE_AT_MOST)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    asked, at_most = map(int, done.stdout.split())
    assert 0 < at_most < 1536 << 20  # the two cases fall on either side
    assert (asked == 0) == (held << 20 > at_most)
