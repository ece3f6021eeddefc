r"""No communication: records of the sends and receives the test wants, made up.

Answer cell: 01-my-broadcast
Test cell: 01-my-broadcast-test
Says: than the calls your trace lists send
"""


def my_broadcast(tensor, src):
    from commlab import trace
    recorder = trace.current()
    rank, world_size = dist.get_rank(), dist.get_world_size()
    size = tensor.numel() * tensor.element_size()
    peers = [p for p in range(world_size) if p != rank] if rank == src else [src]
    for peer in peers:
        op = "send" if rank == src else "recv"
        recorder.calls.append(trace.Call(
            op=op, index=1, seq=len(recorder.calls), rank=rank,
            group_ranks=tuple(range(world_size)), root=peer,
            tensors={"tensor": trace.TensorInfo.of(tensor)},
            sent_to={peer: size} if op == "send" else {},
            received_from={peer: size} if op == "recv" else {}))
