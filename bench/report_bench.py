"""What a rank's report costs to send: cloudpickle against :mod:`commlab.report_pickle`.

A report is taken from a real run, a training-like loop of small collectives whose trace holds a
copy of each tensor before and after each call, as chapter 17's runs do. Each round encodes it
on the rank's side and decodes it on the launcher's, both ways, alternately (a noisy machine slows
both alike); the ratios are what to read. Usage: ``make bench-report``.
"""

from __future__ import annotations

import pickle
import statistics
import time

import cloudpickle
import torch
import torch.distributed as dist

import commlab
from commlab import report_pickle

ROUNDS = 7


def training_like(rank, world_size):
    weights = [torch.full((64,), float(rank)) for _ in range(40)]
    for _step in range(25):
        for w in weights:
            dist.all_reduce(w)
    return weights


def timed(encode) -> tuple[float, float, int]:
    began = time.perf_counter()
    blob = encode(REPORT)
    encoded = time.perf_counter()
    pickle.loads(blob)
    return encoded - began, time.perf_counter() - encoded, len(blob)


if __name__ == "__main__":
    result = commlab.run(training_like, 2)
    REPORT = (result.returns[0], result.trace[0])
    tensors = sum(len(c.before) + len(c.after) for c in result.trace[0])
    rows = {"cloudpickle": [], "report_pickle": []}
    for _ in range(ROUNDS):
        rows["cloudpickle"].append(timed(cloudpickle.dumps))
        rows["report_pickle"].append(timed(report_pickle.dumps))
    print(f"a report of {len(result.trace[0])} calls, {tensors} tensor copies; "
          f"median of {ROUNDS} rounds")
    medians = {name: [statistics.median(r[i] for r in runs) for i in range(3)]
               for name, runs in rows.items()}
    for name, (dump, load, size) in medians.items():
        print(f"{name:14s} encode {dump * 1e3:7.1f} ms  decode {load * 1e3:7.1f} ms  "
              f"{size / 1e6:6.2f} MB")
    (d0, l0, s0), (d1, l1, s1) = medians["cloudpickle"], medians["report_pickle"]
    print(f"report_pickle / cloudpickle: encode {d1 / d0:.2f}, decode {l1 / l0:.2f}, "
          f"bytes {s1 / s0:.2f}")
