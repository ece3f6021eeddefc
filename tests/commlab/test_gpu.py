"""The CUDA paths: NCCL with one GPU per rank, gloo beside CUDA, a kernel that already used CUDA.

Skipped on machines without a GPU; run on one with `make test` (or pytest
tests/commlab/test_gpu.py).
"""

from __future__ import annotations

import textwrap

import pytest
import torch
import torch.distributed as dist

import commlab

GPUS = torch.cuda.device_count() if torch.cuda.is_available() else 0
pytestmark = pytest.mark.skipif(GPUS == 0, reason="needs a CUDA GPU")


def _sum_on_device(rank, world_size):
    device = commlab.device()
    tensor = torch.ones(3, device=device) * (rank + 1)
    dist.all_reduce(tensor)
    return str(device), dist.get_backend(), tensor


def test_auto_picks_nccl_and_a_gpu_per_rank_when_there_are_enough():
    result = commlab.run(_sum_on_device, 1)
    assert result.backend == "nccl"
    device, backend, tensor = result.returns[0]
    # CUDA tensors go through NCCL, CPU tensors through gloo, in one group
    assert (device, backend) == ("cuda:0", "cpu:gloo,cuda:nccl")
    assert tensor.device.type == "cpu" and tensor.tolist() == [1.0] * 3
    assert result.trace[0][0].tensors["tensor"].device == "cuda:0"


def test_cpu_tensors_work_on_the_nccl_branch():
    def on_cpu(rank, world_size):
        tensor = torch.ones(3) * (rank + 1)
        dist.all_reduce(tensor)
        return tensor

    result = commlab.run(on_cpu, 1)
    assert result.backend == "nccl" and result.returns[0].tolist() == [1.0] * 3


def test_auto_falls_back_to_gloo_on_the_cpu_with_fewer_gpus_than_ranks():
    result = commlab.run(_sum_on_device, GPUS + 1)
    assert result.backend == "gloo"
    total = sum(range(1, GPUS + 2))
    assert [r[:2] for r in result.returns] == [("cpu", "gloo")] * (GPUS + 1)
    assert all(r[2].tolist() == [float(total)] * 3 for r in result.returns)


def test_explicit_nccl_with_too_few_gpus_is_refused_before_starting():
    with pytest.raises(ValueError, match=f"has {GPUS} GPU"):
        commlab.run(_sum_on_device, GPUS + 1, backend="nccl")


def test_ranks_use_cuda_after_the_caller_initialised_it():
    torch.ones(1, device="cuda").sum().item()  # a forked child could not use CUDA after this
    assert torch.cuda.is_initialized()
    result = commlab.run(_sum_on_device, 1, backend="nccl")
    assert result.returns[0][0] == "cuda:0"


def test_a_kernel_that_used_cuda_still_runs_ranks_on_the_gpu():
    pytest.importorskip("jupyter_client")
    from support.kernel import Kernel

    kernel = Kernel()
    try:
        run = kernel.execute(textwrap.dedent("""
            import torch, torch.distributed as dist, commlab
            warm = torch.ones(2, device="cuda") * 2
            def on_gpu(rank, world_size):
                tensor = torch.ones(2, device=commlab.device()) * (rank + 1)
                dist.all_reduce(tensor)
                print(f"rank {rank} on {tensor.device}: {tensor.tolist()}")
            print(torch.cuda.is_initialized())
            commlab.run(on_gpu, world_size=1)
        """))
        assert run.status == "ok", run.error
        assert run.stdout.strip() == "True"
        assert "rank 0 on cuda:0: [1.0, 1.0]" in "".join(run.text)
        assert run.stderr == ""
    finally:
        kernel.shutdown()
