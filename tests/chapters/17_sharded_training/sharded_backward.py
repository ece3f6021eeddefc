"""Chapter 17's fully sharded backward step, with the part its answers change as an argument:
how this rank's shard of each parameter's gradient is made from the whole gradient."""


def sharded_backward(ctx, grad_output, shard_of):
    """The backward step of ShardedForward: the weights gathered again, the gradients of the
    whole weights and of the input, the weights freed; then ``shard_of(whole_grad, shard)``
    gives this rank's shard of each parameter's gradient, averaged over the ranks."""
    sharded, (inner_x, output) = ctx.sharded, ctx.inner
    sharded.gather()
    names = [name for name, full in sharded.unsharded.items() if full.requires_grad]
    inputs = [sharded.unsharded[name] for name in names]
    if inner_x.requires_grad:
        names, inputs = names + ["x"], inputs + [inner_x]
    grads = dict(zip(names, torch.autograd.grad(output, inputs, grad_output)))
    sharded.free()
    shard_grads = [shard_of(grads[name], shard) if shard.requires_grad else None
                   for name, shard in sharded.module.named_parameters()]
    grad_x = grads["x"].to(ctx.x_dtype) if "x" in grads else None
    return None, grad_x, *shard_grads
