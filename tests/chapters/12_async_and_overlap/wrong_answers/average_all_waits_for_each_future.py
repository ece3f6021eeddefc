r"""The same through futures: each waited for before the next is started.

Answer cell: 12-average-all
Test cell: 12-average-all-order-test
Says: made its first one (start them all, then wait: a wait cannot end before every rank made the \
    call) should be
        3
    but it is
        1
"""


def average_all(tensors):
    for tensor in tensors:
        dist.all_reduce(tensor, async_op=True).get_future().wait()
        tensor /= dist.get_world_size()
