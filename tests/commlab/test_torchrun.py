"""The same function under torchrun: two launches (two "nodes") of two processes each."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from support.containers import free_port

JOB = Path(__file__).parents[1] / "support" / "torchrun_job.py"


@pytest.mark.slow
def test_two_torchrun_launches_run_a_chapter_function_unchanged():
    port = free_port()
    env = dict(os.environ, GLOO_SOCKET_IFNAME="lo", TORCH_CPP_LOG_LEVEL="ERROR")
    launches = [
        subprocess.Popen(
            [sys.executable, "-m", "torch.distributed.run", "--nnodes=2",
             f"--node-rank={node}", "--nproc-per-node=2", "--master-addr=127.0.0.1",
             f"--master-port={port}", str(JOB)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        for node in (0, 1)
    ]
    outputs = []
    try:
        for launch in launches:
            out, err = launch.communicate(timeout=120)
            outputs.append((launch.returncode, out, err))
    finally:
        for launch in launches:
            launch.kill()
    for code, _out, err in outputs:
        assert code == 0, err
    node0 = outputs[0][1]
    for rank in range(4):
        assert f"── rank {rank} ──\nRank {rank} after all_reduce: [[6.0, 6.0, 6.0, 6.0, 6.0]]" \
            in node0
    assert "bytes sent per rank: [60, 60, 60, 60]" in node0
    assert "── rank" not in outputs[1][1]  # only global rank 0 prints the result
