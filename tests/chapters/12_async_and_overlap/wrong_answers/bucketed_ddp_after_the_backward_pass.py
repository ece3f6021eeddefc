r"""Right values, but every bucket is all-reduced after the backward pass: no overlap.

Answer cell: 12-bucketed-ddp
Test cell: 12-bucketed-ddp-buckets-test
Says: (world_size=2, model='plain', bucket_cap_bytes=1100, steps=3, step=0), for each bucket, \
    whether its all_reduce started as soon as it could, from the hook of the gradient that \
    completed it (['2.bias', '0.bias', '0.weight'], one per bucket), before the backward pass \
    went on to the next gradient should be
        [True, True, True]
    but it is
        [False, False, False]
"""

from ddp import ReplicatedBuckets


class BucketedDDP(ReplicatedBuckets):
    def finish_gradient_synchronization(self):
        for bucket in self.buckets:
            self.start(bucket)
            self.wait_for_buckets()
