r"""The backward pass hands the gradient back as it came, without the reverse all-to-all: each
row's gradient stays on the expert's rank instead of going home.

Answer cell: 08-all-to-all-function
Test cell: 08-moe-layer-test
Says: with the reverse all_to_all_single
"""


class AllToAll(torch.autograd.Function):
    @staticmethod
    def forward(ctx, input, output_split_sizes, input_split_sizes):
        output = input.new_empty((sum(output_split_sizes), *input.shape[1:]))
        dist.all_to_all_single(output, input.contiguous(), output_split_sizes=output_split_sizes,
                               input_split_sizes=input_split_sizes)
        return output

    @staticmethod
    def backward(ctx, grad_output):
        return grad_output, None, None
