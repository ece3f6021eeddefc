r"""Two buffers of its own, received into in turn: never the one being read and sent.

Answer cell: 16-ring-attention
Test cell: 16-ring-attention-overlap-test
"""

from ring import overlapped


def ring_attention(q, k, v):
    buffers = [(torch.empty_like(k), torch.empty_like(v)) for _ in range(2)]
    return overlapped(q, k, v, into=lambda step, k, v: buffers[step % 2])
