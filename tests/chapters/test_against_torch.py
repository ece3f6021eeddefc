"""The chapters' reference code against torch's own implementation of the same thing: a second
opinion that shares nothing with the course's code.

Chapter 10's cost model against the one DTensor uses to choose how to redistribute
(torch.distributed.tensor._collective_utils): its ring all-reduce's alpha-beta time is torch's
allreduce_cost but for torch's fixed 6.6 us base latency, and its bus-bandwidth factors are the
ratios of torch's bandwidth terms for all-reduce, all-gather and reduce-scatter.

Chapter 17's ZeRO-1 (its ShardedOptimizer, in the chapter's own kernel) against each of
torch.optim's eleven element-wise optimizers in one process, and its fully sharded module
against FSDP2's fully_shard for six of them.

Chapter 15's pipeline schedules against torch.distributed.pipelining's schedule IR: the
chapter's 1F1B order is torch's Schedule1F1B order, torch's validator and its send/receive
planner accept it for every pipeline depth and number of micro-batches tried, and
commlab.pipeline.replay (which draws the chapter's schedules and judges the students' orders)
agrees with torch on which orders can run at all, for a few hundred random orders.
"""

from __future__ import annotations

import json
import random
import types

import nbformat
import pytest

from commlab.pipeline import replay
from support.course_copy import ROOT


# torch's pipelining and DTensor modules import torch._dynamo: loaded by the tests that use them,
# not by every pytest worker that collects this module
def torch_schedules() -> types.ModuleType:
    from torch.distributed.pipelining import schedules

    return schedules


def torch_costs() -> types.ModuleType:
    from torch.distributed.tensor import _collective_utils

    return _collective_utils


def _kinds() -> dict:
    return {"F": torch_schedules()._ComputationType.FORWARD,
            "B": torch_schedules()._ComputationType.FULL_BACKWARD}


def _chapter_definition(chapter: str, cell_id: str, name: str):
    """``name`` as the solution notebook's cell ``cell_id`` defines it."""
    notebook = nbformat.read(ROOT / "solutions" / chapter / f"{chapter}.ipynb", as_version=4)
    (cell,) = [c for c in notebook.cells if c.get("id") == cell_id]
    namespace: dict = {}
    exec(compile(cell.source, f"{chapter}.ipynb, cell {cell_id}", "exec"), namespace)
    return namespace[name]


# --- chapter 10: the alpha-beta cost model ------------------------------------------------------

def _torch_topology(world_size: int, alpha: float, bandwidth: float):
    """A one-dimensional mesh of ``world_size`` devices in torch's cost units: GiB per second
    and microseconds per hop (the mesh itself is not read by the cost functions)."""
    return torch_costs().MeshTopoInfo(mesh=None, mesh_dim_devices=[world_size],
                                      mesh_dim_bandwidth=[bandwidth / 2**30],
                                      mesh_dim_latency=[alpha * 1e6])


@pytest.mark.parametrize("world_size", [2, 3, 4, 8, 16, 64])
@pytest.mark.parametrize("size, alpha, bandwidth", [(2**20, 5e-6, 50e9), (4096, 2e-6, 200e9),
                                                    (2**30, 20e-6, 12.5e9)])
def test_the_chapters_ring_all_reduce_costs_what_torchs_does(world_size, size, alpha, bandwidth):
    predict_all_reduce = _chapter_definition("10_composing_and_cost", "10-ex3-solution",
                                             "predict_all_reduce")
    _, seconds = predict_all_reduce("ring", size, world_size, alpha, bandwidth)
    theirs = torch_costs().allreduce_cost(size / 2**30, _torch_topology(world_size, alpha,
                                                                       bandwidth), 0)
    base = 6.6  # microseconds: torch's fixed launch latency, which the chapter leaves out
    assert seconds * 1e6 + base == pytest.approx(theirs, rel=1e-9)


@pytest.mark.parametrize("world_size", [2, 4, 8, 12])
def test_the_chapters_bus_bandwidth_factors_are_torchs_bandwidth_terms(world_size):
    """Each collective's bandwidth term in torch's model, over one byte-transfer of the whole
    tensor, is the chapter's busbw factor for it (nccl-tests' definition)."""
    factors = _chapter_definition("10_composing_and_cost", "10-24", "BUSBW_FACTOR")
    topology = _torch_topology(world_size, alpha=0.0, bandwidth=2**30)  # 1 GiB/s, no latency
    base = 6.6
    for op, cost in (("all_reduce", torch_costs().allreduce_cost),
                     ("all_gather", torch_costs().allgather_cost),
                     ("reduce_scatter", torch_costs().reduce_scatter_cost)):
        one_gib_in_us = 1e6
        assert (cost(1.0, topology, 0) - base) / one_gib_in_us == \
            pytest.approx(factors[op](world_size), rel=1e-12), op


# --- chapter 15: pipeline schedules --------------------------------------------------------------

@pytest.fixture(scope="module")
def one_f_one_b_order():
    return _chapter_definition("15_pipeline_parallel", "15-31", "one_f_one_b_order")


def _as_torch_actions(orders: list[list[tuple[str, int]]]) -> dict[int, list]:
    """The chapter's orders (per rank, ("F" or "B", micro-batch)) in torch's schedule IR, stage
    r on rank r."""
    action, kinds = torch_schedules()._Action, _kinds()
    return {rank: [action(rank, kinds[kind], microbatch) for kind, microbatch in order]
            for rank, order in enumerate(orders)}


def _torch_can_run(orders: list[list[tuple[str, int]]], microbatches: int) -> bool:
    """Whether torch's validator accepts the orders and its planner can put the sends and
    receives between them (it cannot where the ranks would wait for each other forever)."""
    stages = len(orders)
    actions = _as_torch_actions(orders)
    try:
        torch_schedules()._validate_schedule(actions, stages, stages, microbatches)
        with_messages = torch_schedules()._add_send_recv(actions, lambda stage: stage, stages)
        torch_schedules()._simulate_comms_compute(with_messages, lambda stage: stage, stages)
    except AssertionError:
        return False
    return True


def _replay_can_run(orders: list[list[tuple[str, int]]]) -> bool:
    try:
        replay(orders)
    except ValueError:
        return False
    return True


@pytest.mark.parametrize("stages, microbatches", [(2, 2), (4, 4), (4, 8), (5, 7), (3, 12)])
def test_the_chapters_1f1b_is_torchs(one_f_one_b_order, stages, microbatches):
    """Rank by rank, the steps of torch's Schedule1F1B (its compute actions, idle slots left
    out). Not the last rank's: torch 2.13 numbers the last stage's forward micro-batches from 1
    there (F1 ... Fm), an order its own validator refuses."""
    state = types.SimpleNamespace(_num_stages=stages, _n_microbatches=microbatches)
    theirs = torch_schedules().Schedule1F1B._get_pipeline_order(state)
    computations = _kinds().values()
    for rank in range(stages - 1):
        steps = [(action.computation_type.value, action.microbatch_index)
                 for action in theirs[rank]
                 if action is not None and action.computation_type in computations]
        assert one_f_one_b_order(rank, stages, microbatches) == steps, rank


@pytest.mark.parametrize("stages, microbatches", [(2, 1), (3, 2), (4, 4), (4, 8), (5, 7)])
def test_torch_runs_the_chapters_1f1b_and_gpipe(one_f_one_b_order, stages, microbatches):
    """Fewer micro-batches than stages included, which torch's own 1F1B refuses to build."""
    one_f_one_b = [one_f_one_b_order(rank, stages, microbatches) for rank in range(stages)]
    gpipe = [[("F", i) for i in range(microbatches)] + [("B", i) for i in range(microbatches)]
             for _ in range(stages)]
    assert _torch_can_run(one_f_one_b, microbatches) and _replay_can_run(one_f_one_b)
    assert _torch_can_run(gpipe, microbatches) and _replay_can_run(gpipe)


def _random_order(rng: random.Random, microbatches: int) -> list[tuple[str, int]]:
    """A rank's steps: each micro-batch's forward before its backward, forwards and backwards
    each in order, interleaved at random (so that many such orders deadlock)."""
    order, forwards, backwards = [], 0, 0
    while backwards < microbatches:
        if forwards < microbatches and (forwards == backwards or rng.random() < 0.5):
            order.append(("F", forwards))
            forwards += 1
        else:
            order.append(("B", backwards))
            backwards += 1
    return order


def test_replay_and_torch_agree_on_which_orders_can_run():
    rng = random.Random(15)
    outcomes = {True: 0, False: 0}
    for _ in range(300):
        stages, microbatches = rng.choice([(2, 3), (3, 3), (3, 4), (4, 4)])
        orders = [_random_order(rng, microbatches) for _ in range(stages)]
        ours = _replay_can_run(orders)
        assert ours == _torch_can_run(orders, microbatches), orders
        outcomes[ours] += 1
    # both kinds were tried, many times
    assert min(outcomes.values()) >= 50, outcomes


# --- chapter 17: ZeRO-1 against torch.optim ------------------------------------------------------

# torch.optim's element-wise optimizers, which the chapter says its ZeRO-1 wraps (not LBFGS, whose
# step needs the closure, nor Adafactor, whose update spans a matrix)
ZERO1_DEFINITIONS = '''
import json
ZERO1_OPTIMIZERS = {
    "SGD": (torch.optim.SGD, dict(lr=0.05, momentum=0.9, nesterov=True)),
    "Adam": (torch.optim.Adam, dict(lr=0.02, amsgrad=True)),
    "AdamW": (torch.optim.AdamW, dict(lr=0.01)),
    "Adagrad": (torch.optim.Adagrad, dict(lr=0.05)),
    "Adadelta": (torch.optim.Adadelta, dict(lr=1.0)),
    "Adamax": (torch.optim.Adamax, dict(lr=0.02)),
    "ASGD": (torch.optim.ASGD, dict(lr=0.05)),
    "NAdam": (torch.optim.NAdam, dict(lr=0.02)),
    "RAdam": (torch.optim.RAdam, dict(lr=0.02)),
    "RMSprop": (torch.optim.RMSprop, dict(lr=0.01, momentum=0.5)),
    "Rprop": (torch.optim.Rprop, dict(lr=0.01)),
}

def rows_of(rank, steps):
    return make_batches(steps, rows=4, generator=torch.Generator().manual_seed(100 + rank))

def zero1_steps(rank, world_size, name, steps):
    torch.set_num_threads(1)
    model = make_model()
    model.head.requires_grad_(True)
    optimizer_cls, kwargs = ZERO1_OPTIMIZERS[name]
    optimizer = ShardedOptimizer(parameter_groups(model.named_parameters()), optimizer_cls,
                                 **kwargs)
    for x, y in rows_of(rank, steps):
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
    return [p.detach().clone() for p in model.parameters()]

def torch_steps(name, world_size, steps):
    model = make_model()
    model.head.requires_grad_(True)
    optimizer_cls, kwargs = ZERO1_OPTIMIZERS[name]
    optimizer = optimizer_cls(parameter_groups(model.named_parameters()), **kwargs)
    every_rank = [rows_of(rank, steps) for rank in range(world_size)]
    for step in range(steps):
        grads = {}
        for batches in every_rank:
            optimizer.zero_grad()
            torch.nn.functional.mse_loss(model(batches[step][0]), batches[step][1]).backward()
            for p in model.parameters():
                if p.grad is not None:
                    grads[p] = grads.get(p, 0) + p.grad
        for p, grad in grads.items():
            p.grad = grad / world_size
        optimizer.step()
    return [p.detach().clone() for p in model.parameters()]
'''

ZERO1_AGAINST_TORCH = '''
worst = {}
for name in ZERO1_OPTIMIZERS:
    result = commlab.run(zero1_steps, world_size=3, args=(name, 3))
    expected = torch_steps(name, 3, 3)
    worst[name] = max(float((got - want).abs().max()) for params in result.returns
                      for got, want in zip(params, expected))
print(json.dumps(worst))
'''


FSDP_AGAINST_FSDP2 = '''
def fsdp_and_fsdp2_steps(rank, world_size, name, steps):
    from torch.distributed.fsdp import fully_shard

    torch.set_num_threads(1)
    device = commlab.device()
    mesh = init_device_mesh(device.type, (world_size,))
    optimizer_cls, kwargs = ZERO1_OPTIMIZERS[name]
    fsdp2 = make_model(device=device)
    for layer in (fsdp2.wide, fsdp2.narrow):
        fully_shard(layer, mesh=mesh)
    fully_shard(fsdp2, mesh=mesh)
    yours = FullyShardedModule(make_model(device=device))
    trained = [(fsdp2, optimizer_cls(parameter_groups(fsdp2.named_parameters()), **kwargs)),
               (yours, optimizer_cls(parameter_groups(yours.named_parameters()), **kwargs))]
    for x, y in rows_of(rank, steps):
        for model, optimizer in trained:
            optimizer.zero_grad()
            torch.nn.functional.mse_loss(model(x.to(device)), y.to(device)).backward()
            optimizer.step()
    theirs = {n: p.full_tensor() for n, p in fsdp2.named_parameters()}
    return max(float((theirs[n] - p).abs().max()) for n, p in yours.full_parameters().items())

gaps = {}
for name in ("SGD", "Adam", "AdamW", "Adagrad", "RMSprop", "NAdam"):
    result = commlab.run(fsdp_and_fsdp2_steps, world_size=2, args=(name, 3))
    gaps[name] = max(result.returns)
print(json.dumps(gaps))
'''


@pytest.fixture(scope="module")
def sharded_training_kernel():
    """Chapter 17's kernel, its definitions (solutions included) run, and the optimizers and
    rows these tests use."""
    from support.chapter_kernel import ChapterKernel

    kernel = ChapterKernel("17_sharded_training")
    kernel.define()
    ran = kernel.execute(ZERO1_DEFINITIONS, timeout=60)
    assert ran.error is None, ran.error
    yield kernel
    kernel.kernel.shutdown()


def _printed_json(kernel, source: str):
    ran = kernel.execute(source, timeout=300)
    assert ran.error is None, ran.error
    return json.loads(ran.stdout.strip().splitlines()[-1])


def test_the_chapters_zero1_steps_as_torch_optim_for_every_element_wise_optimizer(
        sharded_training_kernel):
    """The chapter's ShardedOptimizer (its solution) on 3 ranks, three steps of each of torch's
    element-wise optimizers, against that optimizer in one process on every rank's rows."""
    worst = _printed_json(sharded_training_kernel, ZERO1_AGAINST_TORCH)
    assert len(worst) == 11
    assert {name: gap for name, gap in worst.items() if gap > 1e-5} == {}, worst


def test_the_chapters_fsdp_module_trains_as_fsdp2(sharded_training_kernel):
    """The chapter's FullyShardedModule and FSDP2's fully_shard (its layers, then the root), each
    trained three steps on 2 ranks with the same optimizer: the same full parameters."""
    gaps = _printed_json(sharded_training_kernel, FSDP_AGAINST_FSDP2)
    assert len(gaps) == 6
    assert {name: gap for name, gap in gaps.items() if gap > 1e-5} == {}, gaps
