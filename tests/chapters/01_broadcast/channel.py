"""What the attacks through a channel of their own share (shares_a_file, shares_memory,
shares_a_unix_socket, uses_the_store, opens_its_own_connection, sends_datagrams): my_broadcast
over the attack's ``put`` and ``take``."""

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
