r"""The backward pass runs an all-to-all, but with the forward's split sizes, not swapped.

Answer cell: 08-all-to-all-function
Test cell: 08-moe-layer-test
Says: with the reverse all_to_all_single
"""


class AllToAll(torch.autograd.Function):
    @staticmethod
    def forward(ctx, input, output_split_sizes, input_split_sizes):
        ctx.split_sizes = output_split_sizes, input_split_sizes
        output = input.new_empty((sum(output_split_sizes), *input.shape[1:]))
        dist.all_to_all_single(output, input.contiguous(), output_split_sizes=output_split_sizes,
                               input_split_sizes=input_split_sizes)
        return output

    @staticmethod
    def backward(ctx, grad_output):
        output_split_sizes, input_split_sizes = ctx.split_sizes
        grad_input = grad_output.new_empty((sum(input_split_sizes), *grad_output.shape[1:]))
        dist.all_to_all_single(grad_input, grad_output.contiguous(),
                               output_split_sizes=output_split_sizes,
                               input_split_sizes=input_split_sizes)
        return grad_input, None, None
