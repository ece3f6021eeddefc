r"""A hook on every parameter, the frozen one too: torch refuses it.

Answer cell: 12-bucketed-ddp
Test cell: 12-bucketed-ddp-test
Says: when run on 2 ranks (model='frozen', bucket_cap_bytes=1100, steps=3)
Or says: cannot register a hook on a tensor that doesn't require gradient
"""

from ddp import ReplicatedBuckets


class BucketedDDP(ReplicatedBuckets):
    def __init__(self, module, bucket_cap_bytes):
        super().__init__(module, bucket_cap_bytes)
        self.bucket_of = {p: i for i, bucket in enumerate(self.buckets) for p in bucket}
        self.pending = [len(bucket) for bucket in self.buckets]
        self.next_bucket = 0
        for param in module.parameters():
            param.register_post_accumulate_grad_hook(self._gradient_ready)

    def _gradient_ready(self, param):
        self.pending[self.bucket_of[param]] -= 1
        while self.next_bucket < len(self.buckets) and self.pending[self.next_bucket] == 0:
            self.start(self.buckets[self.next_bucket])
            self.next_bucket += 1

    def finish_gradient_synchronization(self):
        self.wait_for_buckets()
        self.next_bucket = 0
        self.pending = [len(bucket) for bucket in self.buckets]
