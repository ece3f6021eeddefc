r"""The backward steps from the last micro-batch back: the same bubble and memory as this chapter's
order, and the same messages counted in order.

Answer cell: 15-gpipe
Test cell: 15-gpipe-test, 15-gpipe-schedule-test
"""

from blocking import backward_blocking, forward_blocking


def gpipe(stage, x, target, num_microbatches):
    last = dist.get_rank() == dist.get_world_size() - 1
    inputs = torch.tensor_split(x, num_microbatches)
    targets = torch.tensor_split(target, num_microbatches)
    saved, loss = [], 0.0
    for i in range(num_microbatches):
        micro, outputs = forward_blocking(stage, inputs, targets, i, num_microbatches)
        saved.append((micro, outputs))
        if last:
            loss += outputs.item()
    for micro, outputs in reversed(saved):
        backward_blocking(micro, outputs)
    return loss if last else None
