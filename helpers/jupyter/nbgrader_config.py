"""nbgrader in a student's server of the course's image (installed as the environment's
nbgrader_config.py): the exchange, the course and who the student is, from the environment a
JupyterHub's spawner gives the server (README, "Teaching a class on a JupyterHub").

NBGRADER_EXCHANGE  the exchange's folder inside the container (default /srv/nbgrader/exchange)
COMMLAB_COURSE_ID  nbgrader's course id (default commlab)
JUPYTERHUB_USER    the hub's login name: every submission is filed under it (the container's
                   user is jovyan, uid 1000, for every student)
WORK               the student's work folder: nbgrader fetches into it, and submits from it
"""

import os

from commlab.answers import prepare_notebook

c = get_config()  # noqa: F821 - provided by nbgrader when it loads this file

# Validate runs each test with the answers as the grader defines them (commlab.cells), as in a
# student's `make lab` (helpers/jupyter/student/nbgrader_config.py)
c.Execute.on_notebook_start = prepare_notebook

c.CourseDirectory.course_id = os.environ.get("COMMLAB_COURSE_ID", "commlab")
c.Exchange.root = os.environ.get("NBGRADER_EXCHANGE", "/srv/nbgrader/exchange")
c.Exchange.assignment_dir = os.environ.get("WORK", os.path.expanduser("~/work"))
# The work folder already holds every chapter (the image copies them in): fetching a released
# one adds only what it lacks, as the image's start does, and never overwrites an answer.
c.ExchangeFetchAssignment.replace_missing_files = True
if os.environ.get("JUPYTERHUB_USER"):
    c.CourseDirectory.student_id = os.environ["JUPYTERHUB_USER"]
