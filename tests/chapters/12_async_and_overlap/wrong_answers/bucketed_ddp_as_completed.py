r"""Each bucket started as soon as it is complete, not in bucket order.

Answer cell: 12-bucketed-ddp
Test cell: 12-bucketed-ddp-buckets-test
Says: model='reversed', bucket_cap_bytes=1100, steps=3, step=0), the bytes of the step's \
    all_reduce calls, in the order they were started (one per bucket, bucket 0 first: every rank \
    starts them in bucket order) should be
        [640, 1040, 256]
    but it is
        [256, 1040, 640]
"""

from ddp import ReplicatedBuckets


class BucketedDDP(ReplicatedBuckets):
    def __init__(self, module, bucket_cap_bytes):
        super().__init__(module, bucket_cap_bytes)
        self.bucket_of = {p: i for i, bucket in enumerate(self.buckets) for p in bucket}
        self.pending = [len(bucket) for bucket in self.buckets]
        for param in self.trainable:
            param.register_post_accumulate_grad_hook(self._gradient_ready)

    def _gradient_ready(self, param):
        i = self.bucket_of[param]
        self.pending[i] -= 1
        if self.pending[i] == 0:
            self.start(self.buckets[i])

    def finish_gradient_synchronization(self):
        self.wait_for_buckets()
        self.pending = [len(bucket) for bucket in self.buckets]
