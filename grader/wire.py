"""The one thing that crosses from where student code runs to where a grade is decided: a
launch's result, as data.

The rank host (in the sandbox) writes each launch's result, or its failure, with
:mod:`commlab.plain`: numbers, strings, tensors, lists, tuples, dicts, sets, and commlab's own
records spelled out field by field, read back with ``torch.load(..., weights_only=True)``,
which builds nothing else. The ranks' own reports reach the rank host the same way, so no code
of a submission is ever unpickled outside its ranks. Whatever the student's code did, what
arrives in the scoring kernel is data: it can be wrong, never active.
"""

from __future__ import annotations

import builtins
import dataclasses

from commlab import errors, plain
from commlab.result import RunResult

# A reply larger than this is refused: a run's data is kilobytes, a forged reply could be huge.
MAX_BYTES = 256 * 2**20
# Exceptions that may arrive by name (a launch refused before it started: bad arguments).
_BUILTIN = {"ValueError", "TypeError", "RuntimeError", "TimeoutError", "NameError"}


class NotSendable(errors.CommlabError):
    """A rank returned something that is not data (a model, a function, an object)."""


# --- in the rank host -------------------------------------------------------------------------

def _result_data(result: RunResult) -> dict:
    return {"world_size": result.world_size, "backend": result.backend,
            "returns": [plain.to_plain(value, f"what rank {rank} returned")
                        for rank, value in enumerate(result.returns)],
            "stdout": list(result.stdout), "stderr": list(result.stderr),
            "trace": plain.to_plain(result.trace, "the trace"),
            "warnings": plain.to_plain(result.warnings, "the warnings"),
            "network": plain.to_plain(result.network, "the network's count"),
            "groups": plain.to_plain(result.groups, "the trace")}


def encode(outcome: RunResult | BaseException) -> bytes:
    """A launch's result or error, as bytes for :func:`decode`."""
    if isinstance(outcome, RunResult):
        try:
            data = {"kind": "result", "result": _result_data(outcome)}
        except plain.NotPlain as exc:
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
            except plain.NotPlain:
                data["result"] = _result_data(dataclasses.replace(
                    result, returns=[None] * result.world_size))
    return plain.dumps(data, "the launch's result")


# --- in the scoring kernel ----------------------------------------------------------------------

def _result(data: dict) -> RunResult:
    return RunResult(int(data["world_size"]), str(data["backend"]),
                     returns=list(data["returns"]),
                     stdout=[str(s) for s in data["stdout"]],
                     stderr=[str(s) for s in data["stderr"]],
                     trace=list(data["trace"]), warnings=list(data["warnings"]),
                     network=data.get("network"), groups=list(data.get("groups") or []))


def decode(blob: bytes) -> RunResult | BaseException:
    """What :func:`encode` wrote: a RunResult, or the exception to raise. Never runs code."""
    try:
        data = plain.loads(blob, MAX_BYTES)
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

