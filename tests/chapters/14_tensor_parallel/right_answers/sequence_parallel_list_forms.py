r"""The list forms: dist.all_gather into a list and torch.cat, dist.reduce_scatter from a list, the
same bytes as the tensor forms.

Answer cell: 14-sequence-parallel
Test cell: 14-sequence-parallel-test
"""

from on_group import on_group


def gather_rows_listed(x_rows, group):
    parts = [torch.empty_like(x_rows) for _ in range(dist.get_world_size(group))]
    dist.all_gather(parts, x_rows.contiguous(), group=group)
    return torch.cat(parts)


def scatter_rows_listed(x, group):
    output = x.new_empty((x.shape[0] // dist.get_world_size(group), *x.shape[1:]))
    dist.reduce_scatter(output, list(x.contiguous().chunk(dist.get_world_size(group))),
                        group=group)
    return output


class GatherFromSequenceParallel(on_group(gather_rows_listed, scatter_rows_listed)):
    """The rows gathered forward, the gradient reduce-scattered backward, in list forms."""


class ReduceScatterToSequenceParallel(on_group(scatter_rows_listed, gather_rows_listed)):
    """The rows reduce-scattered forward, the gradient gathered backward, in list forms."""
