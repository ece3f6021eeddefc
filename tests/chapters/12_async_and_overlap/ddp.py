"""What this chapter's BucketedDDP answers share: rank 0's weights on every rank, the trainable
parameters in buckets, the forward pass, and a bucket's all_reduce started and waited for."""


class ReplicatedBuckets(torch.nn.Module):
    """``module`` with rank 0's weights on every rank and its trainable parameters in buckets
    (``self.trainable``, ``self.buckets``). ``start(bucket)`` starts a bucket's all_reduce;
    ``wait_for_buckets()`` waits for those started and puts each average in the gradients."""

    def __init__(self, module, bucket_cap_bytes):
        super().__init__()
        self.module = module
        for param in module.parameters():
            dist.broadcast(param.data, src=0)
        self.trainable = [param for param in module.parameters() if param.requires_grad]
        self.buckets = make_buckets(self.trainable, bucket_cap_bytes)
        self.works = []

    def forward(self, *inputs):
        return self.module(*inputs)

    def start(self, bucket):
        flat = torch.cat([p.grad.reshape(-1) for p in bucket])
        self.works.append((bucket, flat, dist.all_reduce(flat, async_op=True)))

    def wait_for_buckets(self):
        for bucket, flat, work in self.works:
            work.wait()
            flat /= dist.get_world_size()
            for param, average in zip(bucket, flat.split([p.numel() for p in bucket])):
                param.grad.copy_(average.view_as(param.grad))
        self.works = []
