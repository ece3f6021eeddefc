r"""Every token goes to its expert: the capacity is never applied, nothing is dropped.

Answer cell: 08-moe-layer
Test cell: 08-moe-layer-test
Says: the layer dropped no token
"""


def moe_layer(x, router_weight, expert, capacity):
    world_size = dist.get_world_size()
    expert_of_token, gate = route(x, router_weight)
    order = torch.argsort(expert_of_token, stable=True)
    send_counts = torch.bincount(expert_of_token, minlength=world_size)
    recv_counts = torch.empty_like(send_counts)
    dist.all_to_all_single(recv_counts, send_counts)
    sent, received = send_counts.tolist(), recv_counts.tolist()
    arrived = AllToAll.apply(x[order], received, sent)
    returned = AllToAll.apply(expert(arrived), sent, received)
    combined = torch.zeros_like(x).index_copy(0, order, returned)
    return x + gate[:, None] * combined
