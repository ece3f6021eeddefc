r"""Megatron-LM's _reduce: the all_reduce in place, in f's backward and g's forward pass.

Answer cell: 14-f-and-g
Test cell: 14-f-and-g-test
"""

from on_group import on_group


def all_reduced_in_place(x, group):
    dist.all_reduce(x, group=group)
    return x


class CopyToTensorParallel(on_group(lambda x, group: x.clone(), all_reduced_in_place)):
    """f: a copy forward, the gradient all-reduced in place backward."""


class ReduceFromTensorParallel(on_group(all_reduced_in_place, lambda grad, group: grad)):
    """g: all-reduced in place forward, the gradient as it is backward."""
