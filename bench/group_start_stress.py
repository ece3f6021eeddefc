"""Stress the start of a process group: launches of a function that builds its own gloo group
and closes it at once (as chapter 00's ``join_group`` test does), world sizes 2 to 4, beside CPU
burners (three per core), counting the launches that fail.

Without every rank waiting for the others when a group is built (``TORCH_DIST_INIT_BARRIER=1``,
which every launch sets), 36 of 180 such launches failed on a 2-core machine with "Gloo
connectFullMesh failed ... Connection closed by peer"; with it, none.

Usage: ``.venv/bin/python bench/group_start_stress.py [LAUNCHES] [SECONDS]`` (default 180
launches, stopping after 900 s whatever happens). The burners are stopped on the way out.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time

import torch.distributed as dist

import commlab


def join_and_leave(rank, world_size):
    dist.init_process_group("gloo")
    dist.destroy_process_group()
    return rank


def main(launches: int, seconds: float) -> int:
    burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
               for _ in range(3 * (os.cpu_count() or 1))]
    failures: dict[str, int] = {}
    done = 0
    stop_at = time.monotonic() + seconds
    try:
        while done < launches and time.monotonic() < stop_at:
            world_size = 2 + done % 3
            try:
                commlab.run(join_and_leave, world_size, init_process_group=False, timeout=30)
            except commlab.CommlabError as err:
                lines = str(err).strip().splitlines()
                first = next((line for line in lines if "Error" in line), lines[0])
                first = re.sub(r"\[[0-9.:]+\]:\d+", "[address]", first)[:160]
                failures[first] = failures.get(first, 0) + 1
            done += 1
    finally:
        for burner in burners:
            burner.kill()
        for burner in burners:
            burner.wait()
    print(f"{done} launches beside {len(burners)} CPU burners: "
          f"{sum(failures.values())} failed")
    for text, count in failures.items():
        print(f"  {count} x {text}")
    return 1 if failures or done < launches else 0


if __name__ == "__main__":
    arguments = sys.argv[1:]
    sys.exit(main(int(arguments[0]) if arguments else 180,
                  float(arguments[1]) if len(arguments) > 1 else 900.0))
