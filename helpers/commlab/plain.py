"""Values as plain data: what may cross from a process that runs someone else's code to one that
must not run it.

:func:`dumps` writes numbers, strings, bytes, tensors, ``None``, lists, tuples, dicts and sets,
and commlab's own records (a trace's ``Call`` and ``TensorInfo``, a timeline's ``Span``, a rank's
failure) spelled out field by field, plain CPU tensors as their bytes, dtype and shape
(:mod:`commlab.tensor_bytes`: a trace holds thousands, and the reader below takes tens of
microseconds for each tensor it rebuilds), with ``torch.save``. :func:`loads` reads them back with
``torch.load(..., weights_only=True)``, which builds nothing but those plain values, then
rebuilds the records from their fields. Whatever the writer did, what the reader gets is data:
it can be wrong, never active. A grader's ranks report this way (``commlab.run``'s own ranks,
whose function the notebook itself wrote, use cloudpickle and may return anything).
"""

from __future__ import annotations

import dataclasses
import functools
import io
from typing import Any

import torch

from .errors import CommlabError
from .tensor_bytes import from_bytes, is_bytes_only, to_bytes

_MARK = "__commlab_record__"
_TENSOR = "tensor"  # a record of a tensor's bytes, dtype and shape (commlab.tensor_bytes)
_PLAIN = (str, int, float, bool, complex, bytes, type(None), torch.dtype, torch.device,
          torch.Size)


class NotPlain(CommlabError):
    """A value that is not data (a model, a function, an object of some class)."""


@functools.cache
def _records() -> dict[str, type]:
    from .errors import RankFailure
    from .timeline import Span
    from .trace import Call, TensorInfo

    return {cls.__name__: cls for cls in (Call, TensorInfo, Span, RankFailure)}


def to_plain(value: Any, where: str) -> Any:
    """``value`` as plain values, records spelled out; refuses anything else, naming it as
    ``where`` says (``"what rank 2 returned"``)."""
    if isinstance(value, torch.Tensor):
        if type(value) not in (torch.Tensor, torch.nn.Parameter):
            raise NotPlain(
                f"{where} is a {type(value).__name__}, which cannot come back from the ranks. "
                "Return a plain tensor (for a DTensor, .to_local() or .full_tensor()).")
        tensor = value.detach().to("cpu")
        # an empty one as it is: torch.save writes empty bytes as a call the reader refuses
        if not is_bytes_only(tensor) or tensor.numel() == 0:
            return tensor
        data, dtype, shape = to_bytes(tensor)
        return {_MARK: _TENSOR, "data": data, "dtype": dtype, "shape": shape}
    if isinstance(value, _PLAIN):
        return value
    records = _records()
    if type(value).__name__ in records and isinstance(value, records[type(value).__name__]):
        fields = {f.name: to_plain(getattr(value, f.name), where)
                  for f in dataclasses.fields(value)}
        return {_MARK: type(value).__name__, **fields}
    if isinstance(value, (list, tuple, set, frozenset)):
        items = [to_plain(v, where) for v in value]
        if isinstance(value, list):
            return items
        return set(items) if isinstance(value, (set, frozenset)) else tuple(items)
    if isinstance(value, dict):
        return {to_plain(k, where): to_plain(v, where) for k, v in value.items()}
    raise NotPlain(
        f"{where} is a {type(value).__name__}, which cannot come back from the ranks. Return "
        "tensors, numbers, strings, or lists, tuples and dicts of them.")


def from_plain(value: Any) -> Any:
    """Records rebuilt from their fields; plain values as they are."""
    if isinstance(value, dict):
        kind = value.get(_MARK)
        if kind == _TENSOR:
            try:
                return from_bytes(value.get("data"), value.get("dtype"), value.get("shape"))
            except ValueError as exc:
                raise NotPlain(f"what was sent back is not plain data ({exc})") from None
        records = _records()
        if isinstance(kind, str) and kind in records:
            cls = records[kind]
            known = {f.name for f in dataclasses.fields(cls)}
            return cls(**{k: from_plain(v) for k, v in value.items() if k in known})
        return {k: from_plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [from_plain(v) for v in value]
    if isinstance(value, tuple):
        return tuple(from_plain(v) for v in value)
    if isinstance(value, set):
        return {from_plain(v) for v in value}
    return value


def dumps(value: Any, where: str = "the value") -> bytes:
    """``value`` as bytes for :func:`loads` (raises :class:`NotPlain`)."""
    buffer = io.BytesIO()
    torch.save(to_plain(value, where), buffer)
    return buffer.getvalue()


def loads(blob: bytes, limit: int | None = None) -> Any:
    """What :func:`dumps` wrote; never runs code. Raises :class:`NotPlain` for anything
    malformed or over ``limit`` bytes."""
    if limit is not None and len(blob) > limit:
        raise NotPlain(f"{len(blob)} bytes were sent back, more than the {limit} allowed")
    try:
        return from_plain(torch.load(io.BytesIO(blob), weights_only=True))
    except NotPlain:
        raise
    except Exception as exc:  # noqa: BLE001 - malformed data is the sender's failure
        raise NotPlain(f"what was sent back is not plain data ({type(exc).__name__}: "
                       f"{str(exc)[:200]})") from None
