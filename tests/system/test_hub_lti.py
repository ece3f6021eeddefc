"""The class's hub behind the LMS: a real JupyterHub started with hub/jupyterhub_config.py and
HUB_LTI_*, registered as the tool of a real LTI 1.3 platform (lti1p3platform over HTTP,
tests/support/lti_platform.py), and launches driven over HTTP as a browser follows them (the
platform's OIDC login initiation, the hub's redirect to the platform's authorization endpoint
with its state and nonce, the signed launch posted back). A student's launch opens her chapter
in work/ under her LMS id; an instructor is an admin, a teaching assistant a grader; a launch
with a bad signature, a replayed one (its nonce reused) and one naming no chapter of the course
get a page that says which check failed. No student server is started (no image needed): the
hub's REST API says who logged in."""

from __future__ import annotations

import contextlib
import html
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
import requests

from support.containers import free_port
from support.course_copy import ROOT
from support.hub import hub_environment
from support.lti_platform import CLIENT_ID, INSTRUCTOR, TA, LtiPlatform, member, new_key
from support.sessions import stop_session
from support.waiting import until

ANN, TIA, TOM = "a1f0c3", "t0ad9e", "t1bb07"  # LTI user ids (sub)
CHAPTER = "01_broadcast"
GRADERS = "formgrade-commlab"


def _hub_env(folder: Path, port: int, platform: LtiPlatform, token: str) -> dict[str, str]:
    reader = folder / "reader.py"
    reader.write_text(f"""
c.JupyterHub.services.append({{"name": "reader", "api_token": {token!r}}})
c.JupyterHub.load_roles.append({{"name": "reader", "services": ["reader"],
                                "scopes": ["read:users", "read:groups"]}})
""")
    clean = {k: v for k, v in os.environ.items() if not k.startswith("HUB_")}
    return {**clean, **platform.hub_settings(), "HUB_URL": f"http://127.0.0.1:{port}",
            "HUB_API_IP": "127.0.0.1", "HUB_CONNECT_IP": "127.0.0.1",
            "HUB_API_PORT": str(free_port()), "HUB_PROXY_API_PORT": str(free_port()),
            "HUB_FORMGRADER_PORT": str(free_port()), "HUB_CULL_AFTER": "0",
            "HUB_COURSE": str(ROOT), "HUB_EXCHANGE": str(folder / "exchange"),
            "HUB_DATA": str(folder / "data"), "HUB_CONFIG": str(reader)}


@pytest.fixture(scope="module")
def hub():
    """The platform and the hub, started; yields (platform, hub URL, API token)."""
    venv = hub_environment()
    folder = Path(tempfile.mkdtemp(prefix="hub-lti-"))
    members = [member(ANN, "Ann Lee"), member(TIA, "Tia Teach", INSTRUCTOR),
               member(TOM, "Tom Assist", TA)]
    port, token = free_port(), os.urandom(16).hex()
    url = f"http://127.0.0.1:{port}"
    log_path = folder / "hub.log"
    with LtiPlatform(members) as platform:
        platform.register_tool(url)
        with open(log_path, "w") as log:
            process = subprocess.Popen(
                [str(venv / "bin" / "jupyterhub"), "-f",
                 str(ROOT / "hub" / "jupyterhub_config.py")],
                cwd=folder, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                env=_hub_env(folder, port, platform, token))
        try:
            def up():
                with contextlib.suppress(requests.RequestException):
                    return requests.get(f"{url}/hub/api/", timeout=5).status_code == 200 or None
            assert until(up, 120, 0.5, lambda: process.poll() is None), \
                f"the hub did not start:\n{log_path.read_text()[-4000:]}"
            yield platform, url, token, log_path
        finally:
            stop_session(process)
            shutil.rmtree(folder, ignore_errors=True)


def _form(page: str) -> tuple[str, dict[str, str]]:
    action = html.unescape(re.search(r'action="([^"]+)"', page)[1])
    fields = {name: html.unescape(value)
              for name, value in re.findall(r'name="(\w+)" value="([^"]*)"', page)}
    return action, fields


def _to_the_form(browser: requests.Session, platform: LtiPlatform, user: str,
                 chapter: str = "", link: str = "") -> tuple[str, dict[str, str]]:
    """A launch from the LMS up to the signed form the platform hands the browser: the
    platform's login initiation, the hub's redirect to the platform with its state and
    nonce."""
    answer = browser.get(f"{platform.base}/launch", allow_redirects=False, timeout=30,
                         params={"user": user, "chapter": chapter, "link": link})
    for _ in range(3):
        if answer.status_code not in (301, 302, 303):
            break
        answer = browser.get(answer.headers["Location"], allow_redirects=False, timeout=30)
    assert answer.status_code == 200, (answer.status_code, answer.text[:500])
    return _form(answer.text)


def _launch(platform: LtiPlatform, user: str, chapter: str = "",
            link: str = "") -> requests.Response:
    browser = _browser()
    action, fields = _to_the_form(browser, platform, user, chapter, link)
    return browser.post(action, data=fields, allow_redirects=False, timeout=60)


def _browser() -> requests.Session:
    """A browser's cookies and requests, never through a proxy (all is on the loopback)."""
    browser = requests.Session()
    browser.trust_env = False
    return browser


def _user(url: str, token: str, name: str) -> dict:
    answer = requests.get(f"{url}/hub/api/users/{name}", timeout=30,
                          headers={"Authorization": f"token {token}"})
    assert answer.status_code == 200, (answer.status_code, answer.text)
    return answer.json()


@pytest.mark.slow
def test_a_students_launch_opens_her_chapter_under_her_lms_id(hub):
    platform, url, token, _ = hub
    done = _launch(platform, ANN, CHAPTER)
    assert done.status_code == 302, done.text[:1000]
    assert done.headers["Location"] == \
        f"/hub/user-redirect/lab/tree/work/{CHAPTER}/{CHAPTER}.ipynb"
    ann = _user(url, token, ANN)
    assert (ann["admin"], ann["groups"]) == (False, [])


@pytest.mark.slow
def test_an_assignments_link_can_name_the_chapter_too(hub):
    """Canvas's way: the assignment's External Tool URL, the launch's target link, names it."""
    platform, url, *_ = hub
    done = _launch(platform, ANN, link=f"{url}/hub?chapter=02_scatter")
    assert done.status_code == 302, done.text[:1000]
    assert done.headers["Location"] == \
        "/hub/user-redirect/lab/tree/work/02_scatter/02_scatter.ipynb"


@pytest.mark.slow
def test_an_instructor_is_an_admin_and_a_teaching_assistant_a_grader(hub):
    platform, url, token, _ = hub
    for person in (TIA, TOM):
        done = _launch(platform, person)
        assert done.status_code == 302, done.text[:1000]
    tia, tom = _user(url, token, TIA), _user(url, token, TOM)
    assert (tia["admin"], tia["groups"]) == (True, [GRADERS])
    assert (tom["admin"], tom["groups"]) == (False, [GRADERS])


@pytest.mark.slow
def test_a_launch_with_a_bad_signature_is_refused_with_a_page_that_says_so(hub):
    platform, url, token, _ = hub
    platform.forged_key, _ = new_key()
    try:
        done = _launch(platform, ANN, CHAPTER)
    finally:
        platform.forged_key = None
    assert done.status_code == 400
    assert "its signature does not match the LMS&#39;s keys" in done.text
    assert CLIENT_ID not in done.text


@pytest.mark.slow
def test_a_replayed_launch_its_nonce_reused_is_refused_with_a_page_that_says_so(hub):
    platform, *_ = hub
    first = _browser()
    action, fields = _to_the_form(first, platform, ANN, CHAPTER)
    assert first.post(action, data=fields, allow_redirects=False, timeout=60).status_code == 302
    # the same signed launch again, in a launch the hub started anew (its own state)
    again = _browser()
    _, fresh = _to_the_form(again, platform, ANN, CHAPTER)
    done = again.post(action, data={"id_token": fields["id_token"], "state": fresh["state"]},
                      allow_redirects=False, timeout=60)
    assert done.status_code == 400
    assert "its nonce is not the one this browser asked for" in done.text


@pytest.mark.slow
def test_a_launch_naming_no_chapter_of_the_course_says_so(hub):
    platform, *_ = hub
    done = _launch(platform, ANN, "99_nowhere")
    assert done.status_code == 404
    assert "the chapter &#39;99_nowhere&#39;, which this course does not have" in done.text


@pytest.mark.slow
def test_the_hubs_log_holds_no_client_id(hub):
    *_, log = hub
    assert CLIENT_ID not in log.read_text()
