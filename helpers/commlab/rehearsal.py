"""What a rank started ahead of its run (:mod:`commlab.standby`) does while it waits: a rehearsal
of a run's first steps, on a group of its own.

A rank is forked from the forkserver, and shares its memory until it writes to it: the first
time the rank builds a gloo group, makes a collective or pickles a tensor, every page that code
writes is copied into the rank, and every page of code it runs for the first time is mapped.
In a run that cost each rank several milliseconds of the run's own time. Rehearsed while the rank
waits, once, on a group of this rank alone (a gloo group on an in-memory store and the loopback
interface), those pages are the rank's own before its run begins.

Nothing of the rehearsal is left for the run: the group is not torch.distributed's default or
a registered one, and is dropped; its call is taken out of the trace; what it might print goes
nowhere, and its warnings are ignored. It touches no GPU (CUDA must start in the run, with the
notebook's environment). If any of it fails, the rank just waits as it is.
"""

from __future__ import annotations

import contextlib
import os
import sys
import warnings
from collections.abc import Iterator

import cloudpickle
import torch

from . import rendezvous
from . import trace as tracing


def rehearse(recorder: tracing.Recorder) -> None:
    """Build a gloo group of this rank alone, all_reduce a tensor on it through the trace
    ``recorder`` records, pickle the result as a report would; then forget all of it."""
    interface = rendezvous.loopback_interface()
    if interface is None:
        return
    import torch.distributed as dist

    try:
        with _silenced(), warnings.catch_warnings(), _environ("GLOO_SOCKET_IFNAME", interface):
            warnings.simplefilter("ignore")
            group = dist.ProcessGroupGloo(dist.HashStore(), 0, 1)
            tensor = torch.ones(2)
            dist.all_reduce(tensor, group=group)
            cloudpickle.dumps((tensor.detach().clone(), recorder.calls))
    except Exception:  # noqa: BLE001 - a rehearsal is an extra: the run does it all anyway
        pass
    finally:
        recorder.calls.clear()
        recorder.restart_numbering()


@contextlib.contextmanager
def _silenced() -> Iterator[None]:
    """File descriptors 1 and 2 to the null device meanwhile (C++ and Python output alike)."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    saved = [os.dup(1), os.dup(2)]
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, 1)
        os.dup2(null, 2)
        yield
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in (*saved, null):
            os.close(fd)


@contextlib.contextmanager
def _environ(name: str, value: str) -> Iterator[None]:
    given = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if given is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = given
