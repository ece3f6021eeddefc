r"""The right gradient shards, from the whole gradient all-reduced on every rank.

Answer cell: 17-fully-sharded
Test cell: 17-fully-sharded-test
Says: all_reduce
"""


class AllReducing(ShardedForward):
    @staticmethod
    def backward(ctx, grad_output):
        sharded, (inner_x, output) = ctx.sharded, ctx.inner
        sharded.gather()
        names = [name for name, full in sharded.unsharded.items() if full.requires_grad]
        inputs = [sharded.unsharded[name] for name in names]
        if inner_x.requires_grad:
            names, inputs = names + ["x"], inputs + [inner_x]
        grads = dict(zip(names, torch.autograd.grad(output, inputs, grad_output)))
        sharded.free()
        rank, world_size = dist.get_rank(), dist.get_world_size()
        shard_grads = []
        for name, shard in sharded.module.named_parameters():
            if not shard.requires_grad:
                shard_grads.append(None)
                continue
            whole = flat_padded(grads[name].float(), world_size)
            dist.all_reduce(whole)
            shard_grads.append(whole.chunk(world_size)[rank] / world_size)
        grad_x = grads["x"].to(ctx.x_dtype) if "x" in grads else None
        return None, grad_x, *shard_grads


class FullyShardedModule(FullyShardedModule):
    def forward(self, x):
        return AllReducing.apply(self, x, *self.module.parameters())
