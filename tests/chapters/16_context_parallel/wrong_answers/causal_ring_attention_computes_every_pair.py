r"""Right values, but the chunk pairs whose keys all come later are computed and thrown away.

Answer cell: 16-causal-ring-attention
Test cell: 16-causal-ring-attention-balance-test
Says: On rank 0 (world_size=4, heads=2, seq_len=16, head_dim=4), the chunk pairs this rank \
    computed, as (calls of block_attention, calls with causal=True): one call per pair of one \
    query chunk and one key chunk at or before it, none for a key chunk after it, as the prompt \
    asks. (Concatenating chunks, to compute several pairs in one call, can give the right values \
    too, as torch's own ring does; this cell grades the calls the prompt describes.) should be
        (7, 2)
    but it is
        (14, 2)
"""

from causal_ring import causal_ring_with


def causal_ring_attention(q, k, v):
    return causal_ring_with(q, k, v, wasted=True)
