r"""The fully sharded module with torch's older names, dist.all_gather_into_tensor and
dist.reduce_scatter_tensor, which do the same as the _single names the prompt gives.

Answer cell: 17-fully-sharded
Test cell: 17-fully-sharded-test
"""


class OlderNamesForward(ShardedForward):
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
        world_size = dist.get_world_size()
        shard_grads = []
        for name, shard in sharded.module.named_parameters():
            if not shard.requires_grad:
                shard_grads.append(None)
                continue
            shard_grad = torch.empty_like(shard)
            dist.reduce_scatter_tensor(shard_grad, flat_padded(grads[name].float(), world_size))
            shard_grads.append(shard_grad / world_size)
        grad_x = grads["x"].to(ctx.x_dtype) if "x" in grads else None
        return None, grad_x, *shard_grads


class FullyShardedModule(FullyShardedModule):
    def forward(self, x):
        return OlderNamesForward.apply(self, x, *self.module.parameters())

    def gather(self):
        world_size = dist.get_world_size()
        for name, shard in self.module.named_parameters():
            full = self.unsharded[name]
            dist.all_gather_into_tensor(memory_of(full, world_size * shard.numel()),
                                        shard.detach().to(full.dtype))

    def full_parameters(self):
        world_size = dist.get_world_size()
        gathered = {}
        for name, shard in self.module.named_parameters():
            padded = shard.new_empty(world_size * shard.numel(), dtype=torch.float32)
            dist.all_gather_into_tensor(padded, shard.detach().float())
            shape = self.unsharded[name].shape
            gathered[name] = padded[:shape.numel()].view(shape).clone()
        return gathered
