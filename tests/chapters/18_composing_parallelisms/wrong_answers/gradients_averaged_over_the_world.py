r"""The gradients averaged over every rank, not over the dp group.

Answer cell: 18-composed-step
Test cell: 18-composed-step-test
Says: a gradient of this rank's parameters, ran on ranks [0, 1, 2, 3, 4, 5, 6, 7], the whole \
    world, which is no group of the mesh: average the gradients over the dp group
"""

from composed import composed_step_with


def composed_step(params, x, target, mesh, num_microbatches):
    return composed_step_with(params, x, target, mesh, num_microbatches, dp="world")
