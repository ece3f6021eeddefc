r"""Exercise 2's dispatch and a plain all_to_all_single back, outside autograd: the outputs are
right, but no gradient reaches the experts or comes back to the tokens.

Answer cell: 08-moe-layer
Test cell: 08-moe-layer-test
Says: the expert's parameters got no gradient
"""

from moe import kept_tokens


def moe_layer(x, router_weight, expert, capacity):
    world_size = dist.get_world_size()
    expert_of_token, gate = route(x, router_weight)
    kept, _ = kept_tokens(expert_of_token, capacity)
    arrived = dispatch_tokens(x[kept], expert_of_token[kept])
    results = expert(arrived)
    send_counts = torch.bincount(expert_of_token[kept], minlength=world_size)
    recv_counts = torch.empty_like(send_counts)
    dist.all_to_all_single(recv_counts, send_counts)
    returned = x.new_empty((len(kept), x.shape[1]))
    dist.all_to_all_single(returned, results, output_split_sizes=send_counts.tolist(),
                           input_split_sizes=recv_counts.tolist())
    combined = torch.zeros_like(x).index_copy(0, kept, returned)
    return x + gate[:, None] * combined
