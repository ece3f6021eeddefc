"""Fifty runs in a row, then a failing one, then: is anything of them left in this process?

Run by test_launch.py in a subprocess with a private TMPDIR, so that other programs on the machine
can't disturb the count; prints "clean" when no process, descriptor or port is left.
"""

import psutil
import torch
import torch.distributed as dist

import commlab
from commlab import processes
from support.processes import descendants, forkserver_children


def work(rank, world_size):
    tensor = torch.ones(4) * rank
    dist.all_reduce(tensor)
    return tensor


def listening_ports():
    conns = psutil.Process().net_connections(kind="tcp")
    return {c.laddr.port for c in conns if c.status == psutil.CONN_LISTEN}


if __name__ == "__main__":
    commlab.run(work, 4)  # the forkserver and resource tracker start once, on the first run
    # each run starts the next run's ranks, which wait for it: not a run's leftovers, and
    # ended here, so that the count says what the runs left; and its own ranks end in the
    # background (processes.stop_in_background): counted once they have
    processes.close_ranks_started_ahead()
    assert processes.wait_stopped(timeout=30)
    fds, ports = psutil.Process().num_fds(), listening_ports()
    for i in range(50):
        result = commlab.run(work, 4)
        assert result.returns[i % 4].tolist() == [6.0] * 4, result.returns
    try:
        commlab.run(lambda rank, world_size: 1 / 0, 2)
    except commlab.RankError:
        pass
    processes.close_ranks_started_ahead()
    # a run's released ranks are stopped in the background: all of them, by now
    assert processes.wait_stopped(timeout=30)
    assert descendants() == [], descendants()
    assert forkserver_children() == [], forkserver_children()
    assert psutil.Process().num_fds() == fds, (psutil.Process().num_fds(), fds)
    assert listening_ports() - ports == set(), listening_ports() - ports
    print("clean")
