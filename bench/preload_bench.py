"""What a new forkserver's preloads cost (commlab.processes.PRELOAD, torch._dynamo included), with
the garbage collector off while they import (``commlab.preload_start``, as the forkserver does)
and with Python's default, in fresh interpreters, alternating, so that a noisy machine slows
both alike. The ratio is what to read. Usage: ``make bench-preload`` (or
``.venv/bin/python bench/preload_bench.py``; ``--rounds N``).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
from pathlib import Path

HELPERS = Path(__file__).resolve().parents[1] / "helpers"
sys.path.insert(0, str(HELPERS))

from commlab import processes  # noqa: E402 - after the path


def cpu_seconds(preload: list[str]) -> float:
    """CPU seconds of a fresh interpreter that imports ``preload`` in order, as multiprocessing's
    forkserver does."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    code = "\n".join(f"import {name}" for name in preload)
    env = dict(os.environ, PYTHONPATH=str(HELPERS), OMP_NUM_THREADS="1")
    subprocess.run([sys.executable, "-c", code], check=True, env=env)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    rounds = parser.parse_args().rounds
    quiet = processes.PRELOAD
    assert quiet[0] == "commlab.preload_start"
    default = quiet[1:]  # the collector as Python has it; preload_memory turns it on: no change
    figures: dict[str, list[float]] = {"collector off": [], "collector on": []}
    for _ in range(rounds):
        figures["collector off"].append(cpu_seconds(quiet))
        figures["collector on"].append(cpu_seconds(default))
    for name, seconds in figures.items():
        print(f"{name:14s} median {statistics.median(seconds):.2f} CPU-s "
              f"({', '.join(f'{s:.2f}' for s in seconds)})")
    ratio = statistics.median(figures["collector on"]) / statistics.median(figures["collector off"])
    print(f"the forkserver's preloads cost {ratio:.2f}x as much CPU with the collector on")
    return 0


if __name__ == "__main__":
    sys.exit(main())
