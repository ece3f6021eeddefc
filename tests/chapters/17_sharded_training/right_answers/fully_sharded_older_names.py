r"""The fully sharded module with torch's older names, dist.all_gather_into_tensor and
dist.reduce_scatter_tensor, which do the same as the _single names the prompt gives.

Answer cell: 17-fully-sharded
Test cell: 17-fully-sharded-test
"""

from sharded_backward import sharded_backward


def reduce_scattered(grad, shard):
    """This rank's shard of the gradient summed over the ranks, by reduce_scatter_tensor."""
    world_size = dist.get_world_size()
    shard_grad = torch.empty_like(shard)
    dist.reduce_scatter_tensor(shard_grad, flat_padded(grad.float(), world_size))
    return shard_grad / world_size


class OlderNamesForward(ShardedForward):
    @staticmethod
    def backward(ctx, grad_output):
        return sharded_backward(ctx, grad_output, reduce_scattered)


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
