r"""Every call started, then each handle's future waited for in turn: right for the values test and
for the order test.

Answer cell: 12-average-all
Test cell: 12-average-all-test, 12-average-all-order-test
"""


def average_all(tensors):
    futures = [dist.all_reduce(tensor, async_op=True).get_future() for tensor in tensors]
    for future, tensor in zip(futures, tensors):
        future.wait()
        tensor /= dist.get_world_size()
