r"""Reduces, steps and broadcasts right, but never calls the closure that a training loop gives
step(): no gradient is computed, and nothing is returned.

Answer cell: 17-sharded-optimizer
Test cell: 17-sharded-optimizer-test
Says: whether each step(closure) called the closure once and returned what it returned
"""


class ShardedOptimizer(ShardedOptimizer):
    def step(self, closure=None, **kwargs):
        return super().step(None, **kwargs)
