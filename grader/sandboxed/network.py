"""What crossed the sandbox's network during a launch, counted by the kernel, window by window.

The rank host owns the launch (commlab's ``launch.Grading.observer``). Each time every rank
reaches a barrier (commlab's control pipe: before the function runs, before each test case,
after the last one) and once every rank has reported, it takes a snapshot of the sandbox's
network namespace, where only the ranks and this process's rendezvous store live:

- every TCP connection, with the bytes each end received (``tcpi_bytes_received``, read through
  the kernel's ``sock_diag`` netlink interface, as ``ss -ti`` does);
- which process holds each socket (``/proc/<pid>/fd``), so which rank, or the store's server;
- the namespace's own TCP and UDP counters (``/proc/net/snmp``), which count connections that
  were opened and closed between two snapshots, and datagrams.

A window is what changed between two snapshots. Nothing of it comes from a rank: a rank cannot
reach this process, the kernel's counters or another rank's sockets (see
:mod:`grader.sandboxed.seal`). The scoring kernel compares each test case's window with what
the case's trace says moved (:mod:`grader.trusted.evidence`).
"""

from __future__ import annotations

import os
import socket
import struct
from dataclasses import dataclass
from typing import Any

import psutil

from commlab import control

_NETLINK_SOCK_DIAG, _SOCK_DIAG_BY_FAMILY = 4, 20
_NLM_F_REQUEST, _NLM_F_DUMP, _NLMSG_ERROR, _NLMSG_DONE = 1, 0x300, 2, 3
_INET_DIAG_INFO = 2
_TCP_ESTABLISHED = 1
_BYTES_RECEIVED = 128  # offset of tcpi_bytes_received in struct tcp_info


@dataclass(frozen=True)
class Socket:
    """One end of a TCP connection (or a listening socket), as the kernel lists it."""

    inode: int
    state: int
    local: tuple[bytes, int]
    remote: tuple[bytes, int]
    received: int


def tcp_sockets() -> dict[int, Socket]:
    """Every TCP socket of this network namespace, by inode."""
    found: dict[int, Socket] = {}
    for family in (socket.AF_INET, socket.AF_INET6):
        for entry in _dump(family):
            found[entry.inode] = entry
    return found


def _dump(family: int) -> list[Socket]:
    request = struct.pack("BBBxI", family, socket.IPPROTO_TCP, 1 << (_INET_DIAG_INFO - 1),
                          0xFFFFFFFF) + bytes(48)
    header = struct.pack("IHHII", 16 + len(request), _SOCK_DIAG_BY_FAMILY,
                         _NLM_F_REQUEST | _NLM_F_DUMP, 1, 0)
    found = []
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, _NETLINK_SOCK_DIAG) as link:
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


def counters() -> dict[str, int]:
    """This namespace's TCP and UDP counters that a connection or a datagram moves."""
    lines = open("/proc/net/snmp").read().splitlines()
    found = {}
    for names, values in zip(lines[::2], lines[1::2]):
        kind, *keys = names.split()
        _, *numbers = values.split()
        for key, number in zip(keys, numbers):
            found[f"{kind}{key}"] = int(number)
    return {key: found.get(key, 0) for key in ("Tcp:ActiveOpens", "Tcp:AttemptFails",
                                                "Udp:OutDatagrams", "Udp:InDatagrams")}


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
    tag: str
    sockets: dict[int, Socket]
    owner: dict[int, Any]  # inode -> rank, or "store" for this process's sockets
    counters: dict[str, int]
    hidden_owners: list[int]  # ranks whose sockets could not be listed


class Observer:
    """Counts a launch's traffic between its barriers (see the module docstring).

    ``own_namespace``: the sandbox gave this launch a network of its own. Without it (grading
    with ``--no-sandbox``) other processes share the network, so only this launch's own
    connections are counted, and the namespace's counters of connections and datagrams, which
    every process moves, are not used.
    """

    def __init__(self, own_namespace: bool = True) -> None:
        self.own_namespace = own_namespace
        self.snapshots: list[Snapshot] = []
        self.ranks: list[Any] = []

    def started(self, ranks: list[Any], store_port: int) -> None:
        self.ranks = ranks

    def barrier(self, tag: str) -> None:
        if tag.startswith(control.WINDOW):  # other barriers are inside a window
            self.snapshots.append(self._snapshot(tag))

    def reported(self) -> None:
        self.snapshots.append(self._snapshot("reported"))

    def _snapshot(self, tag: str, tries: int = 3) -> Snapshot:
        before = counters()
        owner: dict[int, Any] = dict.fromkeys(_socket_inodes(os.getpid()), "store")
        hidden = []
        for rank in self.ranks:
            pids = _family(rank.process.pid)
            inodes = set().union(*(_socket_inodes(pid) for pid in pids)) if pids else set()
            if len(pids) > 1 and not _readable(pids[-1]):
                hidden.append(rank.rank)
            for inode in inodes:  # the store's sockets stay the store's, whoever inherited them
                owner.setdefault(inode, rank.rank)
        sockets = tcp_sockets()
        after = counters()
        # a connection made while the sockets were listed would fall between two windows
        if after != before and tries > 1:
            return self._snapshot(tag, tries - 1)
        return Snapshot(tag, sockets, owner, after, hidden)

    def windows(self) -> list[dict]:
        """What changed between consecutive snapshots, as plain data (see :func:`window`)."""
        return [window(a, b, self.own_namespace)
                for a, b in zip(self.snapshots, self.snapshots[1:])]


def _family(pid: int) -> list[int]:
    """A rank's process and every process under it (the sealed rank is its child)."""
    try:
        process = psutil.Process(pid)
        return [pid] + [child.pid for child in process.children(recursive=True)]
    except psutil.Error:
        return []


def _readable(pid: int) -> bool:
    try:
        os.listdir(f"/proc/{pid}/fd")
        return True
    except OSError:
        return False


def window(a: Snapshot, b: Snapshot, own_namespace: bool = True) -> dict:
    """The traffic between snapshots ``a`` and ``b``:

    tags: (the barrier that opened it, the one that closed it);
    wire: {(sender, receiver): bytes} between ranks, as the receiving socket counted them;
    store: {rank: bytes} to and from the rendezvous store;
    other: bytes a rank received on connections from neither another rank nor the store;
    opened: connections opened in the window (the kernel's count) that were not still there
        at its end (opened and closed again: uncounted traffic); None without a network of
        the launch's own;
    closed: [(rank, peer)] connections that were there at its start and are gone at its end;
    datagrams: UDP datagrams sent (None without a network of the launch's own);
    unlisted: ranks whose sockets could not be listed (a rank that hid them).
    """
    by_end = {(s.local, s.remote): s for s in b.sockets.values()}
    wire: dict[tuple[int, int], int] = {}
    store: dict[int, int] = {}
    other = 0
    for inode, sock in b.sockets.items():
        if sock.state != _TCP_ESTABLISHED:
            continue
        moved = sock.received - (a.sockets[inode].received if inode in a.sockets else 0)
        peer = by_end.get((sock.remote, sock.local))
        me = b.owner.get(inode)
        them = b.owner.get(peer.inode) if peer is not None else None
        if moved <= 0:
            continue
        if isinstance(me, int) and isinstance(them, int):
            wire[them, me] = wire.get((them, me), 0) + moved
        elif "store" in (me, them) and (isinstance(me, int) or isinstance(them, int)):
            rank = me if isinstance(me, int) else them
            store[rank] = store.get(rank, 0) + moved
        elif isinstance(me, int) or own_namespace:
            other += moved
    new = [s for i, s in b.sockets.items() if i not in a.sockets and s.state == _TCP_ESTABLISHED
           and (s.remote, s.local) in by_end]
    attempts = [b.counters[k] - a.counters[k] for k in ("Tcp:ActiveOpens", "Tcp:AttemptFails")]
    opened = attempts[0] - attempts[1] - len(new) // 2
    closed = sorted({(a.owner.get(i), a.owner.get(_peer_inode(a, s)))
                     for i, s in a.sockets.items() if s.state == _TCP_ESTABLISHED
                     and (i not in b.sockets or b.sockets[i].state != _TCP_ESTABLISHED)},
                    key=str)
    closed = [c for c in closed if own_namespace or isinstance(c[0], int)
              or isinstance(c[1], int)]
    datagrams = b.counters["Udp:OutDatagrams"] - a.counters["Udp:OutDatagrams"]
    return {"tags": (a.tag, b.tag), "wire": wire, "store": store, "other": other,
            "opened": max(opened, 0) if own_namespace else None,
            "closed": [list(c) for c in closed],
            "datagrams": datagrams if own_namespace else None,
            "unlisted": sorted(set(a.hidden_owners) | set(b.hidden_owners))}


def _peer_inode(snap: Snapshot, sock: Socket) -> int | None:
    for inode, other in snap.sockets.items():
        if other.local == sock.remote and other.remote == sock.local:
            return inode
    return None
