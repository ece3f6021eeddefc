r"""Src's tensor through a file in /tmp, /dev/shm or the working folder.

Answer cell: 01-my-broadcast
Test cell: 01-my-broadcast-test
"""

import os

from channel import broadcast_through


def put(data):
    for folder in ("/tmp", "/dev/shm", os.getcwd()):
        try:
            open(os.path.join(folder, "commlab-forgery"), "wb").write(data)
        except OSError:
            pass


def take(size):
    for folder in ("/tmp", "/dev/shm", os.getcwd()):
        try:
            return open(os.path.join(folder, "commlab-forgery"), "rb").read()
        except OSError:
            pass


def my_broadcast(tensor, src):
    broadcast_through(put, take, tensor, src)
