r"""The groups given to the constructor are shared out; a group added later is kept in
self.param_groups but never reaches the wrapped optimizer, so it is never stepped.

Answer cell: 17-sharded-optimizer
Test cell: 17-sharded-optimizer-test
Says: the parameters after step
"""


class ShardedOptimizer(torch.optim.Optimizer):
    def __init__(self, params, optimizer_cls, **kwargs):
        self.rank, self.world_size = dist.get_rank(), dist.get_world_size()
        self.owner, self.owned = {}, [0] * self.world_size
        super().__init__(params, kwargs)
        groups = []
        for group in self.param_groups:
            mine = []
            for param in group["params"]:
                self.owner[param] = least_loaded(self.owned)
                self.owned[self.owner[param]] += param.numel()
                if self.owner[param] == self.rank:
                    mine.append(param)
            groups.append({**group, "params": mine})
        self.local = optimizer_cls(groups, **kwargs)

    def step(self, closure=None, **kwargs):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        trained = [p for group in self.param_groups for p in group["params"]
                   if p.grad is not None and p in self.owner]
        for param in trained:
            dist.reduce(param.grad, dst=self.owner[param])
            if self.owner[param] == self.rank:
                param.grad /= self.world_size
        for group, local_group in zip(self.param_groups, self.local.param_groups):
            local_group.update({k: v for k, v in group.items() if k != "params"})
        self.local.step(**kwargs)
        for param in trained:
            dist.broadcast(param.data, src=self.owner[param])
        return loss
