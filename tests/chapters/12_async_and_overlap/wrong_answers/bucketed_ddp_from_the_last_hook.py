r"""The hooks count the gradients, but every bucket starts from the last one: no overlap.

Answer cell: 12-bucketed-ddp
Test cell: 12-bucketed-ddp-buckets-test
Says: should be
        [True, True, True]
    but it is
        [False, False, True]
"""

from ddp import ReplicatedBuckets


class BucketedDDP(ReplicatedBuckets):
    def __init__(self, module, bucket_cap_bytes):
        super().__init__(module, bucket_cap_bytes)
        self.pending = sum(len(bucket) for bucket in self.buckets)
        for param in self.trainable:
            param.register_post_accumulate_grad_hook(self._gradient_ready)

    def _gradient_ready(self, param):
        self.pending -= 1
        if self.pending == 0:
            for bucket in self.buckets:
                self.start(bucket)

    def finish_gradient_synchronization(self):
        self.wait_for_buckets()
        self.pending = sum(len(bucket) for bucket in self.buckets)
