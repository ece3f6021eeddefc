r"""Every call started, then every handle's future waited for at once: right for the values test and
for the order test.

Answer cell: 12-average-all
Test cell: 12-average-all-test, 12-average-all-order-test
"""


def average_all(tensors):
    works = [dist.all_reduce(tensor, async_op=True) for tensor in tensors]
    torch.futures.wait_all([work.get_future() for work in works])
    for tensor in tensors:
        tensor /= dist.get_world_size()
