"""What the attacks through a channel of their own share (shares_a_file, shares_memory,
shares_a_unix_socket, uses_the_store, opens_its_own_connection, sends_datagrams): my_broadcast
over the attack's ``put`` and ``take``; and where another rank listens."""

import os
import socket
import time


def broadcast_through(put, take, tensor, src):
    """Src puts its tensor's bytes into the channel; every other rank polls it for three
    seconds."""
    data = tensor.numpy().tobytes()
    if dist.get_rank() == src:
        put(data)
        return
    deadline = time.time() + 3
    while time.time() < deadline:
        got = take(len(data))
        if got:
            tensor.copy_(torch.frombuffer(bytearray(got), dtype=tensor.dtype)
                         .reshape(tensor.shape))
            return
        time.sleep(0.05)


def address_of(rank):
    """Rank ``rank``'s address, as a rank can work it out: the loopback when the ranks share
    it, else the rank's place in the subnet of its own address (no packet leaves: a UDP socket
    only picks the address it would send from)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect((os.environ["MASTER_ADDR"], 1))
        own = probe.getsockname()[0]
    return own if own.startswith("127.") else own.rsplit(".", 1)[0] + f".{rank + 1}"


def honest_broadcast(tensor, src):
    """The intended answer: src sends its tensor straight to every other rank."""
    if dist.get_rank() == src:
        for dst in range(dist.get_world_size()):
            if dst != src:
                dist.send(tensor, dst=dst)
    else:
        dist.recv(tensor, src=src)
