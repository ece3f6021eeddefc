r"""The backward pass runs an all-to-all, but with the forward's split sizes, not swapped.

Answer cell: 08-all-to-all-function
Test cell: 08-moe-layer-test
Says: the two split-size lists trade
"""

from moe import ForwardAllToAll


class AllToAll(ForwardAllToAll):
    @staticmethod
    def backward(ctx, grad_output):
        output_split_sizes, input_split_sizes = ctx.split_sizes
        grad_input = grad_output.new_empty((sum(input_split_sizes), *grad_output.shape[1:]))
        dist.all_to_all_single(grad_input, grad_output.contiguous(),
                               output_split_sizes=output_split_sizes,
                               input_split_sizes=input_split_sizes)
        return grad_input, None, None
