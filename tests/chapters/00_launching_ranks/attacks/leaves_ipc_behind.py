r"""Leaves a System V shared-memory segment and a file in /dev/shm, /tmp and its working folder, for
the next submission to find.

Answer cell: 00-whoami
Test cell: 00-whoami-test
"""

import ctypes
import os


class LeavesThemBehind:  # a class body runs when grading defines the cell
    libc = ctypes.CDLL(None, use_errno=True)
    libc.shmat.restype = ctypes.c_void_p
    shmid = libc.shmget(0x0BADCAFE, 4096, 0o1000 | 0o666)
    if shmid >= 0:
        ctypes.memmove(libc.shmat(shmid, None, 0), b"left by a student", 17)
    for folder in ("/dev/shm", "/tmp", os.getcwd()):
        try:
            open(os.path.join(folder, "commlab-left-behind"), "w").write("left by a student")
        except OSError:
            pass


def whoami():
    raise NotImplementedError()
