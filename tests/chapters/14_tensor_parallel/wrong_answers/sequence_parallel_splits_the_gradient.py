r"""The gather's backward keeps this rank's rows of the gradient instead of summing them over the
ranks (a split, not a reduce_scatter).

Answer cell: 14-sequence-parallel
Test cell: 14-sequence-parallel-test
Says: the collectives of the backward pass, as (op, bytes sent, group): the rows of the output's \
    gradient gathered, then x's gradient reduce-scattered to rows (all_gather_single and \
    reduce_scatter_single count under these older names) should be
        [('all_gather_into_tensor', 96, [0, 1, 2, 3]), ('reduce_scatter_tensor', 96, [0, 1, 2, 3])]
    but it is
        [('all_gather_into_tensor', 96, [0, 1, 2, 3])]
"""

from on_group import gather_rows, on_group, scatter_rows


def my_rows(grad_output, group):
    rows = grad_output.shape[0] // dist.get_world_size(group)
    rank = dist.get_rank(group)
    return grad_output[rank * rows:(rank + 1) * rows].clone()


class GatherFromSequenceParallel(on_group(gather_rows, my_rows)):
    """The rows gathered forward; backward, this rank's rows of the gradient, not their sum."""


class ReduceScatterToSequenceParallel(on_group(scatter_rows, gather_rows)):
    """The rows reduce-scattered forward, the gradient's rows gathered backward."""
