"""``python -m grader grade|merge|export|lti|collect|release-feedback|generate|validate`` (see
grader/cli.py)."""

import gc
import sys

# The garbage collector off while the command's modules import (nbgrader's, nbconvert's,
# jupyter_client's), then what they made frozen out of its sight: it walked those objects again
# and again as they grew, and again at every full collection of the grading after. (Tests that
# call grader.cli.main in their own process have frozen what their collection imported.)
gc.disable()
from grader.cli import main  # noqa: E402

if sys.argv[1:2] in (["grade"], ["merge"]):
    import grader.trusted.batch  # noqa: E402, F401 - the most of what these two import
gc.freeze()
gc.enable()

sys.exit(main())
