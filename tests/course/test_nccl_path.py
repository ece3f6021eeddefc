"""The chapters as a student with four or more GPUs runs them: the launcher takes the NCCL branch.

``COMMLAB_PRETEND_GPUS=4`` makes commlab believe four GPUs exist, so ``backend="auto"`` builds the
mixed group it builds for NCCL (CPU tensors on gloo; on a CPU machine the CUDA half falls back to
gloo too). Every solution must then still match its stored outputs under strict nbval: the
printed results of a cell may not depend on which branch the launcher took.

This file holds no test function: tests/course/conftest.py collects the solutions' cells under its
name, as nbval collects solutions/ (``tests/course/test_nccl_path.py::<chapter>::Cell N``), each
chapter in a kernel started with the variable set.
"""
