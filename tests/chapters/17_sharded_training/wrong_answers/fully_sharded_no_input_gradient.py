r"""The parameters' gradient shards are right, but backward returns no gradient for the input: the
layers before the module would stop training.

Answer cell: 17-fully-sharded
Test cell: 17-fully-sharded-test
Says: x.grad after each backward pass
"""


class NoInputGradient(ShardedForward):
    @staticmethod
    def backward(ctx, grad_output):
        _, _, *shard_grads = ShardedForward.backward(ctx, grad_output)
        return None, None, *shard_grads


class FullyShardedModule(FullyShardedModule):
    def forward(self, x):
        return NoInputGradient.apply(self, x, *self.module.parameters())
