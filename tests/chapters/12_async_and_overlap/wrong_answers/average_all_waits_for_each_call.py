r"""Each call waited for at once: nothing is in flight together.

Answer cell: 12-average-all
Test cell: 12-average-all-order-test
Says: the number of all_reduce calls this rank had started when rank 3 (held back by the test) \
    made its first one (start them all, then wait: a wait cannot end before every rank made the \
    call) should be
        3
    but it is
        1
"""


def average_all(tensors):
    for tensor in tensors:
        dist.all_reduce(tensor, async_op=True).wait()
        tensor /= dist.get_world_size()
