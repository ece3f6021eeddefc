"""What comes back from the ranks (grader/wire.py): a run's result, records and values, or its
failure, read as data only; anything else (code, an object that is not data, a reply too large)
is refused with what to return instead."""

from __future__ import annotations

import io
import os
import pickle
from pathlib import Path

import torch

from commlab import errors
from commlab.result import RunResult
from commlab.timeline import Span
from commlab.trace import Call, TensorInfo
from grader import wire


def _call() -> Call:
    info = TensorInfo((2,), "float32", "cpu", 8)
    return Call(op="batch_isend_irecv", index=1, seq=0, rank=0, group_ranks=(0, 1),
                tensors={"tensors": [info]}, sent_to={1: 8}, received_from={1: 8},
                started=1.5, finished=2.5, before={"tensors": [torch.ones(2)]},
                ops=[("isend", 1, info)])


def test_a_result_comes_back_with_its_records_and_values():
    import collections

    pair = collections.namedtuple("Pair", "a b")
    result = RunResult(2, "gloo", returns=[{"x": torch.arange(3), "p": pair(1, 2.5)},
                                           [Span("step", 1.0, 2.0), None, "s", {1, 2}]],
                       stdout=["a", "b"], stderr=["", ""], trace=[[_call()], []],
                       warnings=[["w"], []])
    back = wire.decode(wire.encode(result))
    assert isinstance(back, RunResult)
    assert torch.equal(back.returns[0]["x"], torch.arange(3))
    assert back.returns[0]["p"] == (1, 2.5)
    assert back.returns[1] == [Span("step", 1.0, 2.0), None, "s", {1, 2}]
    call = back.trace[0][0]
    assert isinstance(call, Call) and call.label == "batch_isend_irecv #1"
    assert (call.sent_to, call.received_from, call.started, call.finished) == (
        {1: 8}, {1: 8}, 1.5, 2.5)
    assert torch.equal(call.before["tensors"][0], torch.ones(2))
    assert call.ops[0] == ("isend", 1, TensorInfo((2,), "float32", "cpu", 8))
    assert back.bytes_sent() == [8, 0]


def test_failures_come_back_as_the_same_errors():
    ran = RunResult(2, "gloo", [None, None], ["x", "y"], ["", ""], [[], []], [[], []])
    for error in (errors.RankError("rank 1 raised", {1: "ValueError: no"}, ran),
                  errors.RankCrashed("rank 0 died", {0: "killed by SIGKILL"}, ran,
                                     {0: "SIGKILL"}),
                  errors.CollectiveTimeout("stuck", {0: "all_reduce #1"}, ran),
                  ValueError("world_size must be at least 1")):
        back = wire.decode(wire.encode(error))
        assert type(back) is type(error) and str(back) == str(error)
        assert getattr(back, "failures", None) == getattr(error, "failures", None)
    assert wire.decode(wire.encode(errors.RankCrashed("d", {}, ran, {0: "SIGABRT"}))).signals \
        == {0: "SIGABRT"}


def test_what_is_not_data_is_refused_with_what_to_return():
    result = RunResult(1, "gloo", [torch.nn.Linear(2, 2)], [""], [""], [[]], [[]])
    back = wire.decode(wire.encode(result))
    assert isinstance(back, wire.NotSendable)
    assert "what rank 0 returned is a Linear" in str(back) and "Return tensors" in str(back)


class _Explodes:
    def __reduce__(self):
        return os.system, ("touch " + str(Path(os.environ.get("TMPDIR", "/tmp")) / "pwned"),)


def test_a_forged_reply_that_would_run_code_is_only_an_error(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    for forged in (pickle.dumps({"kind": "result", "result": _Explodes()}),
                   _saved({"kind": "result", "result": _Explodes()}),
                   b"\x10\x00\x00\x00forged-reply", b""):
        back = wire.decode(forged)
        assert isinstance(back, errors.CommlabError)
        assert "not a run's result" in str(back)
    assert not (tmp_path / "pwned").exists()


def _saved(value) -> bytes:
    buffer = io.BytesIO()
    torch.save(value, buffer)
    return buffer.getvalue()


def test_a_reply_too_large_is_refused(monkeypatch):
    monkeypatch.setattr(wire, "MAX_BYTES", 10)
    assert "more than the 10" in str(wire.decode(b"x" * 11))
