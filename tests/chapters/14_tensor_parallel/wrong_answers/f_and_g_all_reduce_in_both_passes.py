r"""Taking "the gradient of an all_reduce is an all_reduce" too far: g all-reduces in the backward
pass too, so every gradient below it is world_size times too large.

Answer cell: 14-f-and-g
Test cell: 14-f-and-g-test
Says: the collectives of the backward pass, as (op, bytes sent, group): f's all_reduce of x's \
    gradient, and nothing from g (every rank already has the whole gradient of the output) should \
    be
        [('all_reduce', 144, [0, 1, 2, 3])]
    but it is
        [('all_reduce', 144, [0, 1, 2, 3]), ('all_reduce', 144, [0, 1, 2, 3])]
"""

from on_group import on_group


def all_reduced_copy(x, group):
    copy = x.clone()
    dist.all_reduce(copy, group=group)
    return copy


class CopyToTensorParallel(on_group(lambda x, group: x.clone(), all_reduced_copy)):
    """f: a copy forward, the gradient all-reduced backward."""


class ReduceFromTensorParallel(on_group(all_reduced_copy, all_reduced_copy)):
    """g: all-reduced forward, and backward too."""
