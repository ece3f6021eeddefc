"""The tests of the course as a whole: its notebooks and their order, the student's commands and
workspace, the student edition, the set-up and the environments; and of the tools under
helpers/ that are not the commlab package.

The modules below are tested here or elsewhere (tests/test_layout.py reads these lines)."""

# helpers/scripts/check_notebook.py: tested through test_make_check.py (make check)
# helpers/scripts/student_edition.py: tested through test_student_edition.py (make
#   student-edition)
# helpers/scripts/workspace.py: tested through test_workspace.py (make lab's work/ folder)
# helpers/jupyter/nbgrader_config.py: tested through tests/system/test_browser.py (the student's
#   Validate button) and tests/system/test_image.py
# helpers/jupyter/student/nbgrader_config.py: tested through test_student_lab.py (a student's
#   make lab: Validate, no instructor's panel) and test_one_verdict.py (nbgrader validate with it)
# helpers/site/build.py: tested through tests/system/test_site.py (make site)
# helpers/site/conf.py: tested through tests/system/test_site.py (make site)
# helpers/site/pictures.py: tested through tests/system/test_site.py (every picture's alt text)
