"""nbgrader's configuration for the course: solutions/ is the source, notebooks/ the release."""

import os

c = get_config()  # noqa: F821 - provided by nbgrader when it loads this file

COURSE_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

c.CourseDirectory.root = COURSE_ROOT
c.CourseDirectory.source_directory = "solutions"
c.CourseDirectory.release_directory = "notebooks"
# The gradebook lives with the grader's files, out of the course's top level.
c.CourseDirectory.db_url = "sqlite:///" + os.path.join(COURSE_ROOT, "grader", "gradebook.db")

# nbgrader's exchange, where Formgrader releases chapters (docs/hub.md, "Teaching a class on a
# JupyterHub"): the hub sets both for its Formgrader service.
if os.environ.get("COMMLAB_COURSE_ID"):
    c.CourseDirectory.course_id = os.environ["COMMLAB_COURSE_ID"]
c.Exchange.root = os.environ.get("NBGRADER_EXCHANGE", "/srv/nbgrader/exchange")

# What a student finds where an answer was.
c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}
c.ClearSolutions.text_stub = "YOUR ANSWER HERE"

# Every commlab run in a test cell stops within commlab.checks.GRADING_TIMEOUT (8 s), so a cell
# that hangs is cut by commlab first; this is the backstop.
c.Execute.timeout = 30
