r"""The gradients summed over the dp group, never divided by its size.

Answer cell: 18-composed-step
Test cell: 18-composed-step-test
Says: the gradients are 2 times one process's: they are summed over the dp group, not averaged
"""

from composed import composed_step_with


def composed_step(params, x, target, mesh, num_microbatches):
    return composed_step_with(params, x, target, mesh, num_microbatches, average=False)
