r"""Tokens over the capacity come out as zeros instead of passing through unchanged.

Answer cell: 08-moe-layer
Test cell: 08-moe-layer-test
Says: the tokens over the capacity came out as zeros
"""

from moe import kept_tokens, split_sizes


def moe_layer(x, router_weight, expert, capacity):
    expert_of_token, gate = route(x, router_weight)
    kept, send_counts = kept_tokens(expert_of_token, capacity)
    sent, received = split_sizes(send_counts)
    arrived = AllToAll.apply(x[kept], received, sent)
    returned = AllToAll.apply(expert(arrived), sent, received)
    output = torch.zeros_like(x).index_copy(0, kept, x[kept] + gate[kept, None] * returned)
    return output
