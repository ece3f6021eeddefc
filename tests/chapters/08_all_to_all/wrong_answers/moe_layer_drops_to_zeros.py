r"""Tokens over the capacity come out as zeros instead of passing through unchanged.

Answer cell: 08-moe-layer
Test cell: 08-moe-layer-test
Says: the tokens over the capacity came out as zeros
"""


def moe_layer(x, router_weight, expert, capacity):
    world_size = dist.get_world_size()
    expert_of_token, gate = route(x, router_weight)
    order = torch.argsort(expert_of_token, stable=True)
    counts = torch.bincount(expert_of_token, minlength=world_size)
    starts = torch.cumsum(counts, 0) - counts
    place = torch.arange(len(order)) - starts[expert_of_token[order]]
    kept = order[place < capacity]
    send_counts = counts.clamp(max=capacity)
    recv_counts = torch.empty_like(send_counts)
    dist.all_to_all_single(recv_counts, send_counts)
    sent, received = send_counts.tolist(), recv_counts.tolist()
    arrived = AllToAll.apply(x[kept], received, sent)
    returned = AllToAll.apply(expert(arrived), sent, received)
    output = torch.zeros_like(x).index_copy(0, kept, x[kept] + gate[kept, None] * returned)
    return output
