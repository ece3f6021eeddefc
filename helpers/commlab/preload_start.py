"""The first of what a new forkserver preloads (:data:`commlab.processes.PRELOAD`): the garbage
collector off while the rest imports.

Importing torch and ``torch._dynamo`` makes a few hundred thousand objects, and Python's
collector, run every few hundred allocations, walks them again and again as they grow: with it
on, the preloads cost 2.8 CPU-s rather than 2.0 (``make bench-preload``, on a 2-core machine).
:mod:`commlab.preload_memory`, the last of the preloads, freezes what they made and turns the
collector on again, before the forkserver forks its first rank. A forkserver forked from a
notebook's kernel (:mod:`commlab.kernel_forkserver`) does without this module: its first ranks
are forked before the rest is imported.
"""

import gc

gc.disable()
