"""What a pipeline stage holds for its backward pass, and a layer that stands for its work.

:func:`held_activations` counts, from autograd itself, the micro-batches whose saved
activations a stage still holds: every tensor a forward pass of the stage saves for the backward
pass is tagged with that forward pass (``torch.autograd.graph.saved_tensors_hooks``), and the
forward pass counts as held until autograd has let go of the last of them. Autograd lets go of
them in the backward pass, whatever the schedule keeps; so it also counts, when each forward
pass begins, the earlier forward passes whose input tensor is still alive (``weakref``): the
schedule still holds it, or the output or graph that leads back to it.

:class:`Busy` computes nothing and takes time, so that a timeline of a pipeline shows its
schedule rather than the load of the machine it ran on.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
import weakref
from collections.abc import Iterator
from typing import Any

import torch


class _MicroBatch:
    """Stands for one forward pass of a stage; lives as long as autograd keeps any tensor that
    forward pass saved."""


@dataclasses.dataclass
class _Saved:
    tensor: torch.Tensor
    forward: _MicroBatch


@dataclasses.dataclass
class HeldActivations:
    """What :func:`held_activations` saw on one stage.

    Attributes:
        forwards: how many times the stage's forward pass ran.
        live: forward passes whose saved activations autograd still holds now.
        peak: the most it held at once.
        history: ``live`` after every change, oldest first.
        kept_history: for each forward pass, when it began, how many earlier forward passes'
            input tensors were still alive (held by the caller, or by an output or a graph
            it keeps), oldest first.
        kept: the most of ``kept_history``.
    """

    forwards: int = 0
    live: int = 0
    peak: int = 0
    history: list[int] = dataclasses.field(default_factory=list)
    kept_history: list[int] = dataclasses.field(default_factory=list)
    kept: int = 0
    _current: _MicroBatch | None = None
    _depth: int = 0
    _inputs: set[int] = dataclasses.field(default_factory=set)

    def _changed(self, by: int) -> None:
        self.live += by
        self.peak = max(self.peak, self.live)
        self.history.append(self.live)

    def _forward_started(self, module: Any, args: Any) -> None:
        if self._depth == 0:
            self.forwards += 1
            self._current = None
            self.kept_history.append(len(self._inputs))
            self.kept = max(self.kept, len(self._inputs))
            if args and isinstance(args[0], torch.Tensor):
                self._inputs.add(self.forwards)
                weakref.finalize(args[0], self._inputs.discard, self.forwards)
        self._depth += 1

    def _forward_finished(self, module: Any, args: Any, output: Any) -> None:
        self._depth -= 1
        if self._depth == 0:
            self._current = None

    def _pack(self, tensor: torch.Tensor) -> Any:
        if self._depth == 0:
            return tensor               # saved outside the stage (the loss): not counted
        if self._current is None:
            self._current = _MicroBatch()
            self._changed(+1)
            weakref.finalize(self._current, self._changed, -1)
        # detached: a saved output that held its own graph would keep it alive in a cycle
        return _Saved(tensor.detach(), self._current)

    @staticmethod
    def _unpack(saved: Any) -> torch.Tensor:
        return saved.tensor if isinstance(saved, _Saved) else saved


@contextlib.contextmanager
def held_activations(module: torch.nn.Module) -> Iterator[HeldActivations]:
    """Count the micro-batches whose activations autograd holds for ``module``'s backward pass.

    Every tensor a forward pass of ``module`` saves for the backward pass (the inputs of its
    matrix products, the outputs of its activation functions) is tagged with that forward
    pass, through ``torch.autograd.graph.saved_tensors_hooks``. A forward pass counts as held
    from its first saved tensor until autograd has let go of the last one: when its backward
    pass ran (without ``retain_graph=True``), or when its graph was dropped.

    The backward pass frees those even while the caller still holds the micro-batch's input
    and output, so each forward pass also notes how many earlier forward passes' input tensors
    are alive when it begins (``kept_history``, ``kept``): a schedule that keeps every
    micro-batch's ``(inputs, outputs)`` to the end of the step keeps them all.

    Example:
        >>> with held_activations(stage) as held:
        ...     train_step(stage, ...)
        >>> held.peak
        4
    """
    held = HeldActivations()
    handles = [module.register_forward_pre_hook(held._forward_started),
               module.register_forward_hook(held._forward_finished, always_call=True)]
    try:
        with torch.autograd.graph.saved_tensors_hooks(held._pack, held._unpack):
            yield held
    finally:
        for handle in handles:
            handle.remove()


# --- a layer that only takes time --------------------------------------------------------------

class _Wait(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, seconds: float) -> torch.Tensor:
        ctx.seconds = seconds
        time.sleep(seconds)
        return x.clone()

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        time.sleep(2 * ctx.seconds)
        return grad, None


class Busy(torch.nn.Module):
    """A layer that computes nothing and takes time: ``seconds`` in the forward pass, twice as
    long in the backward pass. It stands for the work of a real stage, so that a timeline shows
    the schedule even where ranks share a few CPU cores (sleeping ranks do not compete for
    them)."""

    def __init__(self, seconds: float):
        super().__init__()
        self.seconds = seconds

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _Wait.apply(x, self.seconds)

    def extra_repr(self) -> str:
        return f"seconds={self.seconds}"
