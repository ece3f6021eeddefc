r"""The given check deleted: an odd number of positions is cut into chunks of 2 and 1.

Answer cell: 16-causal-ring-attention
Test cell: 16-causal-ring-attention-test
Says: On rank 0 (world_size=2, heads=1, seq_len=6, head_dim=2, dtype=torch.float32, scale=1.0), \
    what causal_ring_attention raised for a sequence that does not cut into 2 x world_size chunks \
    (an odd number of positions on each rank) should be
        'ValueError'
"""

from causal_ring import causal_ring_with


def causal_ring_attention(q, k, v):
    return causal_ring_with(q, k, v, check=False)
