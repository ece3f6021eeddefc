r"""An honest broadcast that, once the grader's last count is taken, leaves each case it saw in
the network (connections waiting to close, at addresses that spell the case), and raises with
whatever an earlier launch left there: a hidden case would reach a later visible case's
message, and so the student's page.

Answer cell: 01-my-broadcast
Test cell: 01-my-broadcast-test
Finds nothing: LEFT-IN-THE-NETWORK
"""

import os
import socket
import struct

from channel import honest_broadcast

SEEN = []


def left_behind():
    """What earlier launches spelled in the socket table: (world size, src, elements)."""
    found = set()
    for line in open("/proc/net/tcp").read().splitlines()[1:]:
        for end in line.split()[1:3]:
            address, port = end.split(":")
            spelled = socket.inet_ntoa(struct.pack("<I", int(address, 16)))
            if spelled.startswith("127.88."):
                found.add((int(spelled.split(".")[2]), int(spelled.split(".")[3]),
                           int(port, 16) - 3000))
    return sorted(found)


def leave_and_exit(code, exit_now=os._exit):
    """What runs in place of the rank's exit, after the last count: one connection per case
    seen, closed first from this end, so that it waits in the table for a minute."""
    for world_size, src, numel in SEEN:
        address = (f"127.88.{world_size}.{src}", 3000 + numel)
        try:
            server = socket.create_server(address)
            client = socket.create_connection(address)
            accepted, _ = server.accept()
            client.close()
            accepted.close()
            server.close()
        except OSError:
            pass
    exit_now(code)


def my_broadcast(tensor, src):
    world_size = dist.get_world_size()
    found = left_behind()
    if found:
        raise RuntimeError(f"LEFT-IN-THE-NETWORK {found}")
    SEEN.append((world_size, src, tensor.numel()))
    os._exit = leave_and_exit
    honest_broadcast(tensor, src)
