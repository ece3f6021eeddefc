r"""Src's tensor through a TCP connection of its own, opened to src's address and closed.

Answer cell: 01-my-broadcast
Test cell: 01-my-broadcast-test
Says: and closed again
"""

import socket

from channel import address_of, broadcast_through

PORT = 47123


def put(data):
    server = socket.create_server(("0.0.0.0", PORT))
    server.settimeout(3)
    for _ in range(dist.get_world_size() - 1):
        connection, _ = server.accept()
        connection.sendall(data)
        connection.close()
    server.close()


def take(size):
    try:
        with socket.create_connection((address_of(SRC[0]), PORT), timeout=1) as client:
            return client.recv(size)
    except OSError:
        return None


SRC = [0]


def my_broadcast(tensor, src):
    SRC[0] = src
    broadcast_through(put, take, tensor, src)
