"""A student's `make lab` is a student's: nbgrader's Validate button and none of the instructor's
panels (Formgrader, Create assignment, Course list, and the Assignments panel, which needs an
exchange), as in the Docker image; `make formgrader`, on the same .venv, keeps them all.

Both Labs are started with the real make targets of this checkout (a real Jupyter server, no
browser) and read through their HTTP API: the page config JupyterLab hands the browser (which
plugins are off), and the routes of nbgrader's server extensions.
"""

from __future__ import annotations

import pytest

from support.labs import MadeLab

INSTRUCTOR_PANELS = {"@jupyter/nbgrader:formgrader", "@jupyter/nbgrader:create-assignment",
                     "@jupyter/nbgrader:course-list"}
ASSIGNMENTS_PANEL = "@jupyter/nbgrader:assignment-list"
# nbgrader's server extensions, by one route of each
INSTRUCTOR_ROUTES = {"formgrader": "/formgrader/api/status", "course_list": "/formgraders",
                     "assignment_list": "/assignments"}
VALIDATE_ROUTE = "/assignments/validate"  # the Validate button's (POST only)


@pytest.fixture(scope="module", params=["lab", "formgrader"])
def made_lab(request, tmp_path_factory):
    folder = tmp_path_factory.mktemp(request.param)
    lab = MadeLab([request.param, f"WORK={folder / 'work'}"], folder).start()
    yield lab
    lab.stop()


def test_make_lab_turns_off_the_instructor_panels_and_keeps_validate(made_lab):
    config = made_lab.page_config()
    disabled, locked = set(config["disabledExtensions"]), set(config.get("lockedExtensions", []))
    nbgrader = {p for p in disabled | locked if p.startswith("@jupyter/nbgrader:")}
    if made_lab.target[0] == "formgrader":
        assert nbgrader == set(), config["disabledExtensions"]
        return
    assert nbgrader == INSTRUCTOR_PANELS | {ASSIGNMENTS_PANEL}
    assert disabled >= INSTRUCTOR_PANELS | {ASSIGNMENTS_PANEL}
    # the plugin manager cannot turn the instructor's back on; Assignments an exchange can
    assert locked >= INSTRUCTOR_PANELS and ASSIGNMENTS_PANEL not in locked
    assert "@jupyter/nbgrader:validate-assignment" not in disabled


def test_make_lab_runs_no_instructor_server_extension_and_keeps_validate(made_lab):
    answers = {name: made_lab.get(route)[0] for name, route in INSTRUCTOR_ROUTES.items()}
    if made_lab.target[0] == "formgrader":
        assert 404 not in answers.values(), answers
    else:
        assert answers == dict.fromkeys(INSTRUCTOR_ROUTES, 404)
    # the Validate button's handler answers in both (405: it takes POST only)
    assert made_lab.get(VALIDATE_ROUTE)[0] == 405
