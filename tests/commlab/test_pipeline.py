"""commlab.pipeline and commlab.activations: the order of a run's steps, the clock of ticks and
its bubble, the messages read from a trace and checked against a schedule, the activations a
stage holds, the Busy layer, the picture; and torch.distributed.pipelining's own schedules read
the same way."""

from __future__ import annotations

import time

import pytest
import torch
import torch.distributed as dist

import commlab
from commlab import checks
from commlab.activations import Busy, held_activations
from commlab.pipeline import (
    Step,
    bubble,
    draw_pipeline,
    expect_schedule,
    expected_messages,
    from_spans,
    gap_name,
    held_by_order,
    messages,
    messages_by_gap,
    order_of,
    replay,
)
from commlab.timeline import Span
from commlab.trace import Call, TensorInfo

HIDDEN = 4


def gpipe_order(num_microbatches):
    return [("F", i) for i in range(num_microbatches)] + [
        ("B", i) for i in range(num_microbatches)]


def one_f_one_b_order(rank, world_size, num_microbatches):
    """Chapter 15's order, which torch's Schedule1F1B runs."""
    warmup = min(world_size - rank, num_microbatches)
    order = [("F", i) for i in range(warmup)]
    for i in range(num_microbatches - warmup):
        order += [("B", i), ("F", warmup + i)]
    return order + [("B", i) for i in range(num_microbatches - warmup, num_microbatches)]


# --- the order and the clock -------------------------------------------------------------------

def test_order_of_numbers_forward_and_backward_spans_and_skips_other_labels():
    spans = [Span(label, float(t), float(t) + 0.5) for t, label in enumerate(
        ["forward", "forward", "wait", "backward", "forward", "backward", "backward"])]
    assert order_of(spans) == [("F", 0), ("F", 1), ("B", 0), ("F", 2), ("B", 1), ("B", 2)]


@pytest.mark.parametrize("world_size, num_microbatches", [(2, 1), (4, 8), (3, 5), (5, 2)])
def test_replayed_gpipe_and_1f1b_leave_the_bubble_of_the_closed_form(world_size,
                                                                     num_microbatches):
    predicted = (world_size - 1) / (num_microbatches + world_size - 1)
    gpipe = replay([gpipe_order(num_microbatches)] * world_size)
    one_f_one_b = replay([one_f_one_b_order(r, world_size, num_microbatches)
                          for r in range(world_size)])
    assert bubble(gpipe) == pytest.approx(predicted)
    assert bubble(one_f_one_b) == pytest.approx(predicted)
    span = (num_microbatches + world_size - 1) * 3          # forward 1 tick, backward 2
    assert max(s.finished for steps in gpipe for s in steps) == span


def test_replay_starts_each_step_when_its_rank_is_free_and_its_input_is_there():
    timed = replay([gpipe_order(2)] * 2)
    assert [(repr(s), s.started, s.finished) for s in timed[0]] == [
        ("F0", 0, 1), ("F1", 1, 2), ("B0", 5, 7), ("B1", 7, 9)]
    assert [(repr(s), s.started, s.finished) for s in timed[1]] == [
        ("F0", 1, 2), ("F1", 2, 3), ("B0", 3, 5), ("B1", 5, 7)]


def test_replay_names_the_steps_that_wait_for_each_other_forever():
    # rank 0 wants B0 before its F1; rank 1 runs B0 only after F1, which needs rank 0's F1
    with pytest.raises(ValueError, match="rank 0's B0 waits for rank 1's B0; rank 1's F1 "
                                         "waits for rank 0's F1"):
        replay([[("F", 0), ("B", 0), ("F", 1), ("B", 1)],
                [("F", 0), ("F", 1), ("B", 1), ("B", 0)]])


def test_replay_rejects_a_step_that_needs_a_step_no_rank_runs():
    with pytest.raises(ValueError, match="rank 1's F1 needs rank 0's F1"):
        replay([[("F", 0), ("B", 0)], [("F", 0), ("F", 1), ("B", 0), ("B", 1)]])


def test_held_by_order_is_the_most_forward_steps_without_their_backward_step():
    assert held_by_order(gpipe_order(8)) == 8
    assert [held_by_order(one_f_one_b_order(r, 4, 8)) for r in range(4)] == [4, 3, 2, 1]


def test_from_spans_measures_milliseconds_from_the_first_step_of_any_rank():
    spans = [[Span("forward", 10.0, 10.5), Span("backward", 11.0, 12.0)],
             [Span("setup", 9.0, 9.5), Span("forward", 10.5, 11.0)]]
    timed = from_spans(spans)
    assert timed[0] == [Step("F", 0, 0.0, 500.0), Step("B", 0, 1000.0, 2000.0)]
    assert timed[1] == [Step("F", 0, 500.0, 1000.0)]
    # two ranks over 2000 ms, busy 1500 + 500 of them
    assert bubble(timed) == pytest.approx(0.5)


# --- messages ----------------------------------------------------------------------------------

def _call(op, rank, started, root=None, ops=None):
    info = TensorInfo((2, HIDDEN), "float32", "cpu", 32)
    return Call(op=op, index=1, seq=0, rank=rank, group_ranks=(0, 1, 2, 3), root=root,
                started=started, ops=[(kind, peer, info) for kind, peer in ops or []])


def test_messages_name_activations_and_gradients_by_direction_with_sends_first_in_a_batch():
    calls = [_call("recv", 1, 1.0, root=0),
             _call("batch_isend_irecv", 1, 2.0, ops=[("irecv", 2), ("isend", 2)]),
             _call("isend", 1, 3.0, root=0),
             _call("send", 1, 4.0, root=3)]
    assert messages(calls, 1) == ["recv F0 from 0", "send F0 to 2", "recv B0 from 2",
                                  "send B0 to 0", "send to 3"]


def test_expected_messages_put_each_send_and_the_next_receive_in_one_gap():
    order = one_f_one_b_order(1, 4, 3)                  # F0 F1 F2 B0 B1 B2
    assert expected_messages(order, 1, 4) == [
        ["recv F0 from 0"], ["send F0 to 2", "recv F1 from 0"],
        ["send F1 to 2", "recv F2 from 0"], ["send F2 to 2", "recv B0 from 2"],
        ["send B0 to 0", "recv B1 from 2"], ["send B1 to 0", "recv B2 from 2"],
        ["send B2 to 0"]]
    assert expected_messages(gpipe_order(1), 0, 1) == [[], [], []]
    assert gap_name(order, 0) == "before F0"
    assert gap_name(order, 3) == "between F2 and B0"
    assert gap_name(order, 6) == "after B2"


def test_messages_by_gap_places_each_message_between_the_steps_around_its_start():
    spans = [Span("forward", 1.0, 2.0), Span("backward", 3.0, 4.0)]
    calls = [_call("recv", 1, 0.5, root=0), _call("send", 1, 2.5, root=2),
             _call("recv", 1, 2.6, root=2), _call("send", 1, 4.5, root=0)]
    assert messages_by_gap(calls, spans, 1) == [
        ["recv F0 from 0"], ["send F0 to 2", "recv B0 from 2"], ["send B0 to 0"]]


class _Run:
    """What expect_schedule reads of a run: world_size, trace, and a case's context."""

    def __init__(self, trace, context=None):
        self.world_size, self.trace, self.context = len(trace), trace, context or {}


def _two_rank_run(rank0_calls, rank0_spans):
    spans1 = [Span("forward", 1.0, 2.0), Span("backward", 3.0, 4.0)]
    calls1 = [_call("recv", 1, 0.5, root=0), _call("send", 1, 4.5, root=0)]
    for call in calls1:
        call.group_ranks = (0, 1)
    return _Run([rank0_calls, calls1], {"batch": 2}), [rank0_spans, spans1]


def test_expect_schedule_accepts_a_run_that_follows_the_schedule():
    spans0 = [Span("forward", 0.0, 0.4), Span("backward", 5.0, 6.0)]
    run, spans = _two_rank_run([_call("send", 0, 0.5, root=1), _call("recv", 0, 0.6, root=1)],
                               spans0)
    expect_schedule(run, spans, [gpipe_order(1)] * 2, "this chapter's GPipe order")


def test_expect_schedule_names_the_rank_the_gap_and_both_sets_of_messages():
    # rank 0 receives the gradient only after its backward step began
    spans0 = [Span("forward", 0.0, 0.4), Span("backward", 5.0, 6.0)]
    run, spans = _two_rank_run([_call("send", 0, 0.5, root=1), _call("recv", 0, 6.5, root=1)],
                               spans0)
    with pytest.raises(checks.CheckFailed) as failed:
        expect_schedule(run, spans, [gpipe_order(1)] * 2, "this chapter's GPipe order")
    text = str(failed.value)
    assert text.startswith("On rank 0 (world_size=2, batch=2), between F0 and B0 your code "
                           "should start these messages (this chapter's GPipe order):\n    "
                           "send F0 to 1, recv B0 from 1\nbut it started\n    send F0 to 1\n")


def test_expect_schedule_names_the_first_step_out_of_order():
    spans0 = [Span("backward", 0.0, 0.4), Span("forward", 5.0, 6.0)]
    run, spans = _two_rank_run([], spans0)
    with pytest.raises(checks.CheckFailed, match=r"should follow this chapter's GPipe order:\n"
                                                 r"    F0\nbut they are\n    B0\n"):
        expect_schedule(run, spans, [gpipe_order(1)] * 2, "this chapter's GPipe order")


# --- activations held --------------------------------------------------------------------------

def _stage():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(HIDDEN, HIDDEN), torch.nn.Tanh())


def test_held_activations_counts_forward_passes_until_their_backward_pass():
    stage = _stage()
    with held_activations(stage) as held:
        outputs = [stage(torch.randn(2, HIDDEN)) for _ in range(3)]
        assert (held.forwards, held.live) == (3, 3)
        outputs[0].sum().backward()
        assert held.live == 2
        outputs[1].sum().backward(retain_graph=True)   # kept for another backward pass
        assert held.live == 2
        del outputs[:2]                                 # ... until the graph is dropped
        assert held.live == 1
    assert (held.peak, held.history) == (3, [1, 2, 3, 2, 1])


def test_held_activations_counts_only_the_stage_not_the_loss_after_it():
    stage = _stage()
    with held_activations(stage) as held:
        loss = torch.nn.functional.mse_loss(stage(torch.randn(2, HIDDEN)),
                                            torch.zeros(2, HIDDEN))
        assert held.live == 1
        loss.backward()
    assert (held.live, held.peak, held.forwards) == (0, 1, 1)


def _forward(stage, kept):
    """A micro-batch's forward step as a schedule runs it: a fresh leaf in, (inputs, outputs)
    out, both kept in ``kept``."""
    inputs = torch.randn(2, HIDDEN).requires_grad_()
    kept.append((inputs, stage(inputs)))


def test_held_activations_counts_inputs_still_alive_when_a_forward_pass_begins():
    stage = _stage()
    with held_activations(stage) as held:
        kept = []
        for _ in range(3):
            _forward(stage, kept)
        for pair in kept:
            pair[1].sum().backward()     # autograd lets go of what it saved ...
        del pair
        assert held.live == 0
        _forward(stage, kept)            # ... but the caller still holds all three
        kept.clear()
        _forward(stage, kept)
    assert (held.kept_history, held.kept) == ([0, 1, 2, 3, 0], 3)


def test_held_activations_counts_an_input_kept_only_through_its_output_or_loss():
    stage = _stage()
    with held_activations(stage) as held:
        kept = []
        _forward(stage, kept)
        _forward(stage, kept)
        for pair in kept:
            pair[1].sum().backward()
        del pair
        # no reference to the inputs left here: the outputs' graphs lead back to them
        kept = [torch.nn.functional.mse_loss(outputs, torch.zeros_like(outputs))
                for _, outputs in kept]
        _forward(stage, [])
        kept.clear()
        _forward(stage, [])
    assert held.kept_history == [0, 1, 2, 0]


def test_held_activations_sees_nothing_without_gradients_and_leaves_no_hook_behind():
    stage = _stage()
    with held_activations(stage) as held, torch.no_grad():
        stage(torch.randn(2, HIDDEN))
    assert (held.forwards, held.peak) == (1, 0)
    assert not stage._forward_hooks and not stage._forward_pre_hooks
    stage(torch.randn(2, HIDDEN))
    assert held.forwards == 1


# --- Busy ---------------------------------------------------------------------------------------

def test_busy_takes_its_time_forward_and_twice_backward_and_passes_gradients_on():
    layer = Busy(0.05)
    x = torch.randn(3, requires_grad=True)
    began = time.perf_counter()
    y = layer(x)
    forward = time.perf_counter() - began
    began = time.perf_counter()
    (y * torch.arange(3.0)).sum().backward()
    backward = time.perf_counter() - began
    assert forward >= 0.05 and backward >= 0.1
    assert torch.equal(y.detach(), x.detach()) and torch.equal(x.grad, torch.arange(3.0))
    assert repr(layer) == "Busy(seconds=0.05)"


# --- the picture --------------------------------------------------------------------------------

def test_draw_pipeline_draws_a_lane_per_rank_a_bar_per_step_and_the_bubble():
    fig = draw_pipeline(replay([gpipe_order(2)] * 2), title="two stages")
    ax = fig.axes[0]
    bars = [p for container in ax.containers for p in container.patches]
    assert len(bars) == 2 * (1 + 4)                     # per rank: the idle lane, four steps
    assert [t.get_text() for t in ax.texts] == ["0", "1", "0", "1"] * 2
    assert [t.get_text() for t in ax.get_legend().get_texts()] == [
        "forward step (micro-batch number)", "backward step", "idle: the bubble"]
    assert "idle 33% of the time" in " ".join(t.get_text() for t in fig.texts)
    assert ax.get_xlabel().startswith("ticks")


# --- torch.distributed.pipelining runs the same schedules ---------------------------------------

def _make_stage(stage):
    torch.manual_seed(1000 + stage)
    return torch.nn.Sequential(torch.nn.Linear(HIDDEN, HIDDEN), torch.nn.Tanh())


def _make_batch(batch):
    generator = torch.Generator().manual_seed(1)
    return (torch.randn(batch, HIDDEN, generator=generator),
            torch.randn(batch, HIDDEN, generator=generator))


def _torch_schedules(rank, world_size, num_microbatches):
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

    out = {}
    for name, schedule_class in (("GPipe", ScheduleGPipe), ("1F1B", Schedule1F1B)):
        first_call = len(commlab.trace.current().calls)
        stage = _make_stage(rank)
        schedule = schedule_class(PipelineStage(stage, rank, world_size, torch.device("cpu")),
                                  num_microbatches, loss_fn=torch.nn.functional.mse_loss)
        x, target = _make_batch(16)
        losses = []
        if rank == 0:
            schedule.step(x)
        elif rank == world_size - 1:
            schedule.step(target=target, losses=losses)
        else:
            schedule.step()
        dist.barrier()
        out[name] = ([p.grad for p in stage.parameters()], first_call,
                     len(commlab.trace.current().calls) - 1)
    return out


@pytest.mark.slow
def test_torch_pipelining_schedules_give_our_gradients_and_send_our_messages_in_our_order():
    world_size, num_microbatches = 4, 8
    result = commlab.run(_torch_schedules, world_size, args=(num_microbatches,),
                         backend="gloo", timeout=120)
    stages = [_make_stage(s) for s in range(world_size)]
    x, target = _make_batch(16)
    for stage in stages:
        x = stage(x)
    torch.nn.functional.mse_loss(x, target).backward()
    for rank in range(world_size):
        for name in ("GPipe", "1F1B"):
            gradients, first, last = result.returns[rank][name]
            assert checks.same(gradients, [p.grad for p in stages[rank].parameters()])
            # the schedule's own first messages (which shapes to expect) are small and not
            # floating point: the activations and gradients are the rest
            calls = [c for c in result.trace[rank][first:last]
                     if all(info.dtype == "float32" for info in
                            (c.tensors.get("tensor"), *c.tensors.get("tensors", []))
                            if info is not None) and c.tensors]
            order = (gpipe_order(num_microbatches) if name == "GPipe"
                     else one_f_one_b_order(rank, world_size, num_microbatches))
            expected = [m for gap in expected_messages(order, rank, world_size) for m in gap]
            assert messages(calls, rank) == expected, (name, rank)
