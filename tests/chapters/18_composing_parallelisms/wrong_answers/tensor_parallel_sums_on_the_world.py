r"""tensor_parallel_mlp left on its default group: f and g all-reduce over every rank, and the
first stage's ranks wait there for the others, who wait for its activations.

Answer cell: 18-composed-step
Test cell: 18-composed-step-test
Says: ranks 0, 1, 4, 5 are still in all_reduce #1
      ranks 2, 3, 6, 7 are still in recv #1
"""

from composed import composed_step_with


def composed_step(params, x, target, mesh, num_microbatches):
    return composed_step_with(params, x, target, mesh, num_microbatches, tp="world")
