r"""The tokens are detached before the dispatch: the experts still learn, but no gradient comes
back through them to the tokens.

Answer cell: 08-moe-layer
Test cell: 08-moe-layer-test
Says: none came back through the experts
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
    arrived = AllToAll.apply(x[kept].detach(), received, sent)
    returned = AllToAll.apply(expert(arrived), sent, received)
    combined = torch.zeros_like(x).index_copy(0, kept, returned)
    return x + gate[:, None] * combined
