"""The forward and backward steps of a stage with blocking messages, as several of this
chapter's answers take them: the input from the stage before, the output to the stage after,
and their gradients the other way."""


def forward_blocking(stage, inputs, targets, i, num_microbatches):
    """Micro-batch ``i``'s forward step: its input received from the stage before (the first
    stage has it), its output sent to the stage after (the last keeps it); returns
    ``(micro, outputs)`` for its backward step."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    first, last = rank == 0, rank == world_size - 1
    micro = inputs[i]
    if not first:
        micro = torch.empty_like(inputs[i])
        dist.recv(micro, src=rank - 1)
    micro, outputs = forward_step(stage, micro, targets[i] if last else None, num_microbatches)
    if not last:
        dist.send(outputs.detach(), dst=rank + 1)
    return micro, outputs


def backward_blocking(micro, outputs):
    """A backward step: the output's gradient received from the stage after (the last stage
    starts from the loss), the input's gradient sent to the stage before."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    grad_outputs = None
    if rank != world_size - 1:
        grad_outputs = torch.empty_like(outputs)
        dist.recv(grad_outputs, src=rank + 1)
    grad_inputs = backward_step(micro, outputs, grad_outputs)
    if rank != 0:
        dist.send(grad_inputs, dst=rank - 1)
