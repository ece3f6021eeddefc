"""commlab.timeline and the start/finish times of traced calls: an async call finishes when it is
waited for, a blocking one when it returns, and the timeline draws both beside the computation."""

from __future__ import annotations

import time

import pytest
import torch
import torch.distributed as dist

import commlab
from commlab.timeline import Span, draw_timeline, span, spans


def _overlap(rank, world_size):
    work = dist.all_reduce(torch.ones(8), async_op=True)
    with span("compute"):
        time.sleep(0.2)
    work.wait()
    dist.all_reduce(torch.ones(8))
    dist.all_reduce(torch.ones(8), async_op=True)       # never waited for
    return spans()


@pytest.fixture(scope="module")
def result():
    return commlab.run(_overlap, world_size=2, backend="gloo")


def test_async_call_finishes_when_its_work_is_waited_for(result):
    for rank in range(2):
        started_async = result.calls("all_reduce", rank)[0]
        compute = result.returns[rank][0]
        assert started_async.async_op
        assert started_async.started <= compute.started
        assert started_async.finished >= compute.finished


def test_blocking_call_finishes_when_it_returns(result):
    blocking = result.calls("all_reduce", 0)[1]
    assert not blocking.async_op
    assert blocking.finished == pytest.approx(blocking.started + blocking.seconds)


def test_async_call_never_waited_for_has_no_finish(result):
    assert result.calls("all_reduce", 0)[2].finished is None


def test_spans_come_back_in_order_and_are_cleared_once_read():
    with span("a"):
        pass
    with span("b"):
        pass
    first = spans()
    assert [s.label for s in first] == ["a", "b"]
    assert first[0].finished <= first[1].started
    assert spans() == []


def test_draw_timeline_draws_a_bar_per_span_and_per_call(result):
    fig = draw_timeline(result, result.returns)
    ax = fig.axes[0]
    bars = [p for container in ax.containers for p in container.patches]
    assert len(bars) == 2 * (1 + 3)       # per rank: one span, three calls
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels == ["compute", "blocking call", "async call, started to waited"]


def test_draw_timeline_rejects_spans_that_are_not_one_list_per_rank(result):
    with pytest.raises(ValueError, match="a list of 2 lists"):
        draw_timeline(result, [[Span("x", 0.0, 1.0)]])


def test_a_span_shows_its_label_but_not_its_times():
    assert repr(Span("backward", 1.25, 2.5)) == "Span('backward')"
