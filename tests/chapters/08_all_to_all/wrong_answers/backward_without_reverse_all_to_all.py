r"""The backward pass hands the gradient back as it came, without the reverse all-to-all: each
row's gradient stays on the expert's rank instead of going home.

Answer cell: 08-all-to-all-function
Test cell: 08-moe-layer-test
Says: with the reverse all_to_all_single
"""

from moe import ForwardAllToAll


class AllToAll(ForwardAllToAll):
    @staticmethod
    def backward(ctx, grad_output):
        return grad_output, None, None
