r"""Every rank divides its gradient before the reduce, and the wrapped optimizer is made only once a
rank owns a parameter of the first group.

Answer cell: 17-sharded-optimizer
Test cell: 17-sharded-optimizer-test
"""


class ShardedOptimizer(torch.optim.Optimizer):
    def __init__(self, params, optimizer_cls, **kwargs):
        self.optimizer_cls, self.kwargs = optimizer_cls, kwargs
        self.owner, self.owned = {}, [0] * dist.get_world_size()
        self.local = None
        super().__init__(params, kwargs)

    def add_param_group(self, param_group):
        super().add_param_group(param_group)
        group = self.param_groups[-1]
        mine = []
        for param in group["params"]:
            self.owner[param] = least_loaded(self.owned)
            self.owned[self.owner[param]] += param.numel()
            if self.owner[param] == dist.get_rank():
                mine.append(param)
        if self.local is None:
            self.local = self.optimizer_cls([{**group, "params": mine}], **self.kwargs)
        else:
            self.local.add_param_group({**group, "params": mine})

    @torch.no_grad()
    def step(self, closure=None, **kwargs):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            for param in group["params"]:
                if param.grad is not None:
                    param.grad /= dist.get_world_size()
                    dist.reduce(param.grad, dst=self.owner[param])
        for group, local_group in zip(self.param_groups, self.local.param_groups):
            for key, value in group.items():
                if key != "params":
                    local_group[key] = value
        self.local.step(**kwargs)
        for group in self.param_groups:
            for param in group["params"]:
                if param.grad is not None:
                    dist.broadcast(param, src=self.owner[param])
        return loss
