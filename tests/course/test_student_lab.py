"""A student's `make lab` is a student's: nbgrader's Validate button and none of the instructor's
panels (Formgrader, Create assignment, Course list, and the Assignments panel, which needs an
exchange), as in the Docker image; `make formgrader`, on the same .venv, keeps them all.

Both Labs are started with the real make targets of this checkout (a real Jupyter server, no
browser) and read through their HTTP API: the page config JupyterLab hands the browser (which
plugins are off), and the routes of nbgrader's server extensions.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from support.containers import free_port
from support.course_copy import ROOT

INSTRUCTOR_PANELS = {"@jupyter/nbgrader:formgrader", "@jupyter/nbgrader:create-assignment",
                     "@jupyter/nbgrader:course-list"}
ASSIGNMENTS_PANEL = "@jupyter/nbgrader:assignment-list"
# nbgrader's server extensions, by one route of each
INSTRUCTOR_ROUTES = {"formgrader": "/formgrader/api/status", "course_list": "/formgraders",
                     "assignment_list": "/assignments"}
VALIDATE_ROUTE = "/assignments/validate"  # the Validate button's (POST only)


class MadeLab:
    """JupyterLab as ``make TARGET`` of this checkout starts it, its log in ``folder``."""

    def __init__(self, target: str, folder: Path):
        self.target = target
        self.folder = folder
        self.port = free_port()
        self.token = ""
        self.process: subprocess.Popen | None = None
        self.log = folder / f"{target}.log"

    def start(self, timeout: float = 120) -> MadeLab:
        env = {k: v for k, v in os.environ.items()
               if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "JUPYTER_CONFIG_PATH")}
        # Lab's own settings and runtime files in the test's folder, not the user's
        for name in ("JUPYTER_CONFIG_DIR", "JUPYTER_RUNTIME_DIR", "JUPYTERLAB_SETTINGS_DIR",
                     "JUPYTERLAB_WORKSPACES_DIR"):
            env[name] = str(self.folder / name.lower())
        flags = f"--no-browser --ip=127.0.0.1 --port={self.port} --ServerApp.port_retries=0"
        with open(self.log, "w") as log:
            self.process = subprocess.Popen(
                ["make", "--no-print-directory", self.target, f"WORK={self.folder / 'work'}",
                 f"LAB_FLAGS={flags}"], cwd=ROOT, env=env, stdout=log,
                stderr=subprocess.STDOUT, start_new_session=True)
        pattern = re.compile(rf"http://127\.0\.0\.1:{self.port}/lab\?token=([0-9a-f]+)")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.process.poll() is None:
            found = pattern.search(self.log.read_text())
            if found:
                self.token = found.group(1)
                return self
            time.sleep(0.3)
        self.stop()
        raise AssertionError(f"make {self.target} printed no token URL:\n"
                             f"{self.log.read_text()[-3000:]}")

    def get(self, path: str) -> tuple[int, str]:
        """Status and body of GET ``path`` with the token."""
        url = f"http://127.0.0.1:{self.port}{path}?token={self.token}"
        try:
            with urllib.request.urlopen(url, timeout=60) as answer:
                return answer.status, answer.read().decode()
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode(errors="replace")

    def page_config(self) -> dict:
        """What JupyterLab's page hands the browser: which plugins are off, which locked."""
        status, html = self.get("/lab")
        assert status == 200, html[-2000:]
        found = re.search(r'<script id="jupyter-config-data" type="application/json">(.*?)'
                          r"</script>", html, re.S)
        assert found, html[:2000]
        return json.loads(found.group(1))

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        os.killpg(self.process.pid, signal.SIGTERM)  # make, its shell and Jupyter
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()


@pytest.fixture(scope="module", params=["lab", "formgrader"])
def made_lab(request, tmp_path_factory):
    lab = MadeLab(request.param, tmp_path_factory.mktemp(request.param)).start()
    yield lab
    lab.stop()


def test_make_lab_turns_off_the_instructor_panels_and_keeps_validate(made_lab):
    config = made_lab.page_config()
    disabled, locked = set(config["disabledExtensions"]), set(config.get("lockedExtensions", []))
    nbgrader = {p for p in disabled | locked if p.startswith("@jupyter/nbgrader:")}
    if made_lab.target == "formgrader":
        assert nbgrader == set(), config["disabledExtensions"]
        return
    assert nbgrader == INSTRUCTOR_PANELS | {ASSIGNMENTS_PANEL}
    assert disabled >= INSTRUCTOR_PANELS | {ASSIGNMENTS_PANEL}
    # the plugin manager cannot turn the instructor's back on; Assignments an exchange can
    assert locked >= INSTRUCTOR_PANELS and ASSIGNMENTS_PANEL not in locked
    assert "@jupyter/nbgrader:validate-assignment" not in disabled


def test_make_lab_runs_no_instructor_server_extension_and_keeps_validate(made_lab):
    answers = {name: made_lab.get(route)[0] for name, route in INSTRUCTOR_ROUTES.items()}
    if made_lab.target == "formgrader":
        assert 404 not in answers.values(), answers
    else:
        assert answers == dict.fromkeys(INSTRUCTOR_ROUTES, 404)
    # the Validate button's handler answers in both (405: it takes POST only)
    assert made_lab.get(VALIDATE_ROUTE)[0] == 405
