"""An autograd function of a tensor and a process group, made of what each of its two passes
does to a tensor, for this chapter's f, g and sequence-parallel answers; and the collectives of
sequence parallelism in their tensor forms."""


def on_group(forward_pass, backward_pass):
    """The ``torch.autograd.Function`` of ``(x, group)`` whose forward pass gives
    ``forward_pass(x, group)`` and whose backward pass gives ``backward_pass(grad_output,
    group)`` as x's gradient (and none for the group)."""

    class OnGroup(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, group):
            ctx.group = group
            return forward_pass(x, group)

        @staticmethod
        def backward(ctx, grad_output):
            return backward_pass(grad_output, ctx.group), None

    return OnGroup


def gather_rows(x_rows, group):
    """Every rank's rows of the group, one after the other (all_gather_into_tensor)."""
    output = x_rows.new_empty((dist.get_world_size(group) * x_rows.shape[0], *x_rows.shape[1:]))
    dist.all_gather_into_tensor(output, x_rows.contiguous(), group=group)
    return output


def scatter_rows(x, group):
    """This rank's rows of ``x`` summed over the group (reduce_scatter_tensor)."""
    output = x.new_empty((x.shape[0] // dist.get_world_size(group), *x.shape[1:]))
    dist.reduce_scatter_tensor(output, x.contiguous(), group=group)
    return output
