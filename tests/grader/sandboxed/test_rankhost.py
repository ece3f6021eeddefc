"""The rank host: a submission's ranks are sealed; the grader's own replays are only tidied,
and the network counts the same calls the same either way."""

from __future__ import annotations

import sys

import cloudpickle
import pytest

from commlab import launch
from grader.sandboxed import namespaces
from grader.sandboxed import replay as replaying
from grader.trusted import evidence, scoring_kernel

pytestmark = pytest.mark.skipif(not namespaces.available(),
                                reason="this machine does not allow user namespaces")
# the ranks' functions below travel by value: the ranks cannot import this file
cloudpickle.register_pickle_by_value(sys.modules[__name__])


@pytest.fixture()
def host(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    started = scoring_kernel.RankHost(namespaces.plan(work, namespaces.hidden_paths([])))
    yield started
    started.stop()


def test_a_launch_is_sealed_and_the_graders_own_code_is_not(host):
    def where_am_i(rank: int, world_size: int) -> tuple[str, str]:
        """This process's system-call filter mode and mount namespace (a function of the
        test's own, so that it travels by value)."""
        import os

        status = dict(line.split(":", 1) for line in open("/proc/self/status").read()
                      .splitlines() if ":" in line)
        return status["Seccomp"].strip(), os.readlink("/proc/self/ns/mnt")

    sealed = host.launch(launch._pickle_function(where_am_i, ()), 2, backend="gloo",
                         timeout=30, init_process_group=True, debug=False, trace_values=True)
    own = host.launch_own(where_am_i, 2, timeout=30)
    # a sealed rank has its filter (mode 2) and a mount namespace of its own
    assert [mode for mode, _ in sealed.returns] == ["2", "2"]
    assert len({space for _, space in sealed.returns}) == 2
    assert [mode for mode, _ in own.returns] == ["0", "0"]
    assert len({space for _, space in own.returns}) == 1


def test_a_replay_counts_what_sealed_ranks_making_the_same_calls_count(host):
    steps = [[{"op": "all_reduce", "group": [], "root": None, "reduce_op": "SUM",
               "async_op": False, "tensors": {"tensor": ((64,), "float32")},
               "split_sizes": None, "ops": None},
              {"op": "broadcast", "group": [], "root": 1, "reduce_op": None,
               "async_op": False, "tensors": {"tensor": ((32,), "float64")},
               "split_sizes": None, "ops": None}] for _ in range(3)]
    sealed = host.launch(launch._pickle_function(replaying.replay, ([steps],)), 3,
                         backend="gloo", timeout=30, init_process_group=True, debug=False,
                         trace_values=True)
    own = host.launch_own(replaying.replay, 3, args=([steps],), timeout=30)

    def case(result) -> dict:
        return evidence._merged([w for w in result.network
                                 if str(w["tags"][0]).endswith("case 0")])

    counted, replayed = case(sealed), case(own)
    assert counted["wire"], "the sealed ranks' all_reduce and broadcast were not counted"
    room = {pair: 2 * evidence.SLACK_PER_CALL for pair in counted["wire"]}
    assert evidence.differences(counted, [replayed], room) == []


def _listening_ports(rank: int, world_size: int, *_) -> list[int]:
    """Listen on a port named after this rank, wait for every rank to do so, and return every
    port this rank can see listened on (the socket table, as a student's code would read it)."""
    import socket
    import time

    import torch.distributed as dist

    own = socket.create_server(("0.0.0.0", 40000 + rank))
    dist.barrier()
    time.sleep(0.2)
    ports = sorted(int(line.split()[1].split(":")[1], 16)
                   for line in open("/proc/net/tcp").read().splitlines()[1:]
                   if line.split()[3] == "0A")
    own.close()
    return ports


def test_a_rank_sees_no_socket_of_another_rank(host):
    sealed = host.launch(launch._pickle_function(_listening_ports, ()), 3, backend="gloo",
                         timeout=30, init_process_group=True, debug=False, trace_values=True)
    for rank, ports in enumerate(sealed.returns):
        assert 40000 + rank in ports
        assert not {40000 + other for other in range(3) if other != rank} & set(ports), ports


def _own_connection(rank: int, world_size: int, *_) -> int:
    """Rank 0 listens on a port of its own at its address, rank 1 connects and sends 1000
    bytes: a channel beside the process group's, kept open past the case."""
    import builtins
    import socket
    import time

    import torch.distributed as dist

    address = socket.inet_ntoa(bytes([10, 77, 0, 1]))  # rank 0, as any rank can work out
    if rank == 0:
        server = socket.create_server((address, 41000))
        dist.barrier()
        peer, _ = server.accept()
        got = b""
        while len(got) < 1000:
            got += peer.recv(1000)
        builtins.kept = (server, peer)
        dist.barrier()
        return len(got)
    dist.barrier()
    if rank == 1:
        client = socket.create_connection((address, 41000), timeout=5)
        client.sendall(bytes(1000))
        builtins.kept = client
        time.sleep(0.2)
    dist.barrier()
    return 0


def _case_windows(result) -> dict:
    return evidence._merged([w for w in result.network if str(w["tags"][0]).endswith("case 0")])


def test_a_connection_and_a_port_of_the_ranks_own_are_counted_as_theirs(host):
    from commlab import checks

    sealed = host.launch(launch._pickle_function(
        checks._run_batch, (_own_connection, [(0, (), {})])), 3, backend="gloo", timeout=30,
        init_process_group=True, debug=False, trace_values=True)
    counted = _case_windows(sealed)
    assert counted["connections"] == {(0, 1): 1}
    assert counted["listening"] == {0: 1}
    assert counted["wire"].get((1, 0), 0) >= 1000
    nothing = evidence._merged([])
    said = evidence.own_channels(counted, nothing)
    assert said == ["1 connection(s) opened between rank 0 and rank 1, where the calls your "
                    "trace lists open 0", "rank 0 listened on 1 port(s) of its own"]


def test_a_group_made_in_a_case_opens_what_its_replay_opens(host):
    steps = [[{"op": "new_group", "group": [0, 1], "root": None, "reduce_op": None,
               "async_op": False, "tensors": {}, "split_sizes": None, "ops": None}]
             for _ in range(3)]
    sealed = host.launch(launch._pickle_function(replaying.replay, ([steps],)), 3,
                         backend="gloo", timeout=30, init_process_group=True, debug=False,
                         trace_values=True)
    own = host.launch_own(replaying.replay, 3, args=([steps],), timeout=30)
    counted, replayed = _case_windows(sealed), _case_windows(own)
    assert counted["connections"], "the new group's connections were not counted"
    assert evidence.own_channels(counted, replayed) == []


def _leaves_connections(rank: int, world_size: int, *_) -> None:
    """Leave what a later launch could read: a connection waiting to close (the side that
    closes first keeps it for a minute), and a process that outlives the rank, listening."""
    import os
    import socket
    import time

    server = socket.create_server((f"127.88.{rank}.1", 3000 + rank))
    client = socket.create_connection((f"127.88.{rank}.1", 3000 + rank))
    accepted, _ = server.accept()
    client.close()  # first: the client's end waits to close
    time.sleep(0.05)
    accepted.close()
    if os.fork() == 0:
        os.setsid()
        time.sleep(60)
        os._exit(0)


def _what_is_left(rank: int, world_size: int, *_) -> list[str]:
    """Every socket in the table this rank can read at an address an earlier launch used."""
    import socket
    import struct

    found = []
    for line in open("/proc/net/tcp").read().splitlines()[1:]:
        for end in line.split()[1:3]:
            address = socket.inet_ntoa(struct.pack("<I", int(end.split(":")[0], 16)))
            if address.startswith("127.88."):
                found.append(f"{address} in state {line.split()[3]}")
    return found


def test_nothing_of_a_launchs_network_reaches_the_next(host):
    host.launch(launch._pickle_function(_leaves_connections, ()), 2, backend="gloo", timeout=30,
                init_process_group=True, debug=False, trace_values=True)
    later = host.launch(launch._pickle_function(_what_is_left, ()), 2, backend="gloo",
                        timeout=30, init_process_group=True, debug=False, trace_values=True)
    assert later.returns == [[], []]


def test_the_ranks_are_stopped_before_the_last_count():
    """Every process of a rank, its children too, is stopped before the count that ends a
    launch: nothing of theirs runs after it."""
    import subprocess
    import time

    import psutil

    from grader.sandboxed import network

    parent = subprocess.Popen([sys.executable, "-c", "import subprocess, sys, time; "
                               "subprocess.Popen([sys.executable, '-c', 'import time; "
                               "time.sleep(60)']); time.sleep(60)"])
    process = psutil.Process(parent.pid)
    try:
        for _ in range(200):
            if process.children():
                break
            time.sleep(0.05)
        network._freeze([parent.pid])
        tree = [process, *process.children(recursive=True)]
        assert len(tree) == 2
        assert {p.status() for p in tree} == {psutil.STATUS_STOPPED}
    finally:
        for child in process.children(recursive=True):
            child.kill()
        parent.kill()
        parent.wait()
