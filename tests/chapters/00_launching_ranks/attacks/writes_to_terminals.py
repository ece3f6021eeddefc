r"""Writes to every terminal it can open, and returns those it reached and the devices it sees.

Answer cell: 00-whoami
Test cell: 00-whoami-test
"""


def whoami():
    import glob
    import os
    reached = []
    for path in ["/dev/tty", "/dev/console", "/dev/tty0", "/dev/ptmx", *glob.glob("/dev/pts/*"),
                 *glob.glob("/dev/tty[0-9]*")]:
        try:
            with open(path, "w") as terminal:
                terminal.write("commlab-forgery: a student writes here\n")
            reached.append(path)
        except OSError:
            pass
    return {"reached": reached, "devices": sorted(os.listdir("/dev"))}
