"""What crosses from the ranks that ran a student's answers to the kernel that decides the score:
data only, read with a loader that cannot run code.

The rank host (sandboxed, where student code runs) turns a run's result, or its failure, into
plain values (numbers, strings, tensors, lists, tuples, dicts, sets) with commlab's own records
(a trace's ``Call``, its ``TensorInfo``, a timeline's ``Span``) spelled out field by field, and
writes them with ``torch.save``. The scoring kernel reads them with ``torch.load(...,
weights_only=True)``, which builds nothing but those plain values, and then rebuilds the records
from their fields. Whatever the student's code did in the ranks, what arrives is data: it can
be wrong, never active.
"""

from __future__ import annotations

import builtins
import dataclasses
import io
from typing import Any

import torch

from commlab import errors
from commlab.result import RunResult
from commlab.timeline import Span
from commlab.trace import Call, TensorInfo

# A reply larger than this is refused: a run's data is kilobytes, a forged reply could be huge.
MAX_BYTES = 256 * 2**20

_RECORDS = {cls.__name__: cls for cls in (Call, TensorInfo, Span)}
_MARK = "__commlab_record__"
_PLAIN = (str, int, float, bool, complex, bytes, type(None), torch.dtype, torch.device,
          torch.Size)
# Exceptions that may arrive by name (a launch refused before it started: bad arguments).
_BUILTIN = {"ValueError", "TypeError", "RuntimeError", "TimeoutError", "NameError"}


class NotSendable(errors.CommlabError):
    """A rank returned something that is not data (a model, a function, an object)."""


# --- in the rank host -------------------------------------------------------------------------

def _plain(value: Any, where: str) -> Any:
    """``value`` as plain values, records spelled out; refuses anything else."""
    if isinstance(value, torch.Tensor):
        if type(value) not in (torch.Tensor, torch.nn.Parameter):
            raise NotSendable(
                f"{where} is a {type(value).__name__}, which cannot come back from the ranks to "
                "the grader. Return a plain tensor (for a DTensor, .to_local() or "
                ".full_tensor()).")
        return value.detach().to("cpu")
    if isinstance(value, _PLAIN):
        return value
    if isinstance(value, tuple(_RECORDS.values())):
        fields = {f.name: _plain(getattr(value, f.name), where)
                  for f in dataclasses.fields(value)}
        return {_MARK: type(value).__name__, **fields}
    if isinstance(value, (list, tuple, set, frozenset)):
        items = [_plain(v, where) for v in value]
        return items if isinstance(value, list) else (
            set(items) if isinstance(value, (set, frozenset)) else tuple(items))
    if isinstance(value, dict):
        return {_plain(k, where): _plain(v, where) for k, v in value.items()}
    raise NotSendable(
        f"{where} is a {type(value).__name__}, which cannot come back from the ranks to the "
        "grader. Return tensors, numbers, strings, or lists, tuples and dicts of them.")


def _result_data(result: RunResult) -> dict:
    returns = [_plain(value, f"what rank {rank} returned")
               for rank, value in enumerate(result.returns)]
    return {"world_size": result.world_size, "backend": result.backend, "returns": returns,
            "stdout": list(result.stdout), "stderr": list(result.stderr),
            "trace": _plain(result.trace, "the trace"),
            "warnings": _plain(result.warnings, "the warnings")}


def encode(outcome: RunResult | BaseException) -> bytes:
    """A launch's result or error, as bytes for :func:`decode`."""
    if isinstance(outcome, RunResult):
        try:
            data = {"kind": "result", "result": _result_data(outcome)}
        except NotSendable as exc:
            data = {"kind": "error", "type": "NotSendable", "message": str(exc)}
    else:
        data = {"kind": "error", "type": type(outcome).__name__, "message": str(outcome)}
        for name in ("failures", "signals", "waiting"):
            if isinstance(getattr(outcome, name, None), dict):
                data[name] = {int(k): str(v) for k, v in getattr(outcome, name).items()}
        result = getattr(outcome, "result", None)
        if isinstance(result, RunResult):
            try:
                data["result"] = _result_data(result)
            except NotSendable:
                data["result"] = _result_data(dataclasses.replace(
                    result, returns=[None] * result.world_size))
    buffer = io.BytesIO()
    torch.save(data, buffer)
    return buffer.getvalue()


# --- in the scoring kernel ----------------------------------------------------------------------

def _rebuilt(value: Any) -> Any:
    """Records rebuilt from their fields; plain values as they are."""
    if isinstance(value, dict):
        kind = value.get(_MARK)
        if isinstance(kind, str) and kind in _RECORDS:
            cls = _RECORDS[kind]
            known = {f.name for f in dataclasses.fields(cls)}
            fields = {k: _rebuilt(v) for k, v in value.items() if k in known}
            return cls(**fields)
        return {k: _rebuilt(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_rebuilt(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_rebuilt(v) for v in value)
    if isinstance(value, set):
        return {_rebuilt(v) for v in value}
    return value


def _result(data: dict) -> RunResult:
    return RunResult(int(data["world_size"]), str(data["backend"]),
                     returns=_rebuilt(list(data["returns"])),
                     stdout=[str(s) for s in data["stdout"]],
                     stderr=[str(s) for s in data["stderr"]],
                     trace=_rebuilt(list(data["trace"])),
                     warnings=_rebuilt(list(data["warnings"])))


def decode(blob: bytes) -> RunResult | BaseException:
    """What :func:`encode` wrote: a RunResult, or the exception to raise. Never runs code."""
    if len(blob) > MAX_BYTES:
        return errors.CommlabError(f"the ranks sent back {len(blob)} bytes, more than the "
                                   f"{MAX_BYTES} a test's run may return")
    try:
        data = torch.load(io.BytesIO(blob), weights_only=True)
        return _result(data["result"]) if data["kind"] == "result" else _error(data)
    except Exception as exc:  # noqa: BLE001 - malformed data is the ranks' failure
        return errors.CommlabError(f"what the ranks sent back is not a run's result "
                                   f"({type(exc).__name__}: {exc})")


def _error(data: dict) -> BaseException:
    kind, message = str(data["type"]), str(data["message"])
    result = _result(data["result"]) if data.get("result") else None
    failures = {int(k): str(v) for k, v in data.get("failures", {}).items()}
    if kind == "CollectiveTimeout":
        return errors.CollectiveTimeout(message, {int(k): str(v) for k, v in
                                                  data.get("waiting", {}).items()}, result)
    if kind == "RankCrashed":
        return errors.RankCrashed(message, failures, result,
                                  {int(k): str(v) for k, v in data.get("signals", {}).items()})
    if kind == "RankError":
        return errors.RankError(message, failures, result)
    if kind == "NotSendable":
        return NotSendable(message)
    if kind in _BUILTIN:
        return getattr(builtins, kind)(message)
    return errors.CommlabError(message)
