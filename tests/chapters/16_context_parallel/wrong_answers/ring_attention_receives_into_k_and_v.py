r"""Overlapped, but each block is received into the k and v it is still reading and sending.

Answer cell: 16-ring-attention
Test cell: 16-ring-attention-overlap-test
Says: the batch_isend_irecv calls (numbered from 1) that receive into memory they send, or into \
    the q, k, v given to ring_attention (receive into new tensors, torch.empty_like: k and v are \
    still read and sent while the transfer runs) should be
        []
    but it is
        [1, 2, 3]
"""

from ring import overlapped


def ring_attention(q, k, v):
    return overlapped(q, k, v, into=lambda step, k, v: (k, v))
