"""Messages that carry nothing, for answers of several chapters that make the right calls and
bytes on zeros and get their values some other way."""


def sends_from(src, like):
    """A broadcast of zeros shaped like ``like``: a send from ``src`` to every other rank."""
    junk = torch.zeros_like(like)
    if dist.get_rank() == src:
        for dst in range(dist.get_world_size()):
            if dst != src:
                dist.send(junk, dst=dst)
    else:
        dist.recv(junk, src=src)


def sends_to(dst, like):
    """A gather of zeros shaped like ``like``: a send to ``dst`` from every other rank."""
    if dist.get_rank() != dst:
        dist.send(torch.zeros_like(like), dst=dst)
        return
    junk = torch.empty_like(like)
    for src in range(dist.get_world_size()):
        if src != dst:
            dist.recv(junk, src=src)
