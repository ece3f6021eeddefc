r"""The ring the other way round: at step s this rank holds the block of rank + s.

Answer cell: 16-causal-ring-attention
Test cell: 16-causal-ring-attention-test
"""

from causal_ring import causal_ring_with


def causal_ring_attention(q, k, v):
    return causal_ring_with(q, k, v, backwards=True)
