"""JupyterLab as a make target of a checkout starts it (`make lab`, `make formgrader`): a real
Jupyter server with its settings and runtime files in a test's folder, found by the token URL it
prints, read over HTTP or driven in a browser, and stopped with every process it started."""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

import psutil

from support.containers import free_port
from support.course_copy import ROOT
from support.sessions import stop_session
from support.waiting import until, until_answering


class MadeLab:
    """``make TARGET VARIABLES...`` run in ``cwd`` (this checkout by default), its log and
    Jupyter's own files in ``folder``."""

    def __init__(self, target: list[str], folder: Path, cwd: Path = ROOT):
        self.target, self.folder, self.cwd = target, folder, cwd
        self.port = free_port()
        self.token = ""
        self.log = folder / f"{target[0]}.log"
        self.process: subprocess.Popen | None = None

    def start(self, timeout: float = 120) -> MadeLab:
        env = {k: v for k, v in os.environ.items()
               if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "JUPYTER_CONFIG_PATH")}
        # Lab's settings, workspaces and runtime files in the test's folder, not the user's
        for name in ("JUPYTER_CONFIG_DIR", "JUPYTER_RUNTIME_DIR", "JUPYTERLAB_SETTINGS_DIR",
                     "JUPYTERLAB_WORKSPACES_DIR"):
            env[name] = str(self.folder / name.lower())
        # as root, make lab adds --allow-root itself (and says so)
        flags = f"--no-browser --ip=127.0.0.1 --port={self.port} --ServerApp.port_retries=0"
        with open(self.log, "w") as log:
            self.process = subprocess.Popen(
                ["make", "--no-print-directory", *self.target, f"LAB_FLAGS={flags}"],
                cwd=self.cwd, env=env, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True)
        pattern = re.compile(rf"http://127\.0\.0\.1:{self.port}/lab\?token=([0-9a-f]+)")
        found = until(lambda: pattern.search(self.log.read_text()), timeout, 0.3,
                      alive=lambda: self.process.poll() is None)
        if found is None:
            self.stop()
            raise AssertionError(f"make {self.target[0]} printed no token URL:\n"
                                 f"{self.log.read_text()[-3000:]}")
        self.token = found.group(1)
        if until_answering(f"{self.base_url}/api/status?token={self.token}", timeout,
                           alive=lambda: self.process.poll() is None) is None:
            self.stop()
            raise AssertionError(f"make {self.target[0]} printed its token URL but its server "
                                 f"never answered:\n{self.log.read_text()[-3000:]}")
        return self

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def get(self, path: str) -> tuple[int, str]:
        """Status and body of GET ``path`` with the token."""
        try:
            with urllib.request.urlopen(f"{self.base_url}{path}?token={self.token}",
                                        timeout=60) as answer:
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
        """Stop make, its shell, Jupyter and the kernels (Lab stops them on SIGTERM; any left
        are killed)."""
        if self.process is None or self.process.poll() is not None:
            return
        started = psutil.Process(self.process.pid).children(recursive=True)
        stop_session(self.process)
        for left in started:
            with contextlib.suppress(psutil.NoSuchProcess):
                left.kill()
