"""A person at a JupyterHub, over HTTP as a browser would: the hub's login form, the OAuth
redirects to her server (or to a hub service such as the course's Formgrader), the calls
JupyterLab's panels make (contents, nbgrader's Assignments panel, Formgrader's buttons, all
with the `_xsrf` cookie as the header Lab sends), and a terminal over its websocket, as Lab's
terminal uses it; and the hub's own environment, made once for the tests that run a hub
(tests/system/test_hub.py, tests/system/test_formgrader_service.py)."""

from __future__ import annotations

import asyncio
import fcntl
import json
import re
import shutil
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

import pytest
import requests

from support.course_copy import ROOT
from support.waiting import until

HUB_VENV = ROOT / "build" / "hub-venv"


def hub_environment() -> Path:
    """build/hub-venv (JupyterHub, DockerSpawner, the proxy), made by `make hub-setup` where it
    is missing or stale, under a lock: the tests that run a hub may start at once (pytest -n),
    and two installs into one folder would break each other. Skips where Node.js is missing."""
    if shutil.which("npm") is None and not (HUB_VENV / ".installed").exists():
        pytest.skip("make hub-setup needs Node.js with npm for the hub's proxy "
                    "(Debian, as root: tools/install_test_tools.sh)")
    HUB_VENV.parent.mkdir(parents=True, exist_ok=True)
    with open(HUB_VENV.parent / ".hub-venv.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        done = subprocess.run(["make", "--no-print-directory", "hub-setup",
                               f"HUB_VENV={HUB_VENV}"], cwd=ROOT, capture_output=True,
                              text=True, timeout=900)
    assert done.returncode == 0, f"make hub-setup:\n{done.stdout[-3000:]}{done.stderr[-3000:]}"
    return HUB_VENV


@dataclass
class HubUser:
    hub: str  # http://127.0.0.1:PORT
    name: str
    password: str
    session: requests.Session = field(default_factory=requests.Session)

    def __post_init__(self) -> None:
        self.session.trust_env = False  # the hub is on the loopback: never through a proxy

    def log_in(self) -> HubUser:
        """The login form, as posted by the browser."""
        page = self.session.get(f"{self.hub}/hub/login", timeout=30)
        page.raise_for_status()
        done = self.session.post(f"{self.hub}/hub/login?next=", timeout=60, data={
            "username": self.name, "password": self.password,
            "_xsrf": self.session.cookies.get("_xsrf", path="/hub/")})
        if done.status_code != 200 or "/hub/login" in done.url:
            raise AssertionError(f"{self.name} could not log in: {done.status_code} {done.url}")
        return self

    def wait_for_server(self, timeout: float = 240) -> float:
        """Seconds until ``/user/<name>/lab`` answers from her own server (the hub's page that
        waits for a spawn follows it, as the browser does), after the OAuth redirects."""
        began = time.monotonic()
        self.session.get(f"{self.hub}/hub/spawn/{self.name}", timeout=60)
        answers = []

        def lab_page():
            answers.append(self.session.get(f"{self.lab_url}/lab", timeout=60))
            answer = answers[-1]
            return answer if answer.status_code == 200 and urlparse(answer.url).path.startswith(
                f"/user/{self.name}/lab") and "jupyter-config-data" in answer.text else None

        self.lab_page = until(lab_page, timeout - (time.monotonic() - began), 1)
        if self.lab_page is None:
            last = f"{answers[-1].status_code} {answers[-1].url}" if answers else "no answer"
            raise AssertionError(f"{self.name}'s server did not answer within {timeout:.0f} s: "
                                 f"{last}")
        return time.monotonic() - began

    @property
    def lab_url(self) -> str:
        return f"{self.hub}/user/{self.name}"

    def open_service(self, name: str) -> requests.Response:
        """A hub service's page in its own tab (the OAuth redirects followed)."""
        return self.session.get(f"{self.hub}/services/{name}/", timeout=60)

    def _xsrf(self, prefix: str) -> str:
        path = urlparse(prefix).path.rstrip("/") + "/"
        for cookie in self.session.cookies:
            if cookie.name == "_xsrf" and path.startswith(cookie.path.rstrip("/") + "/"):
                return cookie.value
        raise AssertionError(f"no _xsrf cookie for {path}: open a page there first")

    def call(self, method: str, prefix: str, path: str, **kwargs) -> requests.Response:
        """A call of a Jupyter server's API under ``prefix`` (her server, or a service), as
        Lab makes it."""
        headers = {"X-XSRFToken": self._xsrf(prefix), **kwargs.pop("headers", {})}
        answer = self.session.request(method, f"{prefix}{path}", headers=headers, timeout=300,
                                      **kwargs)
        return answer

    def json(self, method: str, prefix: str, path: str, **kwargs):
        answer = self.call(method, prefix, path, **kwargs)
        if answer.status_code >= 400:
            raise AssertionError(f"{self.name}: {method} {path}: {answer.status_code} "
                                 f"{answer.text[:500]}")
        return answer.json()

    def run_in_terminal(self, prefix: str, command: str, timeout: float = 900) -> tuple[int, str]:
        """Type ``command`` into a new terminal of the server at ``prefix`` (Lab's terminal:
        the terminals API and its websocket); its exit status and what the terminal showed."""
        name = self.json("POST", prefix, "/api/terminals")["name"]
        try:
            return asyncio.run(self._terminal(prefix, name, command, timeout))
        finally:
            self.call("DELETE", prefix, f"/api/terminals/{name}")

    async def _terminal(self, prefix: str, name: str, command: str,
                        timeout: float) -> tuple[int, str]:
        from tornado.httpclient import HTTPRequest
        from tornado.websocket import websocket_connect

        url = urlparse(prefix)
        cookies = "; ".join(f"{c.name}={c.value}" for c in self.session.cookies
                            if url.path.startswith(c.path.rstrip("/")))
        request = HTTPRequest(f"ws://{url.netloc}{url.path}/terminals/websocket/{name}",
                              headers={"Cookie": cookies, "Origin": f"http://{url.netloc}"})
        socket = await websocket_connect(request)
        marker = f"done-{uuid.uuid4().hex[:8]}"
        # the status after a marker that the echoed command line does not hold
        socket.write_message(json.dumps(["stdin", f"{command}; echo {marker}=$?\r"]))
        shown = ""
        deadline = time.monotonic() + timeout
        try:
            while time.monotonic() < deadline:
                message = await asyncio.wait_for(socket.read_message(),
                                                 deadline - time.monotonic())
                if message is None:
                    break
                kind, *data = json.loads(message)
                if kind == "stdout":
                    shown += data[0]
                    found = re.search(rf"{marker}=(\d+)", shown)
                    if found:
                        return int(found[1]), shown
        except TimeoutError:
            pass
        finally:
            socket.close()
        raise AssertionError(f"{command!r} did not finish within {timeout:.0f} s in "
                             f"{self.name}'s terminal:\n{shown[-3000:]}")
