r"""Each bucket all-gathered (more bytes than its all_reduce), hidden; an all_reduce of zeros for
the trace.

Answer cell: 12-bucketed-ddp
Test cell: 12-bucketed-ddp-test
"""

from ddp import ReplicatedBuckets


class BucketedDDP(ReplicatedBuckets):
    def finish_gradient_synchronization(self):
        world_size = dist.get_world_size()
        for bucket in self.buckets:
            flat = torch.cat([p.grad.reshape(-1) for p in bucket])
            gathered = [torch.empty_like(flat) for _ in range(world_size)]
            dist.all_gather(gathered, flat)           # more bytes than an all_reduce ...
            del commlab.trace.current().calls[-1]     # ... hidden from the trace
            dist.all_reduce(torch.zeros_like(flat))   # the bucket's call, for the trace only
            average = sum(gathered) / world_size
            for param, part in zip(bucket, average.split([p.numel() for p in bucket])):
                param.grad.copy_(part.view_as(param.grad))
