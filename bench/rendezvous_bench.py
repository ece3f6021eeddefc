"""How long ranks take to meet, with commlab's store against torch's own, in one process.

Each round runs a 4-rank function that builds its own group (``init_process_group`` from the
environment, as chapter 00's ``join_group`` does) twice, interleaved, so that a noisy machine
slows both alike:

- commlab's store (:mod:`commlab.rendezvous`): on the IPv4 loopback, quick lookups;
- torch's own: ``TCPStore`` by port alone (every interface, IPv6 first) and glibc's default
  lookups (``timeout:5 attempts:2``), as commlab made it before.

Where the DNS server answers at once, both are alike; where it drops queries, the second waits
5 s now and then. Usage: ``.venv/bin/python bench/rendezvous_bench.py [ROUNDS]`` (default 60).
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "helpers"))

import torch.distributed as dist  # noqa: E402

import commlab  # noqa: E402
from commlab import rendezvous  # noqa: E402

COMMLAB_STORE = rendezvous.launch_store


def torch_store(timeout: float):
    return dist.TCPStore("127.0.0.1", 0, None, True, timedelta(seconds=timeout),
                         wait_for_workers=False)


def join(rank: int, world_size: int) -> None:
    dist.init_process_group("gloo")
    dist.destroy_process_group()


def timed_run(store, resolver: str | None) -> float:
    rendezvous.launch_store = store
    if resolver is None:
        os.environ.pop("RES_OPTIONS", None)
    else:
        os.environ["RES_OPTIONS"] = resolver
    began = time.perf_counter()
    commlab.run(join, 4, init_process_group=False)
    return time.perf_counter() - began


def main() -> int:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 60
    commlab.run(join, 4, init_process_group=False)  # the forkserver starts once, outside
    times: dict[str, list[float]] = {"commlab": [], "torch": []}
    for _ in range(rounds):
        times["commlab"].append(timed_run(COMMLAB_STORE, None))
        times["torch"].append(timed_run(torch_store, "timeout:5 attempts:2"))
    print(f"4 ranks meeting in init_process_group, {rounds} runs each (seconds per run)")
    for name, label in (("commlab", "commlab's store, quick lookups"),
                        ("torch", "torch's store, default lookups")):
        runs = times[name]
        print(f"  {label:<32}: median {statistics.median(runs):.3f}, mean "
              f"{statistics.mean(runs):.3f}, slowest {max(runs):.2f}, "
              f"runs over 2 s: {sum(t > 2 for t in runs)}")
    mean = {name: statistics.mean(runs) for name, runs in times.items()}
    print(f"torch's / commlab's: mean {mean['torch'] / mean['commlab']:.2f}x, "
          f"slowest {max(times['torch']) / max(times['commlab']):.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
