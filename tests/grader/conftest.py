"""The tests of grader/: intake/, sandboxed/ and trusted/ in their own folders; here the command
line, the wire between the rank host and the scoring kernel, and whole classes graded.

The modules below are tested through others (tests/test_layout.py reads these lines)."""

# grader/__main__.py: tested through tests/system/test_term.py (python -m grader grade, week after
#   week)
# grader/cli.py: tested through trusted/test_batch.py (--jobs, merge), trusted/test_export.py
#   (export), trusted/test_lti.py and trusted/test_lti_post.py (lti roster, jwk, post),
#   intake/test_lms_names.py and intake/test_exchange.py (collect, release-feedback)
# grader/course.py: tested through tests/course/test_notebooks.py (generate, validate) and
#   tests/chapters/test_solutions.py (every chapter)
# grader/nbgrader_config.py: tested through tests/course/test_notebooks.py (nbgrader generates
#   notebooks/ with it) and trusted/test_gradebook.py
