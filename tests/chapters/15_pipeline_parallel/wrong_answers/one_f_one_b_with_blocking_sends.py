r"""The 1F1B order with blocking send and recv: neighbours both in send, a deadlock.

Answer cell: 15-one-f-one-b
Test cell: 15-one-f-one-b-test
Says: rank 2 is still in send #2
      rank 3 is still in send #1
"""

from blocking import backward_blocking, forward_blocking


def one_f_one_b(stage, x, target, num_microbatches):
    rank, world_size = dist.get_rank(), dist.get_world_size()
    inputs = torch.tensor_split(x, num_microbatches)
    targets = torch.tensor_split(target, num_microbatches)
    saved, loss = [], 0.0
    for kind, i in one_f_one_b_order(rank, world_size, num_microbatches):
        if kind == "F":
            micro, outputs = forward_blocking(stage, inputs, targets, i, num_microbatches)
            saved.append((micro, outputs))
            if rank == world_size - 1:
                loss += outputs.item()
        else:
            backward_blocking(*saved.pop(0))
    return loss if rank == world_size - 1 else None
