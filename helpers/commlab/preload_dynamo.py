"""``torch._dynamo``, for the forkserver to preload (:data:`commlab.processes.PRELOAD`), leaving
nothing behind.

Every ``torch.optim`` optimizer imports ``torch._dynamo`` on first use: 1.4 s in every rank of
every run on an idle 2-core machine, once in the forkserver. Its import also makes torch's
compile cache folder (``$TMPDIR/torchinductor_<user>``) and names it in the environment; a run
that compiles nothing would leave that empty folder in the student's temporary folder, and each
rank would inherit the forkserver's folder instead of finding its own. So the folder goes again
while it is empty (torch makes it again whenever it needs it), and the environment is as it
was: a rank that compiles makes the folder itself, where its own ``TMPDIR`` says.

Its import also fills a cache of rules (a large dict) that ``init_process_group`` empties
again: emptied here once, each rank's ``init_process_group`` finds it empty instead of freeing
it object by object, which copies the pages they sit on into the rank.
"""

from __future__ import annotations

import gc
import os

_NAME = "TORCHINDUCTOR_CACHE_DIR"
_given = os.environ.get(_NAME)

# the collector off while it imports: it would walk the objects the import makes again and again
# as they grow, a third of the import's CPU (already off in a new forkserver:
# commlab.preload_start; commlab.preload_memory, next, freezes what the import made)
_collecting = gc.isenabled()
gc.disable()
try:
    import torch._dynamo  # noqa: E402 - the point of this module
finally:
    if _collecting:
        gc.enable()

torch._dynamo.trace_rules.clear_lru_cache()

# the folder torch made (or found), which it names in the environment
_folder = os.environ.get(_NAME)
if _given is None:
    os.environ.pop(_NAME, None)
    if _folder:
        try:
            os.rmdir(_folder)  # only if empty: a folder holding a cache is left as it is
        except OSError:
            pass
