r"""Src's tensor through a Unix socket in the abstract namespace.

Answer cell: 01-my-broadcast
Test cell: 01-my-broadcast-test
"""

import socket

from channel import broadcast_through


def put(data):
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind("\0commlab-forgery")
    server.listen(8)
    server.settimeout(3)
    for _ in range(dist.get_world_size() - 1):
        connection, _ = server.accept()
        connection.sendall(data)


def take(size):
    try:
        client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        client.connect("\0commlab-forgery")
        return client.recv(size)
    except OSError:
        return None


def my_broadcast(tensor, src):
    broadcast_through(put, take, tensor, src)
