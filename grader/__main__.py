"""``python -m grader grade|merge|export|lti|collect|release-feedback|generate|validate`` (see
grader/cli.py)."""

import sys

from grader.cli import main

sys.exit(main())
