"""Chapter 15's 1F1B with each micro-batch's (inputs, outputs) saved in a dict, the messages of a
step exchanged together (batch_isend_irecv), as several of this chapter's answers take it."""


def one_f_one_b_saving(stage, x, target, num_microbatches, pop, drop):
    """1F1B whose backward step takes its pair out of the dict (``pop``) or leaves it there, and
    drops the local names of the pair after the step (``drop``) or keeps them."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    first, last = rank == 0, rank == world_size - 1
    inputs = torch.tensor_split(x, num_microbatches)
    targets = torch.tensor_split(target, num_microbatches)

    def exchange(send, recv):
        ops = []
        if send is not None:
            ops.append(dist.P2POp(dist.isend, *send))
        if recv is not None:
            ops.append(dist.P2POp(dist.irecv, *recv))
        if ops:
            for work in dist.batch_isend_irecv(ops):
                work.wait()

    saved, loss, result = {}, 0.0, None
    for kind, i in one_f_one_b_order(rank, world_size, num_microbatches):
        if kind == "F":
            recv = None if first else (torch.empty_like(inputs[i]), rank - 1)
        else:
            recv = None if last else (torch.empty_like(inputs[i]), rank + 1)
        exchange(result, recv)
        if kind == "F":
            micro = inputs[i] if first else recv[0]
            saved[i] = forward_step(stage, micro, targets[i] if last else None,
                                    num_microbatches)
            if last:
                loss += saved[i][1].item()
            result = None if last else (saved[i][1].detach(), rank + 1)
        else:
            micro, outputs = saved.pop(i) if pop else saved[i]
            grad_inputs = backward_step(micro, outputs, None if last else recv[0])
            if drop:
                del micro, outputs
            result = None if first else (grad_inputs, rank - 1)
    exchange(result, None)
    return loss if last else None
