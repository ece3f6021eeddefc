"""The chapters as a student with four or more GPUs runs them: the launcher takes the NCCL branch.

``COMMLAB_PRETEND_GPUS=4`` makes commlab believe four GPUs exist, so ``backend="auto"`` builds the
mixed group it builds for NCCL (CPU tensors on gloo; on a CPU machine the CUDA half falls back to
gloo too). Every solution must then still match its stored outputs under strict nbval: the
printed results of a cell may not depend on which branch the launcher took.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHAPTERS = sorted(p.parent.name for p in (ROOT / "solutions").glob("*/*.ipynb")
                  if p.stem == p.parent.name)


@pytest.mark.slow
@pytest.mark.parametrize("chapter", CHAPTERS)
def test_chapter_matches_its_outputs_when_the_launcher_takes_the_nccl_branch(chapter):
    env = dict(os.environ, COMMLAB_PRETEND_GPUS="4")
    ran = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", f"solutions/{chapter}"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert ran.returncode == 0, ran.stdout[-4000:] + ran.stderr[-2000:]
