r"""The balanced way under the older names, dist.reduce_scatter_tensor and
dist.all_gather_into_tensor, which do the same as the _single names the prompt gives.

Answer cell: 06-my-all-reduce
Test cell: 06-my-all-reduce-test
"""


def my_all_reduce(tensor):
    world_size = dist.get_world_size()
    flat = tensor.reshape(-1)
    chunk_numel = -(-flat.numel() // world_size)
    padded = torch.zeros(chunk_numel * world_size, dtype=tensor.dtype, device=tensor.device)
    padded[:flat.numel()] = flat
    chunk = torch.empty(chunk_numel, dtype=tensor.dtype, device=tensor.device)
    dist.reduce_scatter_tensor(chunk, padded)
    dist.all_gather_into_tensor(padded, chunk)
    tensor.copy_(padded[:flat.numel()].view_as(tensor))
