"""grader/sandboxed/network.py without the sandbox (``--no-sandbox``): a rank's sockets are those
its processes hold, and a connection its listening socket took but it has not accepted yet is
its too. With the sandbox, through test_rankhost.py (the network counts the same calls the same,
sealed or replayed)."""

from __future__ import annotations

import socket
import subprocess
import sys
from types import SimpleNamespace

import pytest

from grader.sandboxed import network

# a rank that listens and never accepts: what a busy rank's gloo thread looks like to the count
LISTENS = ("import socket, time\n"
           "s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(8)\n"
           "print(s.getsockname()[1], flush=True); time.sleep(60)\n")
CONNECTS = ("import socket, sys, time\n"
            "c = socket.create_connection(('127.0.0.1', int(sys.argv[1])))\n"
            "print('connected', flush=True); time.sleep(60)\n")


@pytest.fixture(autouse=True)
def closed_connections():
    """Connections closed a moment ago (TIME_WAIT), as a busy machine has many of: like a
    connection not yet accepted, each is a socket of no process, without an inode."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    for _ in range(8):
        client = socket.create_connection(server.getsockname())
        accepted, _ = server.accept()
        client.close()  # the side that closes first waits in TIME_WAIT
        accepted.close()
    server.close()
    waiting = [line.split() for line in open("/proc/net/tcp").read().splitlines()[1:]]
    assert sum(1 for fields in waiting if fields[3] == "06") >= 8  # 06: TIME_WAIT


@pytest.fixture
def ranks():
    started = []

    def start(code: str, *args: str) -> tuple[subprocess.Popen, str]:
        process = subprocess.Popen([sys.executable, "-c", code, *args], stdout=subprocess.PIPE,
                                   text=True)
        started.append(process)
        return process, process.stdout.readline().strip()

    yield start
    for process in started:
        process.kill()
        process.wait()


def test_a_connection_not_yet_accepted_counts_for_the_rank_that_listens(ranks):
    listener, port = ranks(LISTENS)
    observer = network.Observer(networks=None)
    unused = socket.socket()
    unused.bind(("127.0.0.1", 0))  # a store port that nothing uses
    store_port = unused.getsockname()[1]
    unused.close()
    rank_1 = SimpleNamespace(rank=1, process=SimpleNamespace(pid=listener.pid))
    observer.started([rank_1], store_port)
    before = observer._shared_snapshot("before")
    connector, said = ranks(CONNECTS, port)
    assert said == "connected"
    observer.started([SimpleNamespace(rank=0, process=SimpleNamespace(pid=connector.pid)),
                      rank_1], store_port)
    after = observer._shared_snapshot("after")
    pending = [s for s in after.ranks[1].values() if s.state != network._TCP_LISTEN]
    assert len(pending) == 1 and pending[0].local[1] == int(port), after.ranks
    assert network.window(before, after)["connections"] == {(0, 1): 1}


def test_a_connection_to_the_store_not_yet_accepted_is_the_stores(ranks):
    store = socket.socket()  # the rendezvous store listens in the process that counts
    store.bind(("127.0.0.1", 0))
    store.listen(8)
    try:
        port = store.getsockname()[1]
        connector, said = ranks(CONNECTS, str(port))
        assert said == "connected"
        observer = network.Observer(networks=None)
        observer.started([SimpleNamespace(rank=0, process=SimpleNamespace(pid=connector.pid))],
                         port)
        snapshot = observer._shared_snapshot("after")
        assert [s.local[1] for s in snapshot.store.values()
                if s.state == network._TCP_ESTABLISHED] == [port], snapshot.store
    finally:
        store.close()
