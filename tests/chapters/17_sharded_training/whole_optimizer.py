"""What this chapter's answers that keep the whole optimizer on every rank share: each
parameter's owner, as the chapter's ShardedOptimizer picks it, and the wrapped optimizer of
every parameter (``self.whole``) on every rank."""


class WholeOnEveryRank(torch.optim.Optimizer):
    def __init__(self, params, optimizer_cls, **kwargs):
        self.optimizer_cls, self.kwargs, self.whole = optimizer_cls, kwargs, None
        self.owner, self.owned = {}, [0] * dist.get_world_size()
        super().__init__(params, kwargs)

    def add_param_group(self, param_group):
        super().add_param_group(param_group)
        group = self.param_groups[-1]
        for param in group["params"]:
            self.owner[param] = least_loaded(self.owned)
            self.owned[self.owner[param]] += param.numel()
        if self.whole is None:
            self.whole = self.optimizer_cls([dict(group)], **self.kwargs)
        else:
            self.whole.add_param_group(dict(group))
