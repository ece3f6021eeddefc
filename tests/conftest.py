"""Shared fixtures: a real Jupyter kernel that runs cells as a student's notebook would."""

from __future__ import annotations

import pytest

from support.kernel import Kernel


@pytest.fixture(scope="module")
def kernel():
    k = Kernel()
    warm = k.execute("import torch, torch.distributed as dist, commlab")
    assert warm.status == "ok", warm.error
    yield k
    k.shutdown()
