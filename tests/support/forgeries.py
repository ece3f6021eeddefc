"""Hostile submissions, one attack each, on chapters 00 to 17: what a student who wants the
points without the work could hand in. :mod:`tests.test_forgery` grades them as a class.

Each entry: student -> (chapter, notebook, the test cell the attack aims at). The attacks make
no honest attempt: every one of them must score 0 on the test it aims at.
"""

from __future__ import annotations

import nbformat

from .class_factory import _cell_index, _with_answer, correct, release

# --- recomputing what other ranks hold -----------------------------------------------------------

RECOMPUTES_INPUTS = '''\
def my_broadcast(tensor, src):
    # every rank makes rank src's input itself, as the test's case function does
    tensor.copy_(checks.private_tensor(src, tuple(tensor.shape), tensor.dtype))
'''

READS_THE_CALLER = '''\
def my_broadcast(tensor, src):
    # looks for rank src's data in the frames and objects of the rank's process
    import gc, sys, torch
    frame = sys._getframe(1)
    while frame is not None:
        for value in list(frame.f_locals.values()) + list(frame.f_globals.values()):
            if isinstance(value, torch.Tensor) and value is not tensor \\
                    and value.shape == tensor.shape and value.dtype == tensor.dtype:
                tensor.copy_(value)
        frame = frame.f_back
    for value in gc.get_objects():
        if isinstance(value, bytes) and len(value) == 32:  # other ranks' keys?
            pass
'''

CALLS_THE_CHECKS = '''\
def share_initial_weights(model_state, src=0):
    # what the test's check does for rank src: rank src's seed, then the same layers
    import torch
    torch.manual_seed(checks.private_seed(src, "model"))
    weights = [t for name, t in model_state.items() if name.endswith("weight")]
    layers = [torch.nn.Linear(w.shape[1], w.shape[0]) for w in weights]
    expected = torch.nn.Sequential(*layers).state_dict()
    for name, tensor in model_state.items():
        tensor.copy_(expected[name])
'''

# --- forging the trace ---------------------------------------------------------------------------

FORGES_ITS_TRACE = '''\
def my_broadcast(tensor, src):
    # no communication: records of the sends and receives the test wants, made up
    import dataclasses
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
'''

# my_all_reduce by gathering every rank's whole tensor (world_size / 2 times the bytes), with the
# all_gather taken out of the trace and the two calls of the intended answer put in its place
HIDES_AN_ALL_GATHER = '''\
def my_all_reduce(tensor):
    from commlab import trace
    recorder = trace.current()
    world_size = dist.get_world_size()
    pieces = [torch.empty_like(tensor) for _ in range(world_size)]
    dist.all_gather(pieces, tensor)
    gathered = recorder.calls.pop()
    tensor.copy_(sum(pieces))
    chunk = -(-tensor.numel() // world_size)
    whole = trace.TensorInfo.of(torch.empty(chunk * world_size, dtype=tensor.dtype))
    part = trace.TensorInfo.of(torch.empty(chunk, dtype=tensor.dtype))
    others = {p: part.nbytes for p in gathered.group_ranks if p != gathered.rank}
    for op, tensors in (("reduce_scatter_tensor", {"output": part, "input": whole}),
                        ("all_gather_into_tensor", {"output_tensor": whole,
                                                    "input_tensor": part})):
        recorder.calls.append(trace.Call(
            op=op, index=1, seq=len(recorder.calls), rank=gathered.rank,
            group_ranks=gathered.group_ranks, tensors=tensors, reduce_op="SUM"
            if op.startswith("reduce") else None, sent_to=dict(others),
            received_from=dict(others)))
'''

# --- channels other than the process group -------------------------------------------------------

_SHARE = '''\
def my_broadcast(tensor, src):
    import time
    rank = dist.get_rank()
    data = tensor.numpy().tobytes()
    if rank == src:
        put(data)
    else:
        deadline = time.time() + 3
        while time.time() < deadline:
            got = take(len(data))
            if got:
                tensor.copy_(torch.frombuffer(bytearray(got), dtype=tensor.dtype)
                             .reshape(tensor.shape))
                return
            time.sleep(0.05)
'''

SHARES_A_FILE = '''\
import os
def put(data):
    for folder in ("/tmp", "/dev/shm", os.getcwd()):
        try:
            open(os.path.join(folder, "commlab-forgery"), "wb").write(data)
        except OSError:
            pass
def take(size):
    for folder in ("/tmp", "/dev/shm", os.getcwd()):
        try:
            return open(os.path.join(folder, "commlab-forgery"), "rb").read()
        except OSError:
            pass
''' + _SHARE

SHARES_MEMORY = '''\
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
KEY = 0x0C0FFEE
def put(data):
    shmid = libc.shmget(KEY, 4096, 0o1000 | 0o666)
    address = libc.shmat(shmid, None, 0)
    ctypes.memmove(address, data, len(data))
def take(size):
    shmid = libc.shmget(KEY, 4096, 0o666)
    if shmid < 0:
        return None
    address = libc.shmat(shmid, None, 0)
    return ctypes.string_at(address, size)
''' + _SHARE

SHARES_A_UNIX_SOCKET = '''\
import socket
def put(data):
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind("\\0commlab-forgery")
    server.listen(8)
    server.settimeout(3)
    for _ in range(dist.get_world_size() - 1):
        connection, _ = server.accept()
        connection.sendall(data)
def take(size):
    try:
        client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        client.connect("\\0commlab-forgery")
        return client.recv(size)
    except OSError:
        return None
''' + _SHARE

USES_THE_STORE = '''\
def put(data):
    dist.distributed_c10d._get_default_store().set("commlab-forgery", data)
def take(size):
    store = dist.distributed_c10d._get_default_store()
    return store.get("commlab-forgery") if store.check(["commlab-forgery"]) else None
''' + _SHARE

OPENS_ITS_OWN_CONNECTION = '''\
import socket
PORT = 47123
def put(data):
    server = socket.create_server(("127.0.0.1", PORT))
    server.settimeout(3)
    for _ in range(dist.get_world_size() - 1):
        connection, _ = server.accept()
        connection.sendall(data)
        connection.close()
    server.close()
def take(size):
    try:
        with socket.create_connection(("127.0.0.1", PORT), timeout=1) as client:
            return client.recv(size)
    except OSError:
        return None
''' + _SHARE

SENDS_DATAGRAMS = '''\
import socket
PORT = 47124
_mine = None
def put(data):
    sender = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    for _ in range(40):
        sender.sendto(data, ("127.0.0.1", PORT))
        __import__("time").sleep(0.05)
def take(size):
    global _mine
    if _mine is None:
        _mine = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        _mine.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        _mine.bind(("127.0.0.1", PORT))
        _mine.settimeout(0.05)
    try:
        return _mine.recv(size)
    except OSError:
        return None
''' + _SHARE

# --- lying to the grader -------------------------------------------------------------------------

# A report of its own on the rank's control pipe, before the real one: a test case it was not
# given, with the values the visible case wants (world size and backend are no secret).
LIES_IN_ITS_REPLY = '''\
import os
from commlab import control, plain
def whoami():
    rank, world_size = dist.get_rank(), dist.get_world_size()
    fields = {"returned": [(99, {"rank": rank, "world_size": world_size,
                                 "backend": dist.get_backend()}, 0, 0)],
              "trace": [], "warnings": [], "failure": None, "groups": []}
    control._channel.report(plain.dumps(fields))
    return {"rank": rank, "world_size": world_size, "backend": dist.get_backend()}
'''

# A report that builds, in whoever unpickles it, a report of success for the visible case (whose
# values are no secret): the rank host reads reports as data only, and this one is not.
RUNS_CODE_IN_THE_HOST = '''\
import pickle
from commlab import control, worker
class Forged:
    def __reduce__(self):
        rank, world_size = dist.get_rank(), dist.get_world_size()
        value = {"rank": rank, "world_size": world_size, "backend": dist.get_backend()}
        return (worker.RankReport, ([(0, value, 0, 0)], [], [], None, []))
def whoami():
    control._channel.report(pickle.dumps(Forged()))
    raise NotImplementedError()
'''

# --- what a submission may leave behind, and where it may write ----------------------------------

LEAVES_IPC_BEHIND = '''\
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
shmid = libc.shmget(0x0BADCAFE, 4096, 0o1000 | 0o666)
if shmid >= 0:
    ctypes.memmove(libc.shmat(shmid, None, 0), b"left by a student", 17)
for folder in ("/dev/shm", "/tmp", os.getcwd()):
    try:
        open(os.path.join(folder, "commlab-left-behind"), "w").write("left by a student")
    except OSError:
        pass

def whoami():
    raise NotImplementedError()
'''

FINDS_WHAT_WAS_LEFT = '''\
def whoami():
    import ctypes, os
    libc = ctypes.CDLL(None, use_errno=True)
    found = []
    if libc.shmget(0x0BADCAFE, 4096, 0o666) >= 0:
        found.append("a SysV segment")
    for folder in ("/dev/shm", "/tmp", os.getcwd()):
        if os.path.exists(os.path.join(folder, "commlab-left-behind")):
            found.append(folder)
    return {"found": found}
'''

WRITES_TO_TERMINALS = '''\
def whoami():
    import glob, os
    reached = []
    for path in ["/dev/tty", "/dev/console", "/dev/tty0", "/dev/ptmx", *glob.glob("/dev/pts/*"),
                 *glob.glob("/dev/tty[0-9]*")]:
        try:
            with open(path, "w") as terminal:
                terminal.write("commlab-forgery: a student writes here\\n")
            reached.append(path)
        except OSError:
            pass
    return {"reached": reached, "devices": sorted(os.listdir("/dev"))}
'''

# --- what a feedback page must not show ----------------------------------------------------------

# what must not be in a page as markup (escaped, as text, they may)
MARKERS = ("<script>alert('student-1')", "alert('student-2')", "<svg onload=",
           "<img src=x onerror", "<script>student-4")


def scripts_in_outputs():
    """A correct notebook handed in with outputs and a Markdown cell that would run script in a
    reader's browser."""
    nb = correct("00_launching_ranks")
    cell = nbformat.v4.new_code_cell("show()")
    cell.outputs = [
        nbformat.v4.new_output("display_data", data={
            "text/html": "<script>alert('student-1')</script>", "text/plain": "plain"}),
        nbformat.v4.new_output("display_data", data={
            "application/javascript": "alert('student-2')"}),
        nbformat.v4.new_output("display_data", data={
            "image/svg+xml": "<svg onload=\"alert('student-3')\"></svg>"}),
        nbformat.v4.new_output("execute_result", execution_count=1, data={
            "text/markdown": "<img src=x onerror=alert('student-5')>"}),
    ]
    nb.cells.insert(_cell_index(nb, "00-whoami") + 1, cell)
    nb.cells.insert(1, nbformat.v4.new_markdown_cell(
        "<script>student-4</script> and <img src=x onerror=alert('student-6')>"))
    return nb


# Right on the visible case (4 ranks, src 0), and on nothing else: prints what it was given.
PRINTS_HIDDEN_CASES = '''\
MARK = "HIDDEN-CASE" + "-MARKER"  # so that the page's copy of this cell does not hold it

def my_broadcast(tensor, src):
    rank, world_size = dist.get_rank(), dist.get_world_size()
    print(f"{MARK} world_size={world_size} src={src} shape={tuple(tensor.shape)}")
    if world_size != 4 or src != 0 or tensor.dtype != torch.float32:
        raise RuntimeError(f"{MARK} {world_size} {src} {tensor.dtype}")
    if rank == src:
        for dst in range(world_size):
            if dst != src:
                dist.send(tensor, dst=dst)
    else:
        dist.recv(tensor, src=src)
'''


# --- the same kinds of attack on later chapters ---------------------------------------------------

# 02: rank src's piece for this rank, made on this rank from the test's own input maker
MAKES_ITS_PIECE = '''\
def my_scatter(tensor, scatter_list, src):
    rank = dist.get_rank()
    tensor.copy_(checks.private_tensor(src, tuple(tensor.shape), tensor.dtype, "piece", rank))
'''

# 05: the test's own maker of each rank's losses, found in the calling frame, for every rank
CALLS_THE_TEST_FOR_EVERY_RANK = '''\
def global_loss_stats(losses, dst):
    import sys
    caller = sys._getframe(1)
    make = next(f for f in list(caller.f_globals.values()) + list(caller.f_locals.values())
                if callable(f) and getattr(f, "__name__", "") == "losses_of")
    sizes, dtype = caller.f_locals["sizes"], caller.f_locals["dtype"]
    everyone = torch.cat([make(r, size, dtype) for r, size in enumerate(sizes)])
    return everyone.mean().item(), everyone.max().item()
'''

# 07: the collective the exercise forbids, with its record taken out of the trace
DELETES_ITS_RECORD = '''\
def my_reduce_scatter(output, input_list):
    from commlab import trace
    dist.reduce_scatter(output, list(input_list))
    trace.current().calls.pop()
'''

# 08: every block through the rendezvous store: the process group carries nothing
ALL_TO_ALL_THROUGH_THE_STORE = '''\
def my_all_to_all(output_tensor_list, input_tensor_list):
    store = dist.distributed_c10d._get_default_store()
    rank = dist.get_rank()
    for dst, block in enumerate(input_tensor_list):
        store.set(f"forgery/{rank}->{dst}", block.contiguous().numpy().tobytes())
    for src, out in enumerate(output_tensor_list):
        data = store.get(f"forgery/{src}->{rank}")
        if data:
            out.copy_(torch.frombuffer(bytearray(data), dtype=out.dtype).reshape(out.shape))
'''

# 10: dist.all_reduce does the work; the trace reports the ring's 2(n-1) sends and receives of
# the right chunks instead, records a replay would make exactly as written
REPORTS_A_RING_IT_NEVER_RAN = '''\
def ring_all_reduce(tensor):
    import dataclasses
    from commlab import trace
    rank, world_size = dist.get_rank(), dist.get_world_size()
    dist.all_reduce(tensor)
    calls = trace.current().calls
    made = calls.pop()
    chunks = torch.tensor_split(tensor, world_size)
    right, left = (rank + 1) % world_size, (rank - 1) % world_size
    for step in range(2 * (world_size - 1)):
        s = step % (world_size - 1)
        first = step < world_size - 1
        mine = (rank - s) % world_size if first else (rank + 1 - s) % world_size
        theirs = (left - s) % world_size if first else (left + 1 - s) % world_size
        for op, peer, chunk in (("send", right, chunks[mine]), ("recv", left, chunks[theirs])):
            size = chunk.numel() * chunk.element_size()
            calls.append(dataclasses.replace(
                made, op=op, index=step + 1, seq=len(calls), root=peer, reduce_op=None,
                tensors={"tensor": trace.TensorInfo.of(chunk)},
                sent_to={peer: size} if op == "send" else {},
                received_from={peer: size} if op == "recv" else {}))
    return tensor
'''


# 11: the whole tensor all-reduced over the world, hidden; the hierarchy's calls made on zeros,
# for the trace only
HIDES_THE_WORLDS_ALL_REDUCE = '''\
def hierarchical_all_reduce(tensor, intra_group, inter_group):
    per_node = dist.get_world_size(intra_group)
    dist.all_reduce(tensor)                           # the whole tensor across the nodes
    del commlab.trace.current().calls[-1]             # ... hidden from the trace
    shard = torch.zeros(tensor.numel() // per_node, dtype=tensor.dtype)
    dummy = torch.zeros_like(tensor)                  # the hierarchy's calls, for the trace only
    dist.reduce_scatter_tensor(shard, dummy, group=intra_group)
    dist.all_reduce(shard, group=inter_group)
    dist.all_gather_into_tensor(dummy, shard, group=intra_group)
    return tensor
'''

# 11: the right calls on the right groups, on zeros; the gradient from the chapter's public
# helpers, for the whole problem
RIGHT_CALLS_ON_ZEROS = '''\
def dp_tp_gradient(x, target, w_shard, dp_group, tp_group):
    tp_rank, tp_size = dist.get_rank(tp_group), dist.get_world_size(tp_group)
    xs, ts, w = linear_problem(x.shape[0] * dist.get_world_size(dp_group), x.shape[1],
                               target.shape[1], x.dtype)
    dist.all_reduce(torch.zeros(x.shape[0], target.shape[1], dtype=x.dtype), group=tp_group)
    dist.all_reduce(torch.zeros_like(w_shard), group=dp_group)
    return torch.tensor_split(linear_gradient_reference(xs, ts, w), tp_size, dim=0)[tp_rank]
'''

# 12: each bucket all-gathered (more bytes than its all_reduce), hidden; an all_reduce of zeros
# for the trace
GATHERS_THE_BUCKETS_HIDDEN = '''\
class BucketedDDP(torch.nn.Module):
    def __init__(self, module, bucket_cap_bytes):
        super().__init__()
        self.module = module
        for param in module.parameters():
            dist.broadcast(param.data, src=0)
        trainable = [param for param in module.parameters() if param.requires_grad]
        self.buckets = make_buckets(trainable, bucket_cap_bytes)

    def forward(self, *inputs):
        return self.module(*inputs)

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
'''

# 13: ZeRO-3 whose gradient is all-reduced whole, hidden; a reduce_scatter of zeros for show
HIDES_THE_WHOLE_GRADIENT = '''\
def train_zero3(model, batches, lr=0.1):
    rank, world_size = dist.get_rank(), dist.get_world_size()
    params = list(model.parameters())
    numel = sum(p.numel() for p in params)
    padded = flat_padded(params, world_size).detach()
    shard = torch.empty(padded.numel() // world_size)
    dist.scatter(shard, list(torch.chunk(padded, world_size)) if rank == 0 else None, src=0)
    del padded
    for param in params:
        param.untyped_storage().resize_(0)
    losses = []
    for x, y in batches:
        full = shard.new_empty(world_size * shard.numel())
        dist.all_gather_into_tensor(full, shard)
        torch.nn.utils.vector_to_parameters(full[:numel], params)
        x_mine = torch.tensor_split(x, world_size)[rank]
        y_mine = torch.tensor_split(y, world_size)[rank]
        loss = torch.nn.functional.mse_loss(model(x_mine), y_mine)
        loss.backward()
        flat = flat_padded([p.grad for p in params], world_size)
        dist.all_reduce(flat)                         # the whole gradient ...
        del commlab.trace.current().calls[-1]         # ... hidden from the trace
        grad_shard = torch.chunk(flat, world_size)[rank].clone()
        dist.reduce_scatter_tensor(torch.empty_like(shard), torch.zeros_like(flat))  # for show
        shard -= lr * grad_shard / world_size
        for param in params:
            param.grad = None
        full.untyped_storage().resize_(0)
        reported = loss.detach().reshape(1)
        dist.all_reduce(reported)
        losses.append(reported.item() / world_size)
    return losses
'''

# 14: sequence parallelism whose backward all-reduces the whole gradient, hidden; a
# reduce_scatter of zeros for the trace
HIDES_AN_ALL_REDUCE_IN_BACKWARD = '''\
class GatherFromSequenceParallel(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x_rows, group):
        ctx.group = group
        output = x_rows.new_empty((dist.get_world_size(group) * x_rows.shape[0],
                                   *x_rows.shape[1:]))
        dist.all_gather_into_tensor(output, x_rows.contiguous(), group=group)
        return output

    @staticmethod
    def backward(ctx, grad_output):
        # an all_reduce of the whole gradient, hidden, and a reduce_scatter of zeros for the trace
        rank, size = dist.get_rank(ctx.group), dist.get_world_size(ctx.group)
        grad = grad_output.clone()
        dist.all_reduce(grad, group=ctx.group)
        del commlab.trace.current().calls[-1]
        rows = grad.shape[0] // size
        dist.reduce_scatter_tensor(grad.new_empty((rows, *grad.shape[1:])),
                                   torch.zeros_like(grad), group=ctx.group)
        return grad[rank * rows:(rank + 1) * rows].clone(), None


class ReduceScatterToSequenceParallel(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        output = x.new_empty((x.shape[0] // dist.get_world_size(group), *x.shape[1:]))
        dist.reduce_scatter_tensor(output, x.contiguous(), group=group)
        return output

    @staticmethod
    def backward(ctx, grad_output):
        grad = grad_output.new_empty((dist.get_world_size(ctx.group) * grad_output.shape[0],
                                      *grad_output.shape[1:]))
        dist.all_gather_into_tensor(grad, grad_output.contiguous(), group=ctx.group)
        return grad, None
'''

# 15: no communication: the whole model and batch rebuilt from the chapter's public helpers
REBUILDS_THE_WHOLE_MODEL = '''\
def gpipe(stage, x, target, num_microbatches):
    # no communication: the whole model and batch rebuilt from the public make_stage, make_batch
    rank, world_size = dist.get_rank(), dist.get_world_size()
    gradients, loss = reference_step(world_size, x.shape[0], x.dtype)
    for param, grad in zip(stage.parameters(), gradients[rank]):
        param.grad = grad.to(param.device)
    inputs = torch.tensor_split(x, num_microbatches)
    for i in range(num_microbatches):                 # the forward steps, for the count
        forward_step(stage, inputs[i].nan_to_num(), None, num_microbatches)
    return loss if rank == world_size - 1 else None
'''

# 16: every block all-gathered at once, hidden; the ring's messages made on zeros, for the trace
GATHERS_EVERY_BLOCK_HIDDEN = '''\
def ring_attention(q, k, v):
    rank, world_size = dist.get_rank(), dist.get_world_size()
    ks = [torch.empty_like(k) for _ in range(world_size)]
    vs = [torch.empty_like(v) for _ in range(world_size)]
    dist.all_gather(ks, k)                            # every block at once ...
    dist.all_gather(vs, v)
    del commlab.trace.current().calls[-2:]            # ... hidden from the trace
    output = lse = None
    for kb, vb in zip(ks, vs):
        output, lse = merge_blocks(output, lse, *block_attention(q, kb, vb))
    a, b = torch.zeros_like(k), torch.zeros_like(v)   # the ring's messages, for the trace only
    for step in range(world_size - 1):
        na, nb = torch.empty_like(a), torch.empty_like(b)
        ops = [dist.P2POp(dist.isend, a, (rank + 1) % world_size),
               dist.P2POp(dist.isend, b, (rank + 1) % world_size),
               dist.P2POp(dist.irecv, na, (rank - 1) % world_size),
               dist.P2POp(dist.irecv, nb, (rank - 1) % world_size)]
        for handle in dist.batch_isend_irecv(ops):
            handle.wait()
    return output
'''


# 16: causal ring attention from every rank's blocks, made on every rank with the test's own
# generator: nothing received
MAKES_EVERY_CAUSAL_BLOCK = '''\
def causal_ring_attention(q, k, v):
    rank, world_size = dist.get_rank(), dist.get_world_size()
    if q.shape[1] % 2:
        raise ValueError("an odd number of positions")
    chunks = [[None] * (2 * world_size) for _ in range(3)]
    for r in range(world_size):
        generator = checks.private_generator(r, "causal qkv")
        for whole in chunks:
            block = torch.randn(q.shape, generator=generator, dtype=torch.float64).to(q.dtype)
            whole[r], whole[2 * world_size - 1 - r] = block.chunk(2, dim=1)
    q, k, v = (torch.cat(whole, dim=1) for whole in chunks)
    causal = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    return load_balanced(causal, rank, world_size)
'''


# 17: every rank steps the whole unsharded optimizer on its own gradients; the sharded
# optimizer's reduce and broadcast made on copies, for the trace and the network
STEPS_THE_WHOLE_OPTIMIZER = '''\
class ShardedOptimizer(torch.optim.Optimizer):
    # every rank steps the whole unsharded optimizer on its own gradients; the reduce and
    # broadcast calls of the intended answer are made on copies, for the trace and the network
    def __init__(self, params, optimizer_cls, **kwargs):
        self.optimizer_cls, self.kwargs, self.whole = optimizer_cls, kwargs, None
        self.owner, self.owned = {}, [0] * dist.get_world_size()
        super().__init__(params, kwargs)

    def add_param_group(self, param_group):
        super().add_param_group(param_group)
        group = self.param_groups[-1]
        for param in group["params"]:
            self.owner[param] = least_loaded(self.owned)
            self.owned[self.owner[param]] += param.numel()
        if self.whole is None:
            self.whole = self.optimizer_cls([dict(group)], **self.kwargs)
        else:
            self.whole.add_param_group(dict(group))

    def step(self, closure=None):
        for group, whole in zip(self.param_groups, self.whole.param_groups):
            whole.update({k: v for k, v in group.items() if k != "params"})
        trained = [p for g in self.param_groups for p in g["params"] if p.grad is not None]
        for param in trained:
            dist.reduce(param.grad.clone(), dst=self.owner[param])
        self.whole.step()
        for param in trained:
            dist.broadcast(param.detach().clone(), src=self.owner[param])
'''


def students() -> dict[str, tuple[str, object, str]]:
    """student -> (chapter, notebook, grade id of the test the attack aims at)."""
    broadcast = "01_broadcast"

    def answer(chapter: str, grade_id: str, source: str, base=None):
        return _with_answer(grade_id, source, base if base is not None else release(chapter))

    found = {
        "recomputes_inputs": (broadcast, answer(broadcast, "01-my-broadcast", RECOMPUTES_INPUTS),
                              "01-my-broadcast-test"),
        "reads_the_caller": (broadcast, answer(broadcast, "01-my-broadcast", READS_THE_CALLER),
                             "01-my-broadcast-test"),
        "calls_the_checks": (broadcast, answer(broadcast, "01-share-initial-weights",
                                               CALLS_THE_CHECKS),
                             "01-share-initial-weights-test"),
        "forges_its_trace": (broadcast, answer(broadcast, "01-my-broadcast", FORGES_ITS_TRACE),
                             "01-my-broadcast-test"),
        "hides_an_all_gather": ("06_all_reduce", answer("06_all_reduce", "06-my-all-reduce",
                                                        HIDES_AN_ALL_GATHER),
                                "06-my-all-reduce-test"),
        "lies_in_its_reply": ("00_launching_ranks", answer("00_launching_ranks", "00-whoami",
                                                           LIES_IN_ITS_REPLY), "00-whoami-test"),
        "runs_code_in_the_host": ("00_launching_ranks", answer(
            "00_launching_ranks", "00-whoami", RUNS_CODE_IN_THE_HOST), "00-whoami-test"),
        "leaves_ipc_behind": ("00_launching_ranks", answer("00_launching_ranks", "00-whoami",
                                                           LEAVES_IPC_BEHIND), "00-whoami-test"),
        "looks_for_what_was_left": ("00_launching_ranks", answer(
            "00_launching_ranks", "00-whoami", FINDS_WHAT_WAS_LEFT), "00-whoami-test"),
        "writes_to_terminals": ("00_launching_ranks", answer(
            "00_launching_ranks", "00-whoami", WRITES_TO_TERMINALS), "00-whoami-test"),
        "prints_hidden_cases": (broadcast, answer(broadcast, "01-my-broadcast",
                                                  PRINTS_HIDDEN_CASES), "01-my-broadcast-test"),
        "scripts_in_outputs": ("00_launching_ranks", scripts_in_outputs(), ""),
    }
    for name, channel in (("shares_a_file", SHARES_A_FILE), ("shares_memory", SHARES_MEMORY),
                          ("shares_a_unix_socket", SHARES_A_UNIX_SOCKET),
                          ("uses_the_store", USES_THE_STORE),
                          ("opens_its_own_connection", OPENS_ITS_OWN_CONNECTION),
                          ("sends_datagrams", SENDS_DATAGRAMS)):
        found[name] = (broadcast, answer(broadcast, "01-my-broadcast", channel),
                       "01-my-broadcast-test")
    for name, chapter, grade_id, source in (
            ("makes_its_piece", "02_scatter", "02-my-scatter", MAKES_ITS_PIECE),
            ("calls_the_test_for_every_rank", "05_reduce", "05-global-loss-stats",
             CALLS_THE_TEST_FOR_EVERY_RANK),
            ("deletes_its_record", "07_reduce_scatter", "07-my-reduce-scatter",
             DELETES_ITS_RECORD),
            ("all_to_all_through_the_store", "08_all_to_all", "08-my-all-to-all",
             ALL_TO_ALL_THROUGH_THE_STORE),
            ("reports_a_ring_it_never_ran", "10_composing_and_cost", "10-ring-all-reduce",
             REPORTS_A_RING_IT_NEVER_RAN),
            ("hides_the_worlds_all_reduce", "11_process_groups", "11-hierarchical-all-reduce",
             HIDES_THE_WORLDS_ALL_REDUCE),
            ("right_calls_on_zeros", "11_process_groups", "11-dp-tp-gradient",
             RIGHT_CALLS_ON_ZEROS),
            ("gathers_the_buckets_hidden", "12_async_and_overlap", "12-bucketed-ddp",
             GATHERS_THE_BUCKETS_HIDDEN),
            ("hides_the_whole_gradient", "13_capstone_training", "13-train-zero3",
             HIDES_THE_WHOLE_GRADIENT),
            ("hides_an_all_reduce_in_backward", "14_tensor_parallel", "14-sequence-parallel",
             HIDES_AN_ALL_REDUCE_IN_BACKWARD),
            ("rebuilds_the_whole_model", "15_pipeline_parallel", "15-gpipe",
             REBUILDS_THE_WHOLE_MODEL),
            ("gathers_every_block_hidden", "16_context_parallel", "16-ring-attention",
             GATHERS_EVERY_BLOCK_HIDDEN),
            ("makes_every_causal_block", "16_context_parallel", "16-causal-ring-attention",
             MAKES_EVERY_CAUSAL_BLOCK),
            ("steps_the_whole_optimizer", "17_sharded_training", "17-sharded-optimizer",
             STEPS_THE_WHOLE_OPTIMIZER)):
        found[name] = (chapter, answer(chapter, grade_id, source), f"{grade_id}-test")
    return found
