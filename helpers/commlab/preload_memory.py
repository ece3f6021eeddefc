"""The last of what the forkserver preloads (:data:`commlab.processes.PRELOAD`): its memory made
cheap to fork, once everything else is loaded.

Every rank is forked from the forkserver and shares its memory (torch and torch._dynamo: over
200 MB) until it writes to it; then the page written is copied into the rank.

- The garbage collector writes to every object it looks at. The objects the forkserver made
  while importing are frozen here (``gc.freeze``): a rank's collections never look at them. Left
  young, they were collected in every rank, soon after its start, which copied several megabytes
  into each. (A collection first would free a few hundred objects of garbage, and cost the
  forkserver's start a fifth of a second.) The collector, off while they were imported
  (:mod:`commlab.preload_start`), is on again from here.
- Forking copies the page tables of all that memory, and each rank's exit tears its copy down
  again, at the end of a run, while the notebook waits. In 4 KB pages that exit cost each rank
  about 5 ms of a 2-core machine; in 2 MB pages there is a 512th of the entries to copy and tear
  down. Linux (6.1 and newer) moves memory already in use into such pages on request
  (``MADV_COLLAPSE``); where it can't (an older kernel, huge pages turned off, another system),
  the request fails and nothing changes.
"""

from __future__ import annotations

import ctypes
import gc
import sys
from collections.abc import Iterator

_MADV_HUGEPAGE, _MADV_COLLAPSE = 14, 25  # <sys/mman.h>
_HUGE = 2 << 20
# Moving memory into huge pages copies it. A forkserver forked from a notebook's kernel
# (commlab.kernel_forkserver) shares the kernel's memory until one of them writes to it: a
# kernel that held gigabytes before its import cell would have them copied. Past this much,
# the memory stays in small pages.
COLLAPSE_AT_MOST = 1 << 30


def _private_anonymous_memory() -> Iterator[tuple[int, int]]:
    """(start, length) of each anonymous private writable mapping and of the heap, trimmed to
    whole huge pages."""
    with open("/proc/self/maps") as maps:
        lines = maps.readlines()  # all of it first: the requests below change the mappings
    for line in lines:
        fields = line.split()
        if fields[1][1:2] != "w" or fields[1][3:4] != "p" or fields[5:] not in ([], ["[heap]"]):
            continue
        low, high = (int(address, 16) for address in fields[0].split("-"))
        start, end = -(-low // _HUGE) * _HUGE, high // _HUGE * _HUGE
        if end > start:
            yield start, end - start


def move_into_huge_pages() -> None:
    """Ask the kernel to back this process's anonymous memory with huge pages (see above)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        madvise = ctypes.CDLL(None, use_errno=True).madvise
        regions = list(_private_anonymous_memory())
    except (OSError, AttributeError):
        return
    if sum(length for _, length in regions) > COLLAPSE_AT_MOST:
        return
    madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    for start, length in regions:
        if madvise(start, length, _MADV_HUGEPAGE) == 0:
            madvise(start, length, _MADV_COLLAPSE)


gc.freeze()
gc.enable()
move_into_huge_pages()
