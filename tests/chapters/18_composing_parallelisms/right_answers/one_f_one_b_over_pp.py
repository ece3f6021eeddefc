r"""1F1B over the pp group instead of GPipe (chapter 15's order: a stage's warm-up forward passes,
then a backward pass after each forward pass), each step's send and receive started together by
batch_isend_irecv: the same gradients, with fewer micro-batches held at once.

Answer cell: 18-composed-step
Test cell: 18-composed-step-test, 18-composed-step-bytes-test
"""


def composed_step(params, x, target, mesh, num_microbatches):
    dp, pp, tp = (mesh[name].get_group() for name in ("dp", "pp", "tp"))
    stage, stages = dist.get_rank(pp), dist.get_world_size(pp)
    first, last = stage == 0, stage == stages - 1
    inputs = torch.tensor_split(x, num_microbatches)
    targets = torch.tensor_split(target, num_microbatches)
    warmup = min(stages - stage - 1, num_microbatches)
    order = [("F", i) for i in range(warmup)]
    for i in range(num_microbatches):
        if warmup + i < num_microbatches:
            order.append(("F", warmup + i))
        order.append(("B", i))

    def exchange(send, recv):
        """Start the send (tensor, stage) and the receive (buffer, stage) together; wait."""
        ops = [dist.P2POp(op, tensor, group=pp, group_peer=peer)
               for op, pair in ((dist.isend, send), (dist.irecv, recv)) if pair is not None
               for tensor, peer in [pair]]
        for work in dist.batch_isend_irecv(ops) if ops else []:
            work.wait()

    saved, loss, result = [], 0.0, None
    for kind, i in order:
        if kind == "F":
            recv = None if first else (torch.empty_like(inputs[i]), stage - 1)
        else:
            recv = None if last else (torch.empty_like(inputs[i]), stage + 1)
        exchange(result, recv)
        if kind == "F":
            micro = inputs[i] if first else recv[0].requires_grad_()
            output = tensor_parallel_mlp(micro, *params, group=tp)
            if last:
                output = torch.nn.functional.mse_loss(output, targets[i]) / num_microbatches
                loss += output.item()
            saved.append((micro, output))
            result = None if last else (output.detach(), stage + 1)
        else:
            micro, output = saved.pop(0)
            output.backward(None if last else recv[0])
            result = None if first else (micro.grad, stage - 1)
    exchange(result, None)
    for param in params:
        dist.all_reduce(param.grad, group=dp)
        param.grad /= dist.get_world_size(dp)
    return loss if last else None
