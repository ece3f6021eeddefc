"""nbgrader in a student's Lab (`make lab` puts this folder first on JUPYTER_CONFIG_PATH):
Validate runs each test with the answers defined as the grader defines them, from the answer
cells and the definitions of the cells above the test (commlab.cells), so that it passes a test
exactly when the grade does."""

from commlab.answers import prepare_notebook

c = get_config()  # noqa: F821 - provided by nbgrader when it loads this file

c.Execute.on_notebook_start = prepare_notebook
