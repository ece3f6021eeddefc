"""The chapters as a student with four or more GPUs runs them: the launcher takes the NCCL branch.

``COMMLAB_PRETEND_GPUS=4`` makes commlab believe four GPUs exist, so ``backend="auto"`` builds the
mixed group it builds for NCCL (CPU tensors on gloo; on a CPU machine the CUDA half falls back to
gloo too). A solution must then still match its stored outputs under strict nbval: the printed
results of a cell may not depend on which branch the launcher took.

Only the chapters that use more of torch.distributed than its plain calls run here: those that
build groups of their own, name their backend, or use device meshes, DTensor, FSDP or checkpoints
(tests/support/nccl_branch.py finds them in the chapters' code). Every other chapter calls only
plain functions (collectives, point-to-point, ranks and sizes), which reach the same gloo backend
through the mixed group: tests/commlab/test_backend.py makes each of them, with the variants the
chapters use, on both branches and compares what every rank got.

This file holds no test function: tests/course/conftest.py collects the solutions' cells under its
name, as nbval collects solutions/ (``tests/course/test_nccl_path.py::<chapter>::Cell N``), each
chapter in a kernel started with the variable set.
"""
