"""How long a 4-rank all_reduce cell takes in a real Jupyter kernel, launched three ways.

- the seeds' pattern: ``mp.spawn`` (of an importable function, so that it works at all);
- fork: ``torch.multiprocessing.start_processes(..., start_method="fork")`` of a cell function;
- ``commlab.run``: forkserver with torch preloaded, traced, output captured.

All three run in one kernel, interleaved, so that a noisy machine slows them alike; the
ratios are what to read. Usage: ``make bench`` (or ``.venv/bin/python bench/launch_bench.py``).
"""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

from jupyter_client.manager import start_new_kernel

ROUNDS = {"commlab": 30, "fork": 10, "spawn": 3}

SETUP = textwrap.dedent(f"""
    import os, socket, statistics, sys, time
    sys.path.insert(0, {str(Path(__file__).parent)!r})
    import torch, torch.distributed as dist, torch.multiprocessing as mp
    import seed_pattern

    def free_port():
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]

    def cell_example(rank, world_size, port):
        os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
        dist.init_process_group("gloo", rank=rank, world_size=world_size)
        tensor = torch.ones(1, 5) * rank
        dist.all_reduce(tensor)
        dist.destroy_process_group()

    def commlab_example(rank, world_size):
        tensor = torch.ones(1, 5) * rank
        dist.all_reduce(tensor)

    def timed(call):
        start = time.perf_counter()
        call()
        return time.perf_counter() - start
""")

MEASURE = textwrap.dedent("""
    import commlab, json
    first = timed(lambda: commlab.run(commlab_example, 4))
    times = {"commlab": [], "fork": [], "spawn": []}
    for i in range(max(ROUNDS.values())):
        if i < ROUNDS["commlab"]:
            times["commlab"].append(timed(lambda: commlab.run(commlab_example, 4)))
        if i < ROUNDS["fork"]:
            times["fork"].append(timed(lambda: mp.start_processes(
                cell_example, args=(4, free_port()), nprocs=4, start_method="fork")))
        if i < ROUNDS["spawn"]:
            times["spawn"].append(timed(lambda: seed_pattern.spawn(4, free_port())))
    print(json.dumps({"first": first, **{k: statistics.median(v) for k, v in times.items()}}))
""")


def main() -> int:
    manager, client = start_new_kernel(kernel_name="python3")
    try:
        outputs = []
        for code in (SETUP, f"ROUNDS = {ROUNDS!r}", MEASURE):
            reply = client.execute_interactive(
                code, timeout=600, output_hook=lambda msg: outputs.append(msg))
            if reply["content"]["status"] != "ok":
                print("benchmark cell failed:", reply["content"], file=sys.stderr)
                return 1
        text = "".join(m["content"].get("text", "") for m in outputs
                       if m["msg_type"] == "stream" and m["content"]["name"] == "stdout")
        numbers = json.loads(text.strip().splitlines()[-1])
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)

    warm = numbers["commlab"]
    print("4-rank all_reduce cell in a Jupyter kernel (gloo, median seconds per call)")
    print(f"  commlab.run, first call of the kernel : {numbers['first']:.3f}")
    print(f"  commlab.run, warm                     : {warm:.3f}")
    print(f"  fork (start_processes)                : {numbers['fork']:.3f}"
          f"   commlab is {numbers['fork'] / warm:.1f}x faster")
    print(f"  seeds' mp.spawn (importable module)   : {numbers['spawn']:.3f}"
          f"   commlab is {numbers['spawn'] / warm:.1f}x faster")
    return 0


if __name__ == "__main__":
    sys.exit(main())
