r"""Src's tensor in UDP datagrams of its own on the loopback.

Answer cell: 01-my-broadcast
Test cell: 01-my-broadcast-test
"""

import socket

from channel import broadcast_through

PORT = 47124
_mine = None


def put(data):
    sender = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    for _ in range(40):
        sender.sendto(data, ("127.0.0.1", PORT))
        __import__("time").sleep(0.05)


def take(size):
    global _mine
    if _mine is None:
        _mine = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        _mine.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        _mine.bind(("127.0.0.1", PORT))
        _mine.settimeout(0.05)
    try:
        return _mine.recv(size)
    except OSError:
        return None


def my_broadcast(tensor, src):
    broadcast_through(put, take, tensor, src)
