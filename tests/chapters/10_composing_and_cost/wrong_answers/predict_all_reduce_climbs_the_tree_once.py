r"""The tree's levels climbed once only: half its latency.

Answer cell: 10-predict-all-reduce
Test cell: 10-predict-all-reduce-test
Says: Here (world_size=8, algorithm='tree', size=65536, alpha=1e-05, bandwidth=50000000000.0), \
    predict_all_reduce's (bytes_sent, seconds) should be
        (131072.0, 6.262144000000001e-05)
    but it is
        (131072, 3.262144e-05)
"""

import math


def predict_all_reduce(algorithm, size, world_size, alpha, bandwidth):
    n = world_size
    steps, sent = {"direct": (n - 1, (n - 1) * size),
                   "ring": (2 * (n - 1), 2 * (n - 1) / n * size),
                   "tree": (math.ceil(math.log2(n)), 2 * size)}[algorithm]
    return sent, steps * alpha + sent / bandwidth
