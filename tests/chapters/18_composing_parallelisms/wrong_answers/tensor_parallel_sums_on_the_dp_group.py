r"""The groups mixed up: the tensor-parallel sums on the dp group, the gradients on tp.

Answer cell: 18-composed-step
Test cell: 18-composed-step-test
Says: a micro-batch's activations or their gradient, ran on the dp group [0, 4]: the \
    tensor-parallel sums (f and g) run on the tp group, mesh['tp'].get_group(), ranks [0, 1]
"""

from composed import composed_step_with


def composed_step(params, x, target, mesh, num_microbatches):
    return composed_step_with(params, x, target, mesh, num_microbatches, tp="dp", dp="tp")
