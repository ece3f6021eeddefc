r"""Right on the visible case (4 ranks, src 0), and on nothing else: prints what it was given.

Answer cell: 01-my-broadcast
Test cell: 01-my-broadcast-test
"""

from channel import honest_broadcast

MARK = "HIDDEN-CASE" + "-MARKER"  # so that the page's copy of this cell does not hold it

def my_broadcast(tensor, src):
    world_size = dist.get_world_size()
    print(f"{MARK} world_size={world_size} src={src} shape={tuple(tensor.shape)}")
    if world_size != 4 or src != 0 or tensor.dtype != torch.float32:
        raise RuntimeError(f"{MARK} {world_size} {src} {tensor.dtype}")
    honest_broadcast(tensor, src)
