"""Each rank's network of its own: made in a namespace as the rank host makes it, joined by a
process as a rank joins it, and gone with the launch."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from grader.course import ROOT
from grader.sandboxed import links, namespaces

# Run in a network namespace of its own (as the rank host is): two ranks' networks, each
# rank's process joins its own, rank 1 listens, rank 0 connects through the bridge.
SCRIPT = r"""
import json, os, socket, sys
sys.path.insert(0, sys.argv[1])
from grader.sandboxed import links, network

links.make_host_network()
nets = links.Networks(2)
seen = {}
ready_r, ready_w = os.pipe()
child = os.fork()
if child == 0:
    nets.join(1)
    server = socket.create_server((links.rank_address(1), 5000))
    os.write(ready_w, b"x")
    peer, where = server.accept()
    peer.sendall(peer.recv(100))
    peer.recv(1)
    os._exit(0)
os.read(ready_r, 1)
outer = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
nets.join(0)
with socket.create_connection((links.rank_address(1), 5000), timeout=5) as client:
    client.sendall(b"hello")
    seen["echo"] = client.recv(100).decode()
    seen["own_table"] = len(open("/proc/self/net/tcp").read().splitlines()) - 1
    rank1 = network.tcp_sockets(nets.diag[1])
    seen["rank1_received"] = max(s.received for s in rank1.values())
    seen["rank1_ends"] = sorted({links.rank_of(s.local[0]) for s in rank1.values()})
os.waitpid(child, 0)
import ctypes
ctypes.CDLL(None).setns(outer, 0x40000000)
seen["opens"] = network.counters(nets.counters(0))["Tcp:ActiveOpens"]
def rank_links():  # this launch's (make_host_network's probe goes in the background too)
    own = nets._outer_name(0).rsplit(".", 1)[0] + "."
    return sorted(n for _, n in socket.if_nameindex() if n.startswith(own))
seen["links_before"] = rank_links()
nets.close()
import time
for _ in range(600):  # the kernel frees a namespace, and its link, in the background: on a
    if not rank_links():  # loaded machine, seconds later
        break
    time.sleep(0.05)
seen["links_after"] = rank_links()
print(json.dumps(seen))
"""


def test_a_ranks_address_names_its_rank_and_no_other():
    assert [links.rank_of(bytes(int(p) for p in links.rank_address(r).split(".")))
            for r in range(4)] == [0, 1, 2, 3]
    assert links.rank_of(bytes((127, 0, 0, 1))) is None
    assert links.rank_of(bytes((10, 77, 0, 254))) is None  # the host's end: the store
    with pytest.raises(ValueError, match="at most 250 ranks"):
        links.rank_address(250)


@pytest.mark.skipif(not namespaces.available(),
                    reason="this machine does not allow user namespaces")
def test_two_ranks_reach_each_other_through_the_bridge_and_see_only_their_own_sockets():
    done = subprocess.run([*namespaces.UNSHARE, sys.executable, "-c", SCRIPT, str(ROOT)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.splitlines()[-1])
    assert seen["echo"] == "hello"
    assert seen["own_table"] == 1  # rank 0 lists its one connection, none of rank 1's
    assert seen["rank1_received"] == 5  # "hello", as rank 1's socket counted it
    assert seen["rank1_ends"] == [1]  # every socket of rank 1's namespace is at its address
    assert seen["opens"] == 1
    assert len(seen["links_before"]) == 2 and seen["links_after"] == []


# Launch after launch, as a rank host makes them, each rank reaches the store: the links of
# earlier launches go away in the background meanwhile, and the bridge must stay where the
# ranks found it.
LAUNCHES = r"""
import fcntl, os, socket, struct, sys, time
sys.path.insert(0, sys.argv[1])
from grader.sandboxed import links


def bridge_address():
    with socket.socket() as sock:  # SIOCGIFHWADDR
        return fcntl.ioctl(sock, 0x8927, struct.pack("256s", links.BRIDGE.encode()))[18:24]


links.make_host_network()
seen = set()
store = socket.create_server((links.HOST_ADDRESS, 6000), backlog=64)
store.settimeout(5)
for launch in range(25):
    nets = links.Networks(4)
    ranks = []
    for rank in range(4):
        pid = os.fork()
        if pid == 0:
            nets.join(rank)
            with socket.create_connection((links.HOST_ADDRESS, 6000), timeout=5) as client:
                client.sendall(b"x")
                os._exit(0 if client.recv(1) == b"y" else 1)
        ranks.append(pid)
    seen.add(bridge_address())
    for _ in range(4):
        peer, _ = store.accept()
        peer.settimeout(5)
        peer.recv(1)
        peer.sendall(b"y")
        peer.close()
    if any(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid in ranks):
        sys.exit(f"a rank of launch {launch} did not hear back from the store")
    nets.close()
    time.sleep(0.05)  # the host's work between launches, while the kernel frees the last
if len(seen) > 1:
    sys.exit(f"the bridge changed its address as links came and went: {len(seen)} addresses")
print("every launch reached the store")
"""


@pytest.mark.skipif(not namespaces.available(),
                    reason="this machine does not allow user namespaces")
def test_launch_after_launch_every_rank_reaches_the_store():
    done = subprocess.run([*namespaces.UNSHARE, sys.executable, "-c", LAUNCHES, str(ROOT)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "every launch reached the store" in done.stdout
