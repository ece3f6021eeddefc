"""Chapter 08's MoE layer, the parts its wrong answers share: which tokens each expert keeps,
and the split sizes the two all-to-alls use."""


def kept_tokens(expert_of_token, capacity):
    """The tokens this rank sends, sorted by expert (the first `capacity` of each expert, in
    order), and how many go to each expert."""
    order = torch.argsort(expert_of_token, stable=True)
    counts = torch.bincount(expert_of_token, minlength=dist.get_world_size())
    starts = torch.cumsum(counts, 0) - counts
    place = torch.arange(len(order)) - starts[expert_of_token[order]]
    return order[place < capacity], counts.clamp(max=capacity)


def split_sizes(send_counts):
    """The counts exchanged first: how many tokens this rank sends to each rank, and how many it
    receives from each, as lists."""
    recv_counts = torch.empty_like(send_counts)
    dist.all_to_all_single(recv_counts, send_counts)
    return send_counts.tolist(), recv_counts.tolist()


class ForwardAllToAll(torch.autograd.Function):
    """AllToAll's forward step, which its answers share: each rank's rows sent to the ranks in
    ``input_split_sizes``, those received stacked by ``output_split_sizes``."""

    @staticmethod
    def forward(ctx, input, output_split_sizes, input_split_sizes):
        ctx.split_sizes = output_split_sizes, input_split_sizes
        output = input.new_empty((sum(output_split_sizes), *input.shape[1:]))
        dist.all_to_all_single(output, input.contiguous(), output_split_sizes=output_split_sizes,
                               input_split_sizes=input_split_sizes)
        return output
