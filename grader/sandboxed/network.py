"""What crossed the sandbox's network during a launch, counted by the kernel, window by window.

The rank host owns the launch (commlab's ``launch.Grading.observer``). Each time every rank
reaches a barrier (commlab's control pipe: before the function runs, before each test case,
after the last one) and once every rank has reported, it takes a snapshot of each rank's own
network namespace (:mod:`.links`: a rank sees nothing of another's) and of its own, where the
rendezvous store listens:

- every TCP socket of each rank's namespace, so every socket of the rank, whatever process
  holds it or whoever opened it, with the bytes it received (``tcpi_bytes_received``, read
  through the kernel's ``sock_diag`` netlink interface, as ``ss -ti`` does), and those it
  listens on;
- the store server's sockets, with the bytes each received from a rank;
- the namespaces' own counters (``/proc/net/snmp``), which count connections that were opened
  or tried and closed between two snapshots, and datagrams.

A window is what changed between two snapshots. Nothing of it comes from a rank: a rank cannot
reach this process, the kernel's counters or another rank's namespace (see
:mod:`grader.sandboxed.seal`). The scoring kernel compares each test case's window with what
the case's trace says moved (:mod:`grader.trusted.evidence`).
"""

from __future__ import annotations

import os
import signal
import socket
import struct
import time
from dataclasses import dataclass
from typing import Any

import psutil

from commlab import control

_NETLINK_SOCK_DIAG, _SOCK_DIAG_BY_FAMILY = 4, 20
_NLM_F_REQUEST, _NLM_F_DUMP, _NLMSG_ERROR, _NLMSG_DONE = 1, 0x300, 2, 3
_INET_DIAG_INFO = 2
_TCP_ESTABLISHED, _TCP_LISTEN = 1, 10
# Every state a socket with a connection or a port can be in (ESTABLISHED to CLOSING), not the
# kernel's "bound, inactive" state: listing that walks the machine's table of bound ports, about
# half a millisecond a listing, for sockets that move nothing.
_STATES = 0xFFE
_BYTES_RECEIVED = 128  # offset of tcpi_bytes_received in struct tcp_info


@dataclass(frozen=True)
class Socket:
    """One end of a TCP connection (or a listening socket), as the kernel lists it."""

    inode: int
    state: int
    local: tuple[bytes, int]
    remote: tuple[bytes, int]
    received: int

    @property
    def key(self) -> tuple:
        """What names the socket from one listing to the next: its two ends. Not its inode: a
        connection waiting in a listener's queue, not yet accepted, has none (0, as every socket
        without a file has, closed ones too), and gets one only when a process accepts it."""
        return self.local, self.remote


def tcp_sockets(link: socket.socket | None = None) -> dict[tuple, Socket]:
    """Every TCP socket of a network namespace, by :attr:`Socket.key`: the namespace ``link``
    (a ``sock_diag`` netlink socket) was made in, else this thread's."""
    found: dict[tuple, Socket] = {}
    for family in (socket.AF_INET, socket.AF_INET6):
        if link is None:
            with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, _NETLINK_SOCK_DIAG) as own:
                entries = _dump(family, own)
        else:
            entries = _dump(family, link)
        for entry in entries:
            found[entry.key] = entry
    return found


def _dump(family: int, link: socket.socket) -> list[Socket]:
    request = struct.pack("BBBxI", family, socket.IPPROTO_TCP, 1 << (_INET_DIAG_INFO - 1),
                          _STATES) + bytes(48)
    header = struct.pack("IHHII", 16 + len(request), _SOCK_DIAG_BY_FAMILY,
                         _NLM_F_REQUEST | _NLM_F_DUMP, 1, 0)
    found = []
    link.send(header + request)
    while True:
        data = link.recv(1 << 17)
        offset = 0
        while offset < len(data):
            length, kind = struct.unpack_from("IH", data, offset)
            if kind == _NLMSG_DONE:
                return found
            if kind == _NLMSG_ERROR:
                raise OSError("the kernel refused to list the sandbox's sockets")
            found.append(_entry(data[offset + 16:offset + length]))
            offset += (length + 3) & ~3


def _entry(body: bytes) -> Socket:
    """An ``inet_diag_msg`` and its ``INET_DIAG_INFO`` attribute."""
    family, state = struct.unpack_from("BB", body, 0)
    sport, dport = struct.unpack_from("!HH", body, 4)
    width = 4 if family == socket.AF_INET else 16
    source, destination = body[8:8 + width], body[24:24 + width]
    (inode,) = struct.unpack_from("I", body, 68)
    received, offset = 0, 72
    while offset + 4 <= len(body):
        length, kind = struct.unpack_from("HH", body, offset)
        if length < 4:
            break
        if kind == _INET_DIAG_INFO and length - 4 >= _BYTES_RECEIVED + 8:
            (received,) = struct.unpack_from("Q", body, offset + 4 + _BYTES_RECEIVED)
        offset += (length + 3) & ~3
    return Socket(inode, state, (_v4(source), sport), (_v4(destination), dport), received)


def _v4(address: bytes) -> bytes:
    """An IPv4-mapped IPv6 address as the IPv4 one, so that both ends of a connection match."""
    if len(address) == 16 and address[:12] == bytes(10) + b"\xff\xff":
        return address[12:]
    return address


# The counters of a namespace that a connection, an attempt at one or a datagram moves.
COUNTED = ("Tcp:ActiveOpens", "Tcp:PassiveOpens", "Udp:OutDatagrams", "UdpLite:OutDatagrams",
           "Icmp:OutMsgs")


def counters(snmp: str | None = None) -> dict[str, int]:
    """A namespace's :data:`COUNTED` counters, from its ``/proc/net/snmp`` (this process's when
    ``snmp`` is None)."""
    lines = (snmp if snmp is not None else open("/proc/net/snmp").read()).splitlines()
    found = {}
    for names, values in zip(lines[::2], lines[1::2]):
        kind, *keys = names.split()
        _, *numbers = values.split()
        for key, number in zip(keys, numbers):
            found[f"{kind}{key}"] = int(number)
    return {key: found.get(key, 0) for key in COUNTED}


def _socket_inodes(pid: int) -> set[int]:
    inodes = set()
    try:
        names = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return inodes
    for name in names:
        try:
            link = os.readlink(f"/proc/{pid}/fd/{name}")
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(int(link[8:-1]))
    return inodes


@dataclass
class Snapshot:
    """The network at one barrier: each rank's sockets (by :attr:`Socket.key`), the store
    server's, and the counters of the ranks' namespaces together (None: they share the
    machine's)."""

    tag: str
    ranks: dict[int, dict[tuple, Socket]]
    store: dict[tuple, Socket]
    counters: dict[str, int] | None


class Observer:
    """Counts a launch's traffic between its barriers (see the module docstring).

    ``networks``: the launch's rank networks (:class:`grader.sandboxed.links.Networks`), where
    each rank's sockets and counters are its namespace's. None (grading with ``--no-sandbox``):
    the ranks share the machine's network with every other process, so a rank's sockets are those
    its processes hold, and the namespace's counters, which every process moves, are not used.
    """

    def __init__(self, networks: Any = None) -> None:
        self.networks = networks
        self.snapshots: list[Snapshot] = []
        self.ranks: list[Any] = []
        self.store_port = 0

    def started(self, ranks: list[Any], store_port: int) -> None:
        self.ranks = ranks
        self.store_port = store_port

    def barrier(self, tag: str) -> None:
        if tag.startswith(control.WINDOW):  # other barriers are inside a window
            self.snapshots.append(self._snapshot(tag))

    def reported(self) -> None:
        """Every rank reported: stop them where they are, then take the last count. No code of
        the submission runs after it (the launch kills the ranks next), so nothing it sends
        after its report goes uncounted into what it printed."""
        _freeze([rank.process.pid for rank in self.ranks])
        self.snapshots.append(self._snapshot("reported"))

    def _snapshot(self, tag: str, tries: int = 3) -> Snapshot:
        if self.networks is None:
            return self._shared_snapshot(tag)
        before = self._counters()
        ranks = {rank: tcp_sockets(link) for rank, link in enumerate(self.networks.diag)}
        after = self._counters()
        # a connection made while the sockets were listed would fall between two windows
        if after != before and tries > 1:
            return self._snapshot(tag, tries - 1)
        store = {k: s for k, s in tcp_sockets().items() if s.local[1] == self.store_port}
        return Snapshot(tag, ranks, store, after)

    def _counters(self) -> dict[str, int]:
        total = dict.fromkeys(COUNTED, 0)
        for rank in range(len(self.networks.namespaces)):
            for key, value in counters(self.networks.counters(rank)).items():
                total[key] += value
        return total

    def _shared_snapshot(self, tag: str) -> Snapshot:
        every = tcp_sockets()
        by_inode = {sock.inode: sock for sock in every.values() if sock.inode}
        held = _socket_inodes(os.getpid())
        store = {by_inode[i].key: by_inode[i] for i in held
                 if i in by_inode and by_inode[i].local[1] == self.store_port}
        ranks: dict[int, dict[tuple, Socket]] = {}
        for rank in self.ranks:
            inodes = set().union(*(_socket_inodes(pid) for pid in _family(rank.process.pid)))
            # the store's sockets stay the store's, whoever inherited them
            ranks[rank.rank] = {by_inode[i].key: by_inode[i] for i in inodes - held
                                if i in by_inode}
        _add_pending(every, ranks, store, self.store_port)
        return Snapshot(tag, ranks, store, None)

    def windows(self) -> list[dict]:
        """What changed between consecutive snapshots, as plain data (see :func:`window`)."""
        return [window(a, b) for a, b in zip(self.snapshots, self.snapshots[1:])]


def _add_pending(every: dict[tuple, Socket], ranks: dict[int, dict[tuple, Socket]],
                 store: dict[tuple, Socket], store_port: int) -> None:
    """Give each connection that no process holds yet to the rank, or the store, whose
    listening socket took it. A connection is established before the side that listens accepts
    it, and until then it waits in the listener's queue, in no process's file table (without
    an inode): on a busy machine a rank's gloo thread accepts late, and the connection was
    counted on one side only (an honest answer's "1 connection opened between rank 2 and rank
    3, where the calls open 2"). Such a connection has the port of the socket that listens for
    it, and keeps its key once accepted."""
    listeners = {sock.local[1]: rank for rank, sockets in ranks.items()
                 for sock in sockets.values() if sock.state == _TCP_LISTEN}
    for key, sock in every.items():
        if sock.inode or sock.state != _TCP_ESTABLISHED:
            continue
        if sock.local[1] == store_port:
            store[key] = sock
        elif sock.local[1] in listeners:
            ranks[listeners[sock.local[1]]][key] = sock


def _family(pid: int) -> list[int]:
    """A rank's process and every process under it (the sealed rank is its child)."""
    try:
        process = psutil.Process(pid)
        return [pid] + [child.pid for child in process.children(recursive=True)]
    except psutil.Error:
        return []


# How long a stopped process may take to be seen stopped, at most (a loaded machine schedules
# it late; the count waits for it rather than run beside it)
STOP_WAIT = 2.0


def _freeze(pids: list[int], rounds: int = 5) -> None:
    """SIGSTOP every process of the ranks, and wait until each is stopped (a signal takes
    effect when its process next runs, which on a loaded machine is later: until then it still
    runs, and may fork); again until no new one shows."""
    stopped: set[int] = set()
    for _ in range(rounds):
        found = {pid for first in pids for pid in _family(first)} - stopped
        if not found:
            return
        for pid in found:
            try:
                os.kill(pid, signal.SIGSTOP)
            except ProcessLookupError:
                pass
        _until_stopped(found)
        stopped |= found


def _until_stopped(pids: set[int]) -> None:
    deadline = time.monotonic() + STOP_WAIT
    while pids and time.monotonic() < deadline:
        pids = {pid for pid in pids if not _stopped(pid)}
        if pids:
            time.sleep(0.001)


def _stopped(pid: int) -> bool:
    """Whether the process is stopped, or gone (it runs nothing more either way)."""
    try:
        return psutil.Process(pid).status() in _STILL
    except psutil.Error:
        return True


_STILL = (psutil.STATUS_STOPPED, psutil.STATUS_TRACING_STOP, psutil.STATUS_ZOMBIE,
          psutil.STATUS_DEAD)


def _where(snap: Snapshot) -> dict[tuple[bytes, int], Any]:
    """Each end a rank or the store holds, and whose it is."""
    found: dict[tuple[bytes, int], Any] = {}
    for rank, sockets in snap.ranks.items():
        for sock in sockets.values():
            found[sock.local] = rank
    for sock in snap.store.values():
        found[sock.local] = "store"
    return found


def window(a: Snapshot, b: Snapshot) -> dict:
    """The traffic between snapshots ``a`` and ``b``:

    tags: (the barrier that opened it, the one that closed it);
    wire: {(sender, receiver): bytes} between ranks, as the receiving socket counted them;
    store: {rank: bytes} to and from the rendezvous store;
    other: bytes a rank received on connections from neither another rank nor the store;
    connections: {(rank, rank): connections between the two opened in the window and still
        there at its end}, the lower rank first;
    listening: {rank: sockets it started listening on in the window};
    opened: connections opened or tried in the window (the kernel's count) that were not there
        at its end (opened and closed again, or refused: uncounted traffic); None without
        networks of the launch's own;
    closed: [(rank, peer)] connections that were there at its start and are gone at its end;
    datagrams: datagrams sent (UDP and ICMP; None without networks of the launch's own).
    """
    where = {**_where(a), **_where(b)}
    wire: dict[tuple[int, int], int] = {}
    store: dict[int, int] = {}
    connections: dict[tuple[int, int], int] = {}
    listening: dict[int, int] = {}
    other, new = 0, 0
    for rank, sockets in b.ranks.items():
        before = a.ranks.get(rank, {})
        for key, sock in sockets.items():
            if sock.state == _TCP_LISTEN and key not in before:
                listening[rank] = listening.get(rank, 0) + 1
            if sock.state != _TCP_ESTABLISHED:
                continue
            peer = where.get(sock.remote)
            if key not in before:
                new += 1
                if isinstance(peer, int) and rank < peer:
                    connections[rank, peer] = connections.get((rank, peer), 0) + 1
            moved = sock.received - (before[key].received if key in before else 0)
            if moved <= 0:
                continue
            if isinstance(peer, int):
                wire[peer, rank] = wire.get((peer, rank), 0) + moved
            elif peer == "store":
                store[rank] = store.get(rank, 0) + moved
            else:
                other += moved
    for key, sock in b.store.items():
        rank = where.get(sock.remote)
        moved = sock.received - (a.store[key].received if key in a.store else 0)
        if sock.state == _TCP_ESTABLISHED and isinstance(rank, int) and moved > 0:
            store[rank] = store.get(rank, 0) + moved
    closed = sorted({(rank, where.get(sock.remote)) for rank, sockets in a.ranks.items()
                     for key, sock in sockets.items() if sock.state == _TCP_ESTABLISHED
                     and b.ranks.get(rank, {}).get(key, _GONE).state != _TCP_ESTABLISHED},
                    key=str)
    counted = a.counters is not None and b.counters is not None
    opens = (b.counters["Tcp:ActiveOpens"] + b.counters["Tcp:PassiveOpens"]
             - a.counters["Tcp:ActiveOpens"] - a.counters["Tcp:PassiveOpens"]) if counted else 0
    datagrams = sum(b.counters[k] - a.counters[k] for k in COUNTED[2:]) if counted else 0
    return {"tags": (a.tag, b.tag), "wire": wire, "store": store, "other": other,
            "connections": connections, "listening": listening,
            "opened": max(opens - new, 0) if counted else None,
            "closed": [list(c) for c in closed],
            "datagrams": datagrams if counted else None}


_GONE = Socket(0, 0, (b"", 0), (b"", 0), 0)
