r"""Every rank steps the whole unsharded optimizer on its own gradients; the reduce and broadcast
calls of the intended answer are made on copies, for the trace and the network.

Answer cell: 17-sharded-optimizer
Test cell: 17-sharded-optimizer-test
Says: the parameters after step
"""

from whole_optimizer import WholeOnEveryRank


class ShardedOptimizer(WholeOnEveryRank):
    def step(self, closure=None):
        loss = closure() if closure is not None else None
        for group, whole in zip(self.param_groups, self.whole.param_groups):
            whole.update({k: v for k, v in group.items() if k != "params"})
        trained = [p for g in self.param_groups for p in g["params"] if p.grad is not None]
        for param in trained:
            dist.reduce(param.grad.clone(), dst=self.owner[param])
        self.whole.step()
        for param in trained:
            dist.broadcast(param.detach().clone(), src=self.owner[param])
        return loss
