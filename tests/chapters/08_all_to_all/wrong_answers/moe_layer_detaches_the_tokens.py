r"""The tokens are detached before the dispatch: the experts still learn, but no gradient comes
back through them to the tokens.

Answer cell: 08-moe-layer
Test cell: 08-moe-layer-test
Says: none came back through the experts
"""

from moe import kept_tokens, split_sizes


def moe_layer(x, router_weight, expert, capacity):
    expert_of_token, gate = route(x, router_weight)
    kept, send_counts = kept_tokens(expert_of_token, capacity)
    sent, received = split_sizes(send_counts)
    arrived = AllToAll.apply(x[kept].detach(), received, sent)
    returned = AllToAll.apply(expert(arrived), sent, received)
    combined = torch.zeros_like(x).index_copy(0, kept, returned)
    return x + gate[:, None] * combined
