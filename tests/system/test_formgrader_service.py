"""The instructor's half on Kubernetes, run here: hub/formgrader.yaml's pod beside a real
JupyterHub configured from hub/values.yaml as Zero to JupyterHub configures it.

No cluster runs here. The chart's part is what its jupyterhub_config.py (chart 4.4.0,
files/hub/jupyterhub_config.py) does with the values: hub.config set on the hub, hub.services a
service each (its API token from the chart's Secret), hub.loadRoles a role each. The pod's init
container and container run as processes of this machine, as the manifest's uid, their
environment the manifest's, with the paths the manifest names put in folders of this test and
the hub's and the Service's addresses on ports of 127.0.0.1. The image's environment is this
checkout's .venv. In the image every user may read it; here its Python may lie in root's home,
so the pod's processes see that Python's folder through a mount namespace of their own where
root's home is an empty folder open to all (nothing else of it). The exchange is laid out by
hub/exchange-volume.yaml's Job, a student's inbound folder by the values' init container.

Then, over HTTP as a browser would: an admin adds a teaching assistant to the graders' group
(the Admin page's call); she opens Formgrader without being an admin, releases a chapter, and
collects a student's submission in Formgrader's terminal with the course's make command; a
student is refused Formgrader; the course on its volume (what was collected, the instructor's own
files) stays when the pod starts again.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import pwd
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import requests
import yaml

from support.containers import free_port
from support.course_copy import ROOT, VENV, tracked_copy
from support.hub import HubUser, hub_environment
from support.sessions import stop_session
from support.waiting import until


def _account(uid: int) -> str | None:
    with contextlib.suppress(KeyError):
        return pwd.getpwuid(uid).pw_name
    return None


pytestmark = [
    pytest.mark.hub,
    pytest.mark.skipif(os.geteuid() != 0,
                       reason="lays out the exchange as the course's account (root)"),
    # the instructor image built for the pod has its user (jovyan, uid 2000); nbgrader asks
    # for its name
    pytest.mark.skipif(_account(2000) is None,
                       reason="no account of uid 2000 here (tools/install_test_tools.sh)")]

VALUES = yaml.safe_load((ROOT / "hub" / "values.yaml").read_text())
MANIFEST = {d["kind"]: d for d in yaml.safe_load_all((ROOT / "hub" / "formgrader.yaml")
                                                     .read_text())}
EXCHANGE_VOLUME = {d["kind"]: d for d in yaml.safe_load_all(
    (ROOT / "hub" / "exchange-volume.yaml").read_text())}
SERVICE = "formgrader-commlab"
GROUP = "formgrade-commlab"
CHAPTER = "01_broadcast"
PASSWORD = "class-password-2026"
ADMIN_PASSWORD = "the-instructors-own-password-of-32-characters-at-least"
POD = MANIFEST["Deployment"]["spec"]["template"]["spec"]
COURSE_UID = POD["securityContext"]["runAsUser"]
STUDENT_UID = VALUES["singleuser"]["uid"]


def _as(uid: int):
    """A preexec_fn that becomes ``uid`` (its group the same number)."""
    def become():
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
    return become


def _as_the_pod(stage: Path) -> list[str]:
    """The command prefix that runs as the pod's uid, with this environment's Python visible to
    it (above): its installation bound, through ``stage``, into an empty folder open to all in
    place of the first folder above it that others may not pass."""
    become = ["setpriv", f"--reuid={COURSE_UID}", f"--regid={COURSE_UID}", "--clear-groups", "--"]
    python = Path(sys.base_prefix)
    closed = [p for p in python.parents if p != Path("/") and not p.stat().st_mode & 0o001]
    if not closed:
        return become
    stage.mkdir()
    script = ('set -e; mount --bind "$1" "$3"; mount -t tmpfs -o mode=0755 tmpfs "$2"; '
              'mkdir -p "$1"; mount --bind "$3" "$1"; shift 3; exec "$@"')
    return ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", script, "-",
            str(python), str(closed[-1]), str(stage), *become]


class Pod:
    """hub/formgrader.yaml's pod, its paths under ``folder`` and its ports here."""

    def __init__(self, folder: Path, hub_api: str, token: str):
        self.folder = folder
        self.port = free_port()
        self.token = token
        self.image_course = tracked_copy(self._made(folder / "image-course", owner=None))
        self.paths = {"/srv/grading": self._made(folder / "grading"),
                      "/srv/nbgrader/exchange": self._made(folder / "exchange"),
                      "/home/jovyan/course": self.image_course}
        self.addresses = {"http://hub:8081": hub_api,
                          "http://0.0.0.0:8888": f"http://127.0.0.1:{self.port}",
                          "--ServerApp.ip=0.0.0.0": "--ServerApp.ip=127.0.0.1",
                          "--ServerApp.port=8888": f"--ServerApp.port={self.port}"}
        self.process: subprocess.Popen | None = None
        self.log = folder / "formgrader.log"
        self.as_the_pod = _as_the_pod(folder / "python-stage")

    @staticmethod
    def _made(path: Path, owner: int | None = COURSE_UID) -> Path:
        path.mkdir(mode=0o755)
        if owner is not None:
            os.chown(path, owner, owner)
        return path

    def here(self, word: str) -> str:
        for inside, outside in (*self.paths.items(), *self.addresses.items()):
            word = word.replace(inside, str(outside))
        return word

    def env(self, container: dict) -> dict[str, str]:
        """The container's environment as Kubernetes gives it (the Secret's key read), over the
        image's own (its environment first on PATH, VENV)."""
        env = {"PATH": f"{VENV / 'bin'}:/usr/bin:/bin", "VENV": str(VENV), "LANG": "C.UTF-8",
               "SHELL": "/bin/bash"}
        for item in container["env"]:
            if "valueFrom" in item:
                secret = item["valueFrom"]["secretKeyRef"]
                # the chart's Secret and its key for a service's token (templates/hub/secret.yaml)
                assert (secret["name"], secret["key"]) == \
                    ("hub", f"hub.services.{SERVICE}.apiToken")
                env[item["name"]] = self.token
            else:
                env[item["name"]] = self.here(item["value"])
        return env

    def run_init(self) -> None:
        for init in POD["initContainers"]:
            done = subprocess.run([*self.as_the_pod, *map(self.here, init["command"])],
                                  capture_output=True, text=True, timeout=300,
                                  env=self.env({"env": []}))
            assert done.returncode == 0, f"{init['name']}: {done.stderr}"

    def start(self) -> None:
        container = POD["containers"][0]
        with open(self.log, "a") as log:
            self.process = subprocess.Popen(
                [*self.as_the_pod, *map(self.here, container["command"])], env=self.env(container),
                cwd=self.here(container["workingDir"]), stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True)
        prefix = next(i["value"] for i in container["env"]
                      if i["name"] == "JUPYTERHUB_SERVICE_PREFIX")

        def answers():
            with contextlib.suppress(requests.RequestException):
                return requests.get(f"http://127.0.0.1:{self.port}{prefix}api", timeout=5).ok \
                    or None
        assert until(answers, 90, 0.5, lambda: self.process.poll() is None), \
            f"Formgrader's pod did not start:\n{self.log.read_text()[-4000:]}"

    def stop(self) -> None:
        stop_session(self.process)


def _hub_config(folder: Path, port: int, api_port: int, token: str,
                service_url: str) -> Path:
    """The hub's configuration: this test's (login, ports, data) and the values' parts as the
    chart's jupyterhub_config.py sets them."""
    values = VALUES["hub"]
    services = []
    for key, service in values["services"].items():
        service = {**service, "name": service.get("name", key), "api_token": token}
        service.pop("apiToken", None)
        service["url"] = service_url
        services.append(service)
    roles = [{**role, "name": role.get("name", key)} for key, role in values["loadRoles"].items()]
    config = folder / "jupyterhub_config.py"
    config.write_text(f"""
import json
c = get_config()
c.JupyterHub.bind_url = "http://127.0.0.1:{port}"
c.JupyterHub.hub_ip = "127.0.0.1"
c.JupyterHub.hub_port = {api_port}
c.ConfigurableHTTPProxy.api_url = "http://127.0.0.1:{free_port()}"
c.ConfigurableHTTPProxy.command = [{str(folder.parent / 'chp')!r}]
c.ConfigurableHTTPProxy.pid_file = {str(folder / 'proxy.pid')!r}
c.JupyterHub.db_url = "sqlite:///{folder / 'jupyterhub.sqlite'}"
c.JupyterHub.cookie_secret_file = {str(folder / 'cookie_secret')!r}
c.JupyterHub.authenticator_class = "shared-password"
c.SharedPasswordAuthenticator.user_password = {PASSWORD!r}
c.SharedPasswordAuthenticator.admin_password = {ADMIN_PASSWORD!r}
c.Authenticator.admin_users = {{"head"}}
c.Authenticator.allowed_users = {{"head", "ta", "alice"}}
# no one's own server here: a login lands on the hub's home page
c.JupyterHub.redirect_to_server = False
# the values, as the chart sets them
for section, traits in json.loads({json.dumps(json.dumps(values["config"]))}).items():
    for name, value in traits.items():
        setattr(getattr(c, section), name, value)
c.JupyterHub.services = json.loads({json.dumps(json.dumps(services))})
c.JupyterHub.load_roles = json.loads({json.dumps(json.dumps(roles))})
""")
    return config


@pytest.fixture(scope="module")
def graded():
    """The pod and the hub started, and what the people at the hub did."""
    venv = hub_environment()
    # in /tmp itself: pytest's own folders are root's alone, and the course's account and the
    # student must reach the exchange
    folder = Path(tempfile.mkdtemp(prefix="formgrader-service-"))
    folder.chmod(0o755)
    (folder / "chp").symlink_to(venv / "proxy" / "node_modules" / ".bin" /
                                "configurable-http-proxy")
    hub_folder = folder / "hub"
    hub_folder.mkdir()
    port, api_port, token = free_port(), free_port(), os.urandom(16).hex()
    (folder / "pod").mkdir(mode=0o755)
    pod = Pod(folder / "pod", f"http://127.0.0.1:{api_port}", token)
    # the values' service URL is the manifest's Service, at this test's port
    assert VALUES["hub"]["services"][SERVICE]["url"] == \
        f"http://{MANIFEST['Service']['metadata']['name']}:{MANIFEST['Service']['spec']['ports'][0]['port']}"
    config = _hub_config(hub_folder, port, api_port, token, f"http://127.0.0.1:{pod.port}")
    hub_log = hub_folder / "hub.log"
    with open(hub_log, "w") as log:
        hub = subprocess.Popen([str(venv / "bin" / "jupyterhub"), "-f", str(config)],
                               cwd=hub_folder, stdout=log, stderr=subprocess.STDOUT,
                               start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    result = {"pod": pod, "url": url}
    try:
        def login_page():
            with contextlib.suppress(requests.RequestException):
                page = requests.get(f"{url}/hub/login", timeout=5)
                return page if page.status_code == 200 else None
        assert until(login_page, 120, 0.5, lambda: hub.poll() is None), \
            f"the hub did not start:\n{hub_log.read_text()[-4000:]}"
        _lay_out_the_exchange(pod)
        pod.run_init()
        pod.start()
        _people_at_the_hub(pod, url, result)
        yield result
    except Exception as error:
        raise AssertionError(f"{error}\nthe hub's log:\n{hub_log.read_text()[-3000:]}\n"
                             f"Formgrader's:\n{_tail(pod.log)}") from error
    finally:
        pod.stop()
        stop_session(hub)
        shutil.rmtree(folder)


def _tail(log: Path) -> str:
    return log.read_text()[-3000:] if log.exists() else "(none)"


def _lay_out_the_exchange(pod: Pod) -> None:
    """hub/exchange-volume.yaml's Job, then the values' init containers for alice's server."""
    job = EXCHANGE_VOLUME["Job"]["spec"]["template"]["spec"]
    commands = [job["containers"][0]["command"],
                *[[w.replace("{unescaped_username}", "alice") for w in init["command"]]
                  for init in VALUES["singleuser"]["initContainers"]]]
    for command in commands:
        here = [w.replace("/exchange", str(pod.paths["/srv/nbgrader/exchange"])) for w in command]
        done = subprocess.run(here, preexec_fn=_as(COURSE_UID), capture_output=True,
                              text=True, timeout=60)
        assert done.returncode == 0, done.stderr


def _people_at_the_hub(pod: Pod, url: str, result: dict) -> None:
    head = HubUser(url, "head", ADMIN_PASSWORD).log_in()
    added = head.call("POST", f"{url}/hub", f"/api/groups/{GROUP}/users",
                      json={"users": ["ta"]})
    assert added.ok, (added.status_code, added.text[:500])
    ta = HubUser(url, "ta", PASSWORD).log_in()
    result["ta"] = ta.json("GET", f"{url}/hub", "/api/user")
    result["ta page"] = ta.open_service(SERVICE)
    formgrader = f"{url}/services/{SERVICE}"
    result["released"] = ta.json("POST", formgrader,
                                 f"/formgrader/api/assignment/{CHAPTER}/release")
    alice = HubUser(url, "alice", PASSWORD).log_in()
    result["alice page"] = alice.session.get(f"{formgrader}/formgrader", timeout=60)
    # alice's server hands in, as nbgrader submit files it, into her own inbound folder
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M:%S.%f UTC")
    mine = pod.paths["/srv/nbgrader/exchange"] / "commlab" / "inbound" / "alice"
    entry = mine / f"alice+{CHAPTER}+{stamp}+r1"
    notebook = pod.image_course / "notebooks" / CHAPTER / f"{CHAPTER}.ipynb"
    done = subprocess.run(["sh", "-c", 'mkdir "$1" && cp "$2" "$1/" && echo "$3" > "$1/'
                           'timestamp.txt"', "-", str(entry), str(notebook), stamp],
                          preexec_fn=_as(STUDENT_UID), capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    result["entry"] = entry.name
    result["collect"] = ta.run_in_terminal(formgrader, "make collect", timeout=300)
    # the pod again, as after a restart: its course stays the volume's
    course = pod.paths["/srv/grading"] / "course"
    (course / "kept-by-the-volume").write_text("")
    pod.stop()
    pod.run_init()
    pod.start()
    result["after restart"] = ta.json("GET", formgrader, "/formgrader/api/assignments")


def test_a_grader_who_is_no_admin_opens_formgrader_and_a_student_is_refused(graded):
    assert graded["ta"]["admin"] is False and "formgrade-commlab" in graded["ta"]["groups"]
    page = graded["ta page"]
    assert page.status_code == 200 and "/formgrader" in page.url, (page.status_code, page.url)
    denied = graded["alice page"]
    assert denied.status_code == 403, (denied.status_code, denied.url)


def test_formgrader_releases_into_the_exchange_as_the_course_account(graded):
    assert graded["released"]["success"], graded["released"]["error"][-3000:]
    pod = graded["pod"]
    released = pod.paths["/srv/nbgrader/exchange"] / "commlab" / "outbound" / CHAPTER
    assert (released / f"{CHAPTER}.ipynb").is_file()
    assert released.stat().st_uid == COURSE_UID


def test_make_collect_in_formgraders_terminal_copies_onto_the_courses_volume(graded):
    code, shown = graded["collect"]
    assert code == 0, shown[-3000:]
    course = graded["pod"].paths["/srv/grading"] / "course"
    collected = course / "collected" / "alice" / graded["entry"] / f"{CHAPTER}.ipynb"
    assert collected.is_file(), sorted(p.name for p in (course / "collected").rglob("*"))
    received = json.loads((course / "collected" / "received.json").read_text())
    assert list(received) == [f"alice/{graded['entry']}"]


def test_the_course_on_its_volume_stays_when_the_pod_starts_again(graded):
    course = graded["pod"].paths["/srv/grading"] / "course"
    assert (course / "kept-by-the-volume").exists()  # not copied over from the image again
    assert (course / "collected" / "received.json").is_file()
    listed = {a["name"]: a for a in graded["after restart"]}
    assert listed[CHAPTER]["status"] == "released", listed.get(CHAPTER)


def test_the_pods_paths_and_addresses_are_all_mapped_here(graded):
    """Nothing the pod was given still names a place of the cluster (the map above is whole)."""
    pod = graded["pod"]
    container = POD["containers"][0]
    given = [*map(pod.here, container["command"]), *pod.env(container).values()]
    assert not [w for w in given if re.search(r"/srv/|/home/jovyan|://hub:|0\.0\.0\.0", w)]
