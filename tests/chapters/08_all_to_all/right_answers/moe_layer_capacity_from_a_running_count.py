r"""Keeps a token while its expert's running count (a cumulative sum of one-hot rows) is within
the capacity, sorts the kept ones by expert, and adds the results back with index_add.

Answer cell: 08-moe-layer
Test cell: 08-moe-layer-test, 08-moe-layer-bytes-test
"""


def moe_layer(x, router_weight, expert, capacity):
    world_size = dist.get_world_size()
    expert_of_token, gate = route(x, router_weight)
    one_hot = torch.nn.functional.one_hot(expert_of_token, world_size)
    running = (torch.cumsum(one_hot, 0) * one_hot).sum(1)   # 1 for an expert's first token
    mine = torch.nonzero(running <= capacity).flatten()
    kept = mine[torch.argsort(expert_of_token[mine], stable=True)]
    send_counts = torch.bincount(expert_of_token[kept], minlength=world_size)
    recv_counts = torch.empty_like(send_counts)
    dist.all_to_all_single(recv_counts, send_counts)
    sent, received = send_counts.tolist(), recv_counts.tolist()
    arrived = AllToAll.apply(x[kept], received, sent)
    returned = AllToAll.apply(expert(arrived), sent, received)
    return x.index_add(0, kept, gate[kept, None] * returned)
