r"""A report that builds, in whoever unpickles it, a report of success for the visible case (whose
values are no secret): the rank host reads reports as data only, and this one is not.

Answer cell: 00-whoami
Test cell: 00-whoami-test
Says: cannot be read
"""

import pickle

from commlab import control, worker


class Forged:
    def __reduce__(self):
        rank, world_size = dist.get_rank(), dist.get_world_size()
        value = {"rank": rank, "world_size": world_size, "backend": dist.get_backend()}
        return (worker.RankReport, ([(0, value, 0, 0)], [], [], None, []))
def whoami():
    control._channel.report(pickle.dumps(Forged()))
    raise NotImplementedError()
