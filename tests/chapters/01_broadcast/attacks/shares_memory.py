r"""Src's tensor through a System V shared-memory segment.

Answer cell: 01-my-broadcast
Test cell: 01-my-broadcast-test
"""

import ctypes

from channel import broadcast_through

KEY = 0x0C0FFEE


def _libc():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.shmat.restype = ctypes.c_void_p
    return libc


def put(data):
    libc = _libc()
    shmid = libc.shmget(KEY, 4096, 0o1000 | 0o666)
    address = libc.shmat(shmid, None, 0)
    ctypes.memmove(address, data, len(data))


def take(size):
    libc = _libc()
    shmid = libc.shmget(KEY, 4096, 0o666)
    if shmid < 0:
        return None
    address = libc.shmat(shmid, None, 0)
    return ctypes.string_at(address, size)


def my_broadcast(tensor, src):
    broadcast_through(put, take, tensor, src)
