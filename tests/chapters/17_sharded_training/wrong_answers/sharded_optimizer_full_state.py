r"""The right reduce and broadcast calls, but every rank steps an optimizer of every parameter: the
parameters are right, and each rank holds the whole state.

Answer cell: 17-sharded-optimizer
Test cell: 17-sharded-optimizer-memory-test
Says: held_bytes(optimizer) added up over the ranks
"""

from whole_optimizer import WholeOnEveryRank


class ShardedOptimizer(WholeOnEveryRank):
    def step(self, closure=None, **kwargs):
        trained = [p for group in self.param_groups for p in group["params"]
                   if p.grad is not None]
        for param in trained:
            dist.reduce(param.grad, dst=self.owner[param])
            param.grad /= dist.get_world_size()
        self.whole.step(**kwargs)
        for param in trained:
            dist.broadcast(param.data, src=self.owner[param])
