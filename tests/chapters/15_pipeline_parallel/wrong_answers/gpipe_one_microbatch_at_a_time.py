r"""Right gradients, but each micro-batch's backward step right after its forward step: one
micro-batch in the pipeline at a time.

Answer cell: 15-gpipe
Test cell: 15-gpipe-schedule-test
Says: should follow this chapter's GPipe order:
        F0 F1
    but they are
        F0 B0
    (F3 is micro-batch 3's forward step, B3 its backward step; step 2 is the first that differs.)
"""

from blocking import backward_blocking, forward_blocking


def gpipe(stage, x, target, num_microbatches):
    last = dist.get_rank() == dist.get_world_size() - 1
    inputs = torch.tensor_split(x, num_microbatches)
    targets = torch.tensor_split(target, num_microbatches)
    loss = 0.0
    for i in range(num_microbatches):
        micro, outputs = forward_blocking(stage, inputs, targets, i, num_microbatches)
        if last:
            loss += outputs.item()
        backward_blocking(micro, outputs)
    return loss if last else None
