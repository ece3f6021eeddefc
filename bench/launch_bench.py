"""How long a 4-rank all_reduce cell takes in a real Jupyter kernel, as a student meets it.

``commlab.run`` is measured the way a notebook calls it:

- the first call of a kernel, in two kernels of their own: one runs it in the cell right after
  the setup cell (Run All: the forkserver that the import starts is still importing torch), the
  other after the time a student takes to read the chapter's first page (:data:`READING`);
  for the first, also the time from ``import commlab`` to the first result;
- warm calls, each a moment after the previous cell (:data:`PAUSE`: the ranks a run starts for
  the next one are ready), and warm calls back to back (no pause: each run finds its ranks still
  starting, and starts the rest itself).

Beside them, in the same kernel and interleaved with the warm calls, so that a noisy machine
slows them alike: the seeds' pattern, ``mp.spawn`` (of an importable function, so that it works
at all), and a fork launch, ``torch.multiprocessing.start_processes(..., start_method="fork")``
of a cell function. The ratios are what to read. Usage: ``make bench`` (or
``.venv/bin/python bench/launch_bench.py``; ``--rounds N`` for fewer or more warm calls).
"""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
from pathlib import Path

from jupyter_client.manager import start_new_kernel

READING = 10.0  # seconds between the setup cell and the first run: a student reads the page
PAUSE = 0.5  # seconds between two warm cells (a student runs cells seconds apart)
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

    imported_at = time.perf_counter()
    import commlab
""")

FIRST = textwrap.dedent("""
    import json
    first = timed(lambda: commlab.run(commlab_example, 4))
    print(json.dumps({"first": first, "since_import": time.perf_counter() - imported_at}))
""")

WARM = textwrap.dedent("""
    import json
    times = {"warm": [], "back_to_back": [], "fork": [], "spawn": []}
    for i in range(max(ROUNDS.values())):
        if i < ROUNDS["commlab"]:
            time.sleep(PAUSE)
            times["warm"].append(timed(lambda: commlab.run(commlab_example, 4)))
        if i < ROUNDS["fork"]:
            times["fork"].append(timed(lambda: mp.start_processes(
                cell_example, args=(4, free_port()), nprocs=4, start_method="fork")))
        if i < ROUNDS["spawn"]:
            times["spawn"].append(timed(lambda: seed_pattern.spawn(4, free_port())))
    for i in range(ROUNDS["commlab"]):
        times["back_to_back"].append(timed(lambda: commlab.run(commlab_example, 4)))
    print(json.dumps({k: statistics.median(v) for k, v in times.items()}))
""")


def run_cells(cells: list[str]) -> dict:
    """Run ``cells`` in a new kernel; the figures they print (one JSON object a line)."""
    manager, client = start_new_kernel(kernel_name="python3")
    try:
        outputs = []
        for code in cells:
            reply = client.execute_interactive(
                code, timeout=900, output_hook=lambda msg: outputs.append(msg))
            if reply["content"]["status"] != "ok":
                raise RuntimeError(f"benchmark cell failed: {reply['content']}")
        text = "".join(m["content"].get("text", "") for m in outputs
                       if m["msg_type"] == "stream" and m["content"]["name"] == "stdout")
        return {k: v for line in text.splitlines() if line.startswith("{")
                for k, v in json.loads(line).items()}
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=ROUNDS["commlab"],
                        help="warm commlab calls of each kind (default %(default)s)")
    options = parser.parse_args()
    rounds = {**ROUNDS, "commlab": options.rounds}
    settings = f"ROUNDS = {rounds!r}; PAUSE = {PAUSE!r}"
    try:
        run_all = run_cells([SETUP, FIRST])
        reader = run_cells([SETUP, f"time.sleep({READING!r})", FIRST, settings, WARM])
    except RuntimeError as exc:
        print(exc, file=sys.stderr)
        return 1

    warm = reader["warm"]
    print("4-rank all_reduce cell in a Jupyter kernel (gloo; seconds, warm calls: median)")
    print("  commlab.run, first call of a kernel:")
    print(f"    in the cell after the setup cell (Run All)       : {run_all['first']:.3f}"
          f"   ({run_all['since_import']:.3f} from import commlab)")
    print(f"    {READING:.0f} s after the setup cell (a student reading)  : "
          f"{reader['first']:.3f}")
    print(f"  commlab.run, warm ({PAUSE} s after the previous cell)      : {warm:.3f}")
    print(f"  commlab.run, warm, back to back                    : {reader['back_to_back']:.3f}")
    print(f"  fork (start_processes)                             : {reader['fork']:.3f}"
          f"   commlab warm is {reader['fork'] / warm:.1f}x faster")
    print(f"  seeds' mp.spawn (importable module)                : {reader['spawn']:.3f}"
          f"   commlab warm is {reader['spawn'] / warm:.1f}x faster")
    return 0


if __name__ == "__main__":
    sys.exit(main())
