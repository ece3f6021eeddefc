r"""Looks for what leaves_ipc_behind left (the segment, the files) and returns what it found.

Answer cell: 00-whoami
Test cell: 00-whoami-test
"""


def whoami():
    import ctypes
    import os
    libc = ctypes.CDLL(None, use_errno=True)
    found = []
    if libc.shmget(0x0BADCAFE, 4096, 0o666) >= 0:
        found.append("a SysV segment")
    for folder in ("/dev/shm", "/tmp", os.getcwd()):
        if os.path.exists(os.path.join(folder, "commlab-left-behind")):
            found.append(folder)
    return {"found": found}
