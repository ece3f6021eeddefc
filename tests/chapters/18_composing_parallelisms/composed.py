"""Chapter 18's composed step with the parts that its wrong answers change as arguments."""


def composed_step_with(params, x, target, mesh, num_microbatches, tp="tp", dp="dp",
                       input_gradient_on_first=False, average=True):
    """GPipe over the pp group, each stage tensor parallel over the group `tp` names, the
    gradients all-reduced over the group `dp` names ("world": the default group) and divided by
    its size when `average`; with `input_gradient_on_first`, the first stage's input takes a
    gradient too."""
    def group_of(name):
        return None if name == "world" else mesh[name].get_group()

    pp = mesh["pp"].get_group()
    stage, stages = dist.get_rank(pp), dist.get_world_size(pp)
    first, last = stage == 0, stage == stages - 1
    inputs = torch.tensor_split(x, num_microbatches)
    targets = torch.tensor_split(target, num_microbatches)
    saved, loss = [], 0.0
    for i in range(num_microbatches):
        micro = inputs[i]
        if not first:
            micro = torch.empty_like(inputs[i])
            dist.recv(micro, group_src=stage - 1, group=pp)
        if not first or input_gradient_on_first:
            micro.requires_grad_()
        output = tensor_parallel_mlp(micro, *params, group=group_of(tp))
        if last:
            output = torch.nn.functional.mse_loss(output, targets[i]) / num_microbatches
            loss += output.item()
        else:
            dist.send(output.detach(), group_dst=stage + 1, group=pp)
        saved.append((micro, output))
    for micro, output in saved:
        if last:
            output.backward()
        else:
            grad_output = torch.empty_like(output)
            dist.recv(grad_output, group_src=stage + 1, group=pp)
            output.backward(grad_output)
        if not first:
            dist.send(micro.grad, group_dst=stage - 1, group=pp)
    for param in params:
        dist.all_reduce(param.grad, group=group_of(dp))
        if average:
            param.grad /= dist.get_world_size(group_of(dp))
    return loss if last else None
