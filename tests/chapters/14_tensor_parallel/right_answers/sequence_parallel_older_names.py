r"""The sequence-parallel operators with torch's older names, dist.all_gather_into_tensor and
dist.reduce_scatter_tensor, which do the same as the _single names the prompt gives.

Answer cell: 14-sequence-parallel
Test cell: 14-sequence-parallel-test
"""

from on_group import gather_rows, on_group, scatter_rows


class GatherFromSequenceParallel(on_group(gather_rows, scatter_rows)):
    """The rows gathered forward; the gradient's rows reduce-scattered backward."""


class ReduceScatterToSequenceParallel(on_group(scatter_rows, gather_rows)):
    """The rows reduce-scattered forward, the gradient's rows gathered backward."""
