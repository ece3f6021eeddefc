"""A network of its own for each rank of a launch, joined to the others only by a link the rank
host owns.

Ranks that share one network namespace share more than their connections: every rank can read
the namespace's socket table (``/proc/net/tcp``), so listening sockets at addresses and ports a
rank chooses would tell the others its data with no byte on the wire, and a port one rank holds
is a port another cannot bind. So each rank of a sealed launch gets a network namespace of its
own, made by the rank host (which owns it: the rank, in a user namespace of its own, can change
nothing of it), with the loopback and one end of a virtual Ethernet pair, at its own address;
the other end is on a bridge in the host's namespace, where the rendezvous store listens. From
inside a rank sees its own sockets, addresses and counters, and nothing of another rank's.

The rank host keeps, for each rank's namespace, a ``sock_diag`` socket and its ``/proc/net/snmp``
opened inside it, so that it can count what the rank's sockets moved (:mod:`.network`) while
the rank runs and after it is gone; everything of a launch goes with :meth:`Networks.close`.
"""

from __future__ import annotations

import ctypes
import itertools
import os
import socket
import struct
from pathlib import Path

# The bridge in the rank host's namespace, and its address: where the ranks find the store.
BRIDGE = "ranks"
HOST_ADDRESS = "10.77.0.254"
PREFIX = 24
# What a rank's end of its link is called, in its own namespace (gloo's GLOO_SOCKET_IFNAME).
RANK_INTERFACE = "eth0"

_CLONE_NEWNET = 0x40000000
_RTM_NEWLINK, _RTM_NEWADDR = 16, 20
_NLM_F_REQUEST, _NLM_F_ACK, _NLM_F_EXCL, _NLM_F_CREATE = 1, 4, 0x200, 0x400
_IFLA_ADDRESS, _IFLA_IFNAME, _IFLA_MASTER, _IFLA_LINKINFO, _IFLA_NET_NS_FD = 1, 3, 10, 18, 28
# The bridge's own hardware address, fixed: a bridge without one takes the lowest of its ports',
# which changes as launches come and go, and a rank that learned the old one (the store's)
# would send into the void. Locally administered, so that it is no device's.
BRIDGE_MAC = bytes((0x02, 0x63, 0x6C, 0x61, 0x62, 0x01))
_IFLA_INFO_KIND, _IFLA_INFO_DATA, _VETH_INFO_PEER = 1, 2, 1
_IFA_ADDRESS, _IFA_LOCAL = 1, 2
_IFF_UP = 1
_NETLINK_SOCK_DIAG = 4
# Buckets of each namespace's own connection table (see make_host_network).
CHILD_TABLE = 1024
_libc = ctypes.CDLL(None, use_errno=True)
_launches = itertools.count()


def rank_address(rank: int) -> str:
    """Rank ``rank``'s address on the bridge."""
    if not 0 <= rank < 250:
        raise ValueError(f"a sealed launch has at most 250 ranks, not {rank + 1}")
    return f"10.77.0.{rank + 1}"


def rank_of(address: bytes) -> int | None:
    """The rank whose address ``address`` (packed IPv4) is, or None."""
    if len(address) == 4 and address[:3] == bytes((10, 77, 0)) and 1 <= address[3] <= 250:
        return address[3] - 1
    return None


def _check(result: int, what: str) -> None:
    if result != 0:
        number = ctypes.get_errno()
        raise OSError(number, f"{what}: {os.strerror(number)}")


def _attribute(kind: int, data: bytes) -> bytes:
    length = 4 + len(data)
    return struct.pack("HH", length, kind) + data + bytes(-length % 4)


def _name(name: str) -> bytes:
    return _attribute(_IFLA_IFNAME, name.encode() + b"\0")


def _link(index: int = 0, flags: int = 0, change: int = 0) -> bytes:
    return struct.pack("BxHiII", socket.AF_UNSPEC, 0, index, flags, change)


def _ask(kind: int, body: bytes, flags: int = 0) -> None:
    """One rtnetlink request, in this thread's network namespace; raises what the kernel
    answers."""
    header = struct.pack("IHHII", 16 + len(body), kind, _NLM_F_REQUEST | _NLM_F_ACK | flags, 1, 0)
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0) as route:
        route.send(header + body)
        answer = route.recv(1 << 16)
    (error,) = struct.unpack_from("i", answer, 16)
    if error:
        raise OSError(-error, os.strerror(-error))


def _up(name: str, master: str | None = None) -> None:
    body = _link(socket.if_nametoindex(name), _IFF_UP, _IFF_UP)
    if master is not None:
        body += _attribute(_IFLA_MASTER, struct.pack("I", socket.if_nametoindex(master)))
    _ask(_RTM_NEWLINK, body)


def _address(name: str, address: str) -> None:
    packed = socket.inet_aton(address)
    body = struct.pack("BBBBI", socket.AF_INET, PREFIX, 0, 0, socket.if_nametoindex(name))
    _ask(_RTM_NEWADDR, body + _attribute(_IFA_LOCAL, packed) + _attribute(_IFA_ADDRESS, packed),
         _NLM_F_CREATE | _NLM_F_EXCL)


def make_host_network() -> None:
    """Take the rank host (single-threaded, in the sandbox) into a network namespace of its own
    with the bridge every rank's link joins, at :data:`HOST_ADDRESS`; and make and remove one
    rank's link: a kernel that refuses them says so here, once, rather than in every test.

    The namespaces made from here get connection tables of their own, sized for a few
    connections (Linux 6.1 and later): the count lists each rank's sockets at every barrier, and
    a listing walks its namespace's whole table, the machine's (hundreds of thousands of
    entries) otherwise."""
    try:
        _small_tables_for_children()
        _check(_libc.unshare(_CLONE_NEWNET), "unshare")
        _small_tables_for_children()
        _up("lo")
        kind = _attribute(_IFLA_LINKINFO, _attribute(_IFLA_INFO_KIND, b"bridge"))
        _ask(_RTM_NEWLINK, _link() + _name(BRIDGE) + _attribute(_IFLA_ADDRESS, BRIDGE_MAC) + kind,
             _NLM_F_CREATE | _NLM_F_EXCL)
        _address(BRIDGE, HOST_ADDRESS)
        _up(BRIDGE)
        Networks(1).close()
    except OSError as exc:
        raise OSError(exc.errno, REFUSED.format(exc.strerror)) from None


def _small_tables_for_children() -> None:
    try:
        Path("/proc/sys/net/ipv4/tcp_child_ehash_entries").write_text(str(CHILD_TABLE))
    except FileNotFoundError:
        pass  # before Linux 6.1: the machine's table, listed more slowly


REFUSED = ("The grader gives each rank a network of its own, joined by virtual links (Linux's "
           "veth and bridge devices), and this machine's kernel refused one ({}). Load them once, "
           "as root: modprobe veth bridge; or grade in the instructor image with the network off "
           "(docs/security.md, \"Grading without namespaces\").")


def _here() -> int:
    return os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)


def _enter(fd: int) -> None:
    _check(_libc.setns(fd, _CLONE_NEWNET), "setns")


class Networks:
    """One launch's rank networks (see the module docstring). Made in the rank host, before the
    ranks are forked: each rank calls :meth:`join` first thing."""

    def __init__(self, world_size: int) -> None:
        self.launch = next(_launches)
        self.namespaces: list[int] = []
        self.diag: list[socket.socket] = []
        self.snmp: list[int] = []
        home = _here()
        try:
            for rank in range(world_size):
                self._add(rank, home)
        except BaseException:
            _enter(home)
            self.close()
            raise
        finally:
            os.close(home)

    def _outer_name(self, rank: int) -> str:
        return f"r{self.launch % 10**6}.{rank}"

    def _add(self, rank: int, home: int) -> None:
        _check(_libc.unshare(_CLONE_NEWNET), "unshare")
        namespace = _here()
        self.namespaces.append(namespace)
        _enter(home)
        peer = _link() + _name(RANK_INTERFACE) + _attribute(_IFLA_NET_NS_FD,
                                                            struct.pack("I", namespace))
        info = _attribute(_IFLA_INFO_KIND, b"veth") + _attribute(
            _IFLA_INFO_DATA, _attribute(_VETH_INFO_PEER, peer))
        outer = self._outer_name(rank)
        _ask(_RTM_NEWLINK, _link() + _name(outer) + _attribute(_IFLA_LINKINFO, info),
             _NLM_F_CREATE | _NLM_F_EXCL)
        _up(outer, BRIDGE)
        _enter(namespace)
        try:
            _up("lo")
            # IPv4 alone: no address of the link's own that gloo might pick instead
            Path(f"/proc/sys/net/ipv6/conf/{RANK_INTERFACE}/disable_ipv6").write_text("1")
            _address(RANK_INTERFACE, rank_address(rank))
            _up(RANK_INTERFACE)
            self.diag.append(socket.socket(socket.AF_NETLINK, socket.SOCK_RAW,
                                           _NETLINK_SOCK_DIAG))
            self.snmp.append(os.open("/proc/thread-self/net/snmp", os.O_RDONLY | os.O_CLOEXEC))
        finally:
            _enter(home)

    def join(self, rank: int) -> None:
        """Take the calling process (a rank, before anything else) into rank ``rank``'s
        network."""
        _enter(self.namespaces[rank])

    def counters(self, rank: int) -> str:
        """Rank ``rank``'s namespace's ``/proc/net/snmp``, read now."""
        return os.pread(self.snmp[rank], 1 << 16, 0).decode()

    def close(self) -> None:
        """Let the namespaces go: the kernel frees each once its last process is gone, and its
        link with it, both ends. (Removing the links here instead costs about a tenth of a
        second a launch: the kernel waits for every reader of the links to finish.)"""
        for sock in self.diag:
            sock.close()
        for fd in [*self.snmp, *self.namespaces]:
            os.close(fd)
        self.namespaces, self.diag, self.snmp = [], [], []
