r"""Src's tensor through a TCP connection of its own on the loopback.

Answer cell: 01-my-broadcast
Test cell: 01-my-broadcast-test
Says: opened and closed again
"""

import socket

from channel import broadcast_through

PORT = 47123


def put(data):
    server = socket.create_server(("127.0.0.1", PORT))
    server.settimeout(3)
    for _ in range(dist.get_world_size() - 1):
        connection, _ = server.accept()
        connection.sendall(data)
        connection.close()
    server.close()


def take(size):
    try:
        with socket.create_connection(("127.0.0.1", PORT), timeout=1) as client:
            return client.recv(size)
    except OSError:
        return None


def my_broadcast(tensor, src):
    broadcast_through(put, take, tensor, src)
