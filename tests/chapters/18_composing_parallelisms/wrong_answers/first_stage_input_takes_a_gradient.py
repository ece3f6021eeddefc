r"""The first stage's input made to require a gradient, as chapter 15's forward_step does: the
values are right, but f all-reduces a gradient of the data that no rank needs.

Answer cell: 18-composed-step
Test cell: 18-composed-step-bytes-test
Says: the bytes sent along tp, as the trace counts them, should be
    64
but they are
    128
Or says: the first stage's input is data, which needs no gradient
"""

from composed import composed_step_with


def composed_step(params, x, target, mesh, num_microbatches):
    return composed_step_with(params, x, target, mesh, num_microbatches,
                              input_gradient_on_first=True)
