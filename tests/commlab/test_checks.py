"""commlab.checks, with real launches: cases batched by world size, failures that name their case,
torch's aliases, and the chapters' test cells against shortcuts students take."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

import commlab
from commlab import checks

ROOT = Path(__file__).resolve().parents[2]

# The kernel tests read a cell's outcome from its error output, which is matched to the cell: on a
# busy machine the kernel's start can leave a kernel_info reply on the shell channel, and then
# Kernel.execute's status is that of the cell before.


# --- batching ----------------------------------------------------------------------------------

def mixed_case(rank, world_size, src, shape, dtype):
    """Several kinds of call, so that traces have indices, roots, bytes and values to compare."""
    tensor = checks.rank_tensor(rank, shape, dtype)
    dist.broadcast(tensor, src)
    gathered = [torch.zeros_like(tensor) for _ in range(world_size)]
    dist.all_gather(gathered, tensor + rank)
    dist.all_reduce(tensor)
    if rank == src:
        dist.send(tensor, (src + 1) % world_size)
    elif rank == (src + 1) % world_size:
        dist.recv(tensor, src)
    print(f"case src={src} on rank {rank}")
    return tensor, gathered


MIXED = [checks.Case(2, src=1, shape=(3,), dtype=torch.int64),
         checks.Case(3, src=0, shape=(2, 2), dtype=torch.float32),
         checks.Case(2, src=0, shape=(4,), dtype=torch.float64),
         checks.Case(3, src=2, shape=(5,), dtype=torch.int32)]


def _same_calls(ours: list, alone: list) -> bool:
    fields = ("op", "index", "seq", "rank", "group_ranks", "tensors", "root", "reduce_op",
              "sent_to", "received_from", "split_sizes", "ops", "error", "async_op")
    return len(ours) == len(alone) and all(
        all(getattr(a, f) == getattr(b, f) for f in fields)
        and checks.same(a.before, b.before) and checks.same(a.after, b.after)
        for a, b in zip(ours, alone))


def test_batched_cases_give_each_case_what_a_launch_of_its_own_gives():
    batched = checks.run_cases(mixed_case, MIXED)
    for case, result in zip(MIXED, batched):
        alone = commlab.run(mixed_case, case.world_size, backend="gloo",
                            args=tuple(case.context.values()))
        assert result.world_size == case.world_size and result.context == case.context
        assert checks.same(result.returns, alone.returns)
        assert all(_same_calls(ours, theirs) for ours, theirs in zip(result.trace, alone.trace))
        assert result.stdout == alone.stdout
        assert result.bytes_sent() == alone.bytes_sent()


def test_cases_of_one_world_size_share_one_launch():
    # each launch is a new rendezvous store, so a rank sees the same MASTER_PORT for every case
    # of its launch and a new one for the next launch
    import os

    def port(rank, world_size, n):
        return os.environ["MASTER_PORT"]

    cases = [checks.Case(ws, n=n) for n, ws in enumerate((2, 3, 2, 3, 2))]
    ports = [r.returns[0] for r in checks.run_cases(port, cases)]
    assert ports[0] == ports[2] == ports[4] and ports[1] == ports[3]
    assert ports[0] != ports[1]


# --- failures name their case ------------------------------------------------------------------

def raises_in_case_two(rank, world_size, n, dtype):
    if n == 2 and rank == 1:
        raise ValueError("this case goes wrong")
    dist.barrier()
    return n


def test_a_case_that_raises_in_a_batch_names_its_case():
    cases = [checks.Case(2, n=n, dtype=torch.float64) for n in range(4)]
    with pytest.raises(AssertionError) as caught:
        checks.run_cases(raises_in_case_two, cases)
    message = str(caught.value)
    assert "when run on 2 ranks (n=2, dtype=torch.float64)" in message
    assert "ValueError: this case goes wrong" in message
    assert "\x1f" not in message


def skips_a_collective_in_case_two(rank, world_size, n):
    if not (n == 2 and rank == 0):
        dist.all_reduce(torch.ones(2))
    return n


def test_a_case_that_hangs_in_a_batch_names_its_case_within_the_grading_timeout():
    # rank 0 skips case 2's all_reduce; it must not meet rank 1's all_reduce of case 2 with its
    # own of case 3, which would blame case 3
    cases = [checks.Case(2, n=n) for n in range(4)]
    with pytest.raises(AssertionError) as caught:
        checks.run_cases(skips_a_collective_in_case_two, cases)
    message = str(caught.value)
    assert "did not finish when run on 2 ranks (n=2)" in message
    assert f"within {checks.GRADING_TIMEOUT:g} s" in message
    assert "rank 0 had finished this case" in message
    assert "rank 1 is still in all_reduce #1" in message  # numbered within the case


def test_a_wrong_value_in_a_batched_case_names_the_case():
    def check(result, n, dtype):
        checks.expect_per_rank(result, [0, 1] if n == 1 else [n, n], what="the value")

    cases = [checks.Case(2, n=n, dtype=torch.int64) for n in range(3)]
    with pytest.raises(AssertionError) as caught:
        checks.check_cases(lambda rank, world_size, n, dtype: n, cases, check)
    assert str(caught.value).startswith("On rank 0 (world_size=2, n=1, dtype=torch.int64), "
                                        "the value should be")


def test_a_check_that_breaks_on_an_odd_return_names_the_case_not_a_traceback():
    def check(result, n):
        checks.expect(result.returns[0]["total"], n, what="the total")

    with pytest.raises(AssertionError) as caught:
        checks.check_cases(lambda rank, world_size, n: [n], [checks.Case(2, n=7)], check)
    assert str(caught.value).startswith("Checking the case (world_size=2, n=7) failed: "
                                        "TypeError")


# --- feedback never quotes hidden tests ----------------------------------------------------------

HIDDEN_CELL = '''\
"""A test cell whose hidden part defines its own case."""
def visible_case(rank, world_size, n):
    return n

checks.check_cases(visible_case, [checks.Case(2, n=1)],
                   lambda result, n: checks.expect_per_rank(result, [n, n]))
### BEGIN HIDDEN TESTS
def hidden_case(rank, world_size, n, secret_root):
    assert rank != secret_root or n < 3, "the hidden case fails here " + "on purpose"
    return n

checks.check_cases(hidden_case, [checks.Case(3, n=n, secret_root=2) for n in range(5)],
                   lambda result, n, secret_root: None)
### END HIDDEN TESTS
'''


def test_feedback_names_the_hidden_case_without_quoting_hidden_lines(kernel):
    assert kernel.execute("from commlab import checks").error is None
    run = kernel.execute(HIDDEN_CELL)
    assert run.error is not None and run.error["ename"] == "CheckFailed"
    message = run.error["evalue"]
    assert "when run on 3 ranks (n=3, secret_root=2)" in message
    assert "the hidden case fails here on purpose" in message  # the error itself, not its line
    assert "(a line of the hidden tests)" in message
    for line in HIDDEN_CELL.split("### BEGIN HIDDEN TESTS")[1].splitlines():
        if line.strip() and "###" not in line:
            assert line.strip() not in message


# --- torch's names for one operation -----------------------------------------------------------

def flat_collective(rank, world_size, name):
    with torch.no_grad():
        if "gather" in name:
            out = torch.zeros(2 * world_size)
            getattr(dist, name)(out, torch.full((2,), float(rank)))
        else:
            out = torch.zeros(2)
            getattr(dist, name)(out, torch.ones(2 * world_size))
    return out


ALIAS_PAIRS = [(a, b) for names in checks.ALIASES for a in names for b in names]


@pytest.fixture(scope="module")
def alias_runs():
    names = [name for group in checks.ALIASES for name in group]
    results = checks.run_cases(flat_collective, [checks.Case(2, name=n) for n in names])
    return dict(zip(names, results))


@pytest.mark.parametrize("expected, called", ALIAS_PAIRS)
def test_a_check_that_expects_a_call_accepts_each_of_its_names(alias_runs, expected, called):
    result = alias_runs[called]
    assert [c.op for c in result.trace[0]] == [called]
    checks.expect_used(result, expected)
    checks.expect_only(result, {expected})
    with pytest.raises(AssertionError, match=f"your code called dist.{called};"):
        checks.expect_not_used(result, expected)


def test_expect_used_names_the_public_names_it_accepts(alias_runs):
    with pytest.raises(AssertionError) as caught:
        checks.expect_used(alias_runs["all_gather_single"], "reduce_scatter_tensor")
    assert ("should call dist.reduce_scatter_tensor or dist.reduce_scatter_single, but it "
            "made: all_gather_single.") in str(caught.value)


def test_expect_only_names_the_public_names_it_allows(alias_runs):
    with pytest.raises(AssertionError) as caught:
        checks.expect_only(alias_runs["_all_gather_base"], {"reduce_scatter_tensor"})
    message = str(caught.value)
    assert ("your code called dist._all_gather_base; this exercise allows only "
            "dist.reduce_scatter_tensor or dist.reduce_scatter_single.") in message
    assert "_reduce_scatter_base" not in message


def test_canonical_gives_one_name_for_each_operation():
    for names in checks.ALIASES:
        assert {checks.canonical(name) for name in names} == {names[0]}
    assert checks.canonical("all_reduce") == "all_reduce"


# --- what a failure message shows ----------------------------------------------------------------

def test_a_short_mismatch_shows_both_values_whole():
    with pytest.raises(AssertionError) as caught:
        checks.expect([1, 2], [1, 3], what="the sizes", rank=1, world_size=2)
    assert str(caught.value) == ("On rank 1 (world_size=2), the sizes should be\n    [1, 3]\n"
                                 "but it is\n    [1, 2]")


def test_a_mismatch_in_a_large_value_names_the_item_and_its_largest_difference():
    expected = {"0.weight": torch.zeros(16, 8), "2.weight": torch.ones(16, 16)}
    got = {name: tensor.clone() for name, tensor in expected.items()}
    got["2.weight"][3, 5] += 0.25
    got["2.weight"][0, 1] += 0.125
    with pytest.raises(AssertionError) as caught:
        checks.expect(got, expected, what="the parameters", rank=0, world_size=2, steps=3)
    assert str(caught.value) == (
        "On rank 0 (world_size=2, steps=3), the parameters: wrong at ['2.weight'], a float32 "
        "tensor of shape (16, 16) whose largest difference from the expected values is 0.25, "
        "at [3, 5] (1.25 instead of 1).")


@pytest.mark.parametrize("got, words", [
    ([torch.zeros(16, 8)], "expected a list of 2 items, got a list of 1 item"),
    ([torch.zeros(16, 8), torch.zeros(3)],
     "wrong at [1], expected a float32 tensor of shape (16, 16), got a float32 tensor of shape "
     "(3,)"),
    ([torch.zeros(16, 8), torch.ones(16, 16, dtype=torch.int64)],
     "wrong at [1], expected a float32 tensor of shape (16, 16), got an int64 tensor"),
    ([torch.zeros(16, 8), None], "wrong at [1], expected a float32 tensor of shape (16, 16), "
                                 "got None"),
])
def test_a_mismatch_of_kind_or_shape_says_what_was_expected_and_what_came(got, words):
    expected = [torch.zeros(16, 8), torch.ones(16, 16)]
    with pytest.raises(AssertionError) as caught:
        checks.expect(got, expected, what="the parameters")
    assert words in str(caught.value)


def test_an_integer_mismatch_counts_the_values_that_differ():
    expected = torch.arange(100)
    got = expected.clone()
    got[[7, 9]] = -1
    with pytest.raises(AssertionError) as caught:
        checks.expect(got, expected, what="the indices")
    assert ("an int64 tensor of shape (100,) whose values differ from the expected ones in 2 of "
            "100 places, first at [7] (-1 instead of 7)") in str(caught.value)


# --- the chapters' test cells against shortcuts --------------------------------------------------

def _test_cell(chapter: str, grade_id: str) -> str:
    notebook = ROOT / "solutions" / chapter / f"{chapter}.ipynb"
    for cell in json.loads(notebook.read_text())["cells"]:
        if cell["metadata"].get("nbgrader", {}).get("grade_id") == grade_id:
            return "".join(cell["source"])
    raise LookupError(grade_id)


SETUP = ("import torch\nimport torch.distributed as dist\nimport commlab\n"
         "from commlab import checks\n")

# my_all_gather as an all_reduce of a zero-padded buffer: right values, no all-gather call
ALL_GATHER_BY_ALL_REDUCE = '''
def my_all_gather(tensor_list, tensor):
    rank, world_size = dist.get_rank(), dist.get_world_size()
    padded = torch.zeros((world_size, *tensor.shape), dtype=tensor.dtype, device=tensor.device)
    padded[rank] = tensor
    dist.all_reduce(padded)
    for r in range(world_size):
        tensor_list[r].copy_(padded[r])
'''

# my_all_reduce as an all_gather of every whole tensor, summed on each rank
ALL_REDUCE_BY_ALL_GATHER = '''
def my_all_reduce(tensor):
    everyone = [torch.empty_like(tensor) for _ in range(dist.get_world_size())]
    dist.all_gather(everyone, tensor)
    tensor.copy_(torch.stack(everyone).sum(0))
'''

# a correct ring in which each rank ends the reduce-scatter owning the chunk after the one the
# schedule gives it
RING_OWNING_ANOTHER_CHUNK = '''
def ring_all_reduce(tensor):
    rank, world_size = dist.get_rank(), dist.get_world_size()
    chunks = torch.tensor_split(tensor, world_size)
    right, left = (rank + 1) % world_size, (rank - 1) % world_size
    for step in range(world_size - 1):
        target = chunks[(rank - step) % world_size]
        buffer = torch.empty_like(target)
        handle = dist.isend(chunks[(rank - step + 1) % world_size], dst=right)
        dist.recv(buffer, src=left)
        handle.wait()
        target += buffer
    for step in range(world_size - 1):
        handle = dist.isend(chunks[(rank + 2 - step) % world_size], dst=right)
        dist.recv(chunks[(rank + 1 - step) % world_size], src=left)
        handle.wait()
    return tensor
'''


@pytest.mark.parametrize("chapter, grade_id, answer, words", [
    ("04_all_gather", "04-my-all-gather-test", ALL_GATHER_BY_ALL_REDUCE,
     ["your ranks sent 960 bytes in all", "build my_all_gather from broadcasts"]),
    ("06_all_reduce", "06-my-all-reduce-test", ALL_REDUCE_BY_ALL_GATHER,
     ["your ranks sent 480 bytes in all", "reduce first, then share the sum"]),
    ("10_composing_and_cost", "10-ring-all-reduce-test", RING_OWNING_ANOTHER_CHUNK,
     ["the right total", "The chunk order differs from the ring schedule"]),
])
def test_a_shortcut_fails_the_test_cell_saying_what_the_exercise_wants(kernel, chapter,
                                                                       grade_id, answer, words):
    assert kernel.execute(SETUP + answer).error is None
    run = kernel.execute(_test_cell(chapter, grade_id))
    assert run.error is not None, "the shortcut passed the test cell"
    message = run.error["evalue"]
    assert "world_size=4" in message or "With 4 ranks" in message  # the visible case fails
    for word in words:
        assert word in message
    assert "too many" not in message and "times as many as needed" not in message


def test_a_failing_test_cell_shows_the_reason_alone_in_the_notebook(kernel):
    # the student's notebook (and Validate, and the feedback) show the reason, not the frames
    # of the course's own check code above it
    assert kernel.execute(SETUP + ALL_REDUCE_BY_ALL_GATHER).error is None
    run = kernel.execute(_test_cell("06_all_reduce", "06-my-all-reduce-test"))
    assert run.error is not None and run.error["ename"] == "CheckFailed"
    shown = "\n".join(run.error["traceback"])
    assert shown.startswith("CheckFailed: With 4 ranks") and "your ranks sent 480 bytes" in shown
    assert "checks.py" not in shown and "chapter_tests" not in shown and "File " not in shown


@pytest.mark.parametrize("name", checks.names_of("reduce_scatter_tensor"))
def test_zero2_step_passes_with_each_of_torchs_names_for_reduce_scatter(kernel, name):
    answer = f'''
def zero2_step(param_shard, grad, lr):
    grad_shard = torch.empty_like(param_shard)
    dist.{name}(grad_shard, grad.contiguous(), op=dist.ReduceOp.SUM)
    return param_shard - lr * grad_shard / dist.get_world_size()
'''
    assert kernel.execute(SETUP + answer).error is None
    run = kernel.execute(_test_cell("07_reduce_scatter", "07-zero2-step-test"))
    assert run.error is None, run.error and run.error["evalue"]


def test_a_check_that_leaves_out_the_context_still_names_the_case():
    def check(result, n):
        checks.expect(result.returns[1], n + 1, rank=1, what="rank 1's value")

    with pytest.raises(AssertionError) as caught:
        checks.check_cases(lambda rank, world_size, n: n, [checks.Case(2, n=5)], check)
    assert str(caught.value).startswith("In the case (world_size=2, n=5): On rank 1, rank 1's")


# --- the order of events across ranks ------------------------------------------------------------

def _start_all_then_wait(tensors):
    for work in [dist.all_reduce(t, async_op=True) for t in tensors]:
        work.wait()


def _wait_on_futures(tensors):
    torch.futures.wait_all([dist.all_reduce(t, async_op=True).get_future() for t in tensors])


def _wait_for_each_before_the_next(tensors):
    for t in tensors:
        dist.all_reduce(t, async_op=True).wait()


def late_rank_case(rank, world_size, answer):
    tensors = [torch.ones(2) for _ in range(3)]
    with checks.late_rank("all_reduce", len(tensors), timeout=1.0):
        answer(tensors)
    return tensors


@pytest.mark.parametrize("answer, started", [(_start_all_then_wait, 3), (_wait_on_futures, 3),
                                             (_wait_for_each_before_the_next, 1)])
def test_late_rank_shows_how_many_calls_each_rank_started_before_waiting(answer, started):
    result = checks.run(late_rank_case, 3, args=(answer,))
    joined = min(c.started for c in result.calls("all_reduce", 2))
    assert [sum(c.started < joined for c in result.calls("all_reduce", rank))
            for rank in (0, 1)] == [started, started]
    assert checks.same(result.returns, [[torch.full((2,), 3.0)] * 3] * 3)


@pytest.mark.parametrize("dtype, at, off, close", [
    # float32 rounding of values near 1, as a rank's other order of sums leaves it
    (torch.float32, 0, 3e-6, True), (torch.float32, 0, 1e-4, False),
    (torch.float64, 0, 3e-6, False), (torch.float64, 0, 3e-7, True),
    (torch.bfloat16, 2, 0.01, True), (torch.bfloat16, 2, 0.1, False),
])
def test_floating_point_results_are_the_same_within_their_dtypes_rounding(dtype, at, off,
                                                                         close):
    expected = torch.tensor([-0.016813, 0.75, 1.0], dtype=torch.float64)
    got = expected.clone()
    got[at] += off
    assert checks.same(got.to(dtype), expected.to(dtype)) is close
    assert checks.same([got.to(dtype)], [expected.to(dtype)]) is close
