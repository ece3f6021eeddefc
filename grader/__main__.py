"""``python -m grader grade|generate|validate|merge`` (see grader/cli.py)."""

import sys

from grader.cli import main

sys.exit(main())
