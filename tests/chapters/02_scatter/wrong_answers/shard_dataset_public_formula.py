r"""A scatter of zeros; each rank's shard cut from src's dataset made on every rank from a public
formula.

Answer cell: 02-shard-dataset
Test cell: 02-shard-dataset-test
Says: the shard returned by shard_dataset should be
"""


def shard_dataset(dataset, shape, dtype, src=0):
    rank, world_size = dist.get_rank(), dist.get_world_size()
    rows = shape[0] // world_size
    shard = torch.empty((rows, *shape[1:]), dtype=dtype)
    junk = [torch.zeros_like(shard) for _ in range(world_size)] if rank == src else None
    dist.scatter(shard, scatter_list=junk, src=src)
    return checks.rank_tensor(src, shape, dtype)[rank * rows:(rank + 1) * rows]
