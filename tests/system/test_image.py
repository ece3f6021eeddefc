"""The student's real path in the course's image: built and run with docs/docker.md's own Docker
commands (tests/support/containers.py says how, and what the test adds), the student's Lab and
workspace, a chapter on 4 ranks inside, what the student image holds, and grading in the
instructor image; then the script that makes the image's user, for ids the base has and lacks,
and grading again as a host user the base does not know, whose group it does (uid 1500, gid 20:
macOS's `staff`).

Skips, with the reason, where no container engine can run. Each step's seconds and the images'
sizes are printed at the end of the session (pytest's summary).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import nbformat
import pytest

from support import class_factory
from support.containers import (
    ROOT,
    LabContainer,
    build_argv,
    dockerfile_header_commands,
    documented_commands,
    expand,
    free_port,
    run_argv,
    step,
)
from support.grading import read_grades

pytestmark = pytest.mark.image

CHAPTER = "01_broadcast"
CHAPTERS = sorted(p.name for p in (ROOT / "notebooks").iterdir() if p.is_dir())
# a host user the base image has no user for, with a group it has (macOS's staff, Debian's
# dialout): the build must reuse the group
OTHER_IDS = (1500, 20)


def _get(url: str) -> tuple[int, str]:
    """Status and Location of a GET, redirects not followed."""
    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args, **kwargs):
            return None

    try:
        with urllib.request.build_opener(NoRedirect).open(url, timeout=30) as answer:
            return answer.status, ""
    except urllib.error.HTTPError as error:
        return error.code, error.headers.get("Location", "")


def _shell(line: str, cwd: Path) -> None:
    """One of the documentation's plain shell lines (mkdir -p ...), as written."""
    subprocess.run(["bash", "-c", line], cwd=cwd, check=True)


def _owners(folder: Path) -> set[tuple[int, int]]:
    return {(p.stat().st_uid, p.stat().st_gid) for p in [folder, *folder.rglob("*")]}


def _about(images) -> str:
    return "; ".join(images.about)


# --- the student's Lab, as docs/docker.md says ------------------------------------------------

@pytest.fixture(scope="module")
def student_lab(course_images, tmp_path_factory):
    folder = tmp_path_factory.mktemp("student")
    _shell("mkdir -p commlab-work", folder)
    lab = LabContainer(course_images.engine, course_images.commands["run"], folder)
    with step("Lab starts and prints its token URL"):
        lab.start()
    holder = {"lab": lab, "folder": folder}
    yield holder
    holder["lab"].stop()


def test_lab_prints_its_token_url_and_answers(student_lab):
    lab = student_lab["lab"]
    assert _get(f"{lab.base_url}/lab?token={lab.token}")[0] == 200, lab.logs()
    status, location = _get(f"{lab.base_url}/lab")
    assert status == 302 and "/login" in location, (status, location)


def test_host_folder_fills_with_every_chapter_owned_by_the_host_user(student_lab):
    work = student_lab["folder"] / "commlab-work"
    assert sorted(p.name for p in work.iterdir() if p.is_dir()) == CHAPTERS
    for chapter in CHAPTERS:
        assert (work / chapter / f"{chapter}.ipynb").read_bytes() == \
            (ROOT / "notebooks" / chapter / f"{chapter}.ipynb").read_bytes()
    assert _owners(work) == {(os.getuid(), os.getgid())}


def test_edited_notebook_survives_a_new_container(student_lab, course_images):
    lab, folder = student_lab["lab"], student_lab["folder"]
    work = folder / "commlab-work"
    path = f"{CHAPTER}/{CHAPTER}.ipynb"
    # the student edits and saves in Lab (the contents API Lab's save uses)
    nb = nbformat.read(work / path, as_version=4)
    nb.cells.insert(0, nbformat.v4.new_markdown_cell("my own note, kept across containers"))
    body = json.dumps({"type": "notebook", "format": "json", "content": nb}).encode()
    request = urllib.request.Request(f"{lab.base_url}/api/contents/{path}?token={lab.token}",
                                     data=body, method="PUT",
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as answer:
        assert answer.status == 200
    saved = (work / path).read_bytes()
    assert b"my own note" in saved
    shutil.rmtree(work / "02_scatter")  # a chapter the student deleted comes back fresh
    with step("Lab stops"):
        lab.stop()
    again = LabContainer(course_images.engine, course_images.commands["run"], folder)
    with step("Lab starts again on the same folder"):
        again.start()
    student_lab["lab"] = again
    assert (work / path).read_bytes() == saved
    assert (work / "02_scatter" / "02_scatter.ipynb").read_bytes() == \
        (ROOT / "notebooks" / "02_scatter" / "02_scatter.ipynb").read_bytes()
    with urllib.request.urlopen(f"{again.base_url}/api/contents/{path}?token={again.token}",
                                timeout=30) as answer:
        assert "my own note" in answer.read().decode()


def test_make_check_runs_inside(student_lab):
    lab = student_lab["lab"]
    with step("make check CHAPTER=01_broadcast inside"):
        done = lab.exec("make", "-C", "/opt/course", "check", f"CHAPTER={CHAPTER}")
    said = done.stdout + done.stderr
    assert done.returncode == 2, said  # make's status for a check that did not pass
    assert "FAIL  01-my-broadcast-test" in said, said
    assert "not answered yet" in said and "0 of 2 visible tests pass" in said, said


def test_a_chapter_runs_on_4_ranks_inside(student_lab):
    lab = student_lab["lab"]
    with step("chapter 01 executed inside (nbconvert)"):
        done = lab.exec("jupyter", "nbconvert", "--to", "notebook", "--execute",
                        "--allow-errors", "--output-dir", "/tmp", "--output", "ran",
                        f"work/{CHAPTER}/{CHAPTER}.ipynb")
    assert done.returncode == 0, done.stdout + done.stderr
    ran = nbformat.reads(lab.exec("cat", "/tmp/ran.ipynb").stdout, as_version=4)
    cells = {c.get("id"): c for c in ran.cells}
    shown = "".join(o.get("data", {}).get("text/html", "") for o in cells["01-06"].outputs)
    # commlab's display: one block per rank, its label on top, its output below
    blocks = re.findall(r'>rank (\d+)</div><pre[^>]*>(.*?)</pre>', shown, re.S)
    assert [int(rank) for rank, _ in blocks] == [0, 1, 2, 3], shown[:2000]
    for rank, output in blocks:
        assert f"Rank {rank} after broadcast" in output, (rank, output)
    assert any("image/png" in o.get("data", {}) for o in cells["01-08"].outputs)
    errors = [c.get("id") for c in ran.cells for o in c.get("outputs", [])
              if o.output_type == "error"]
    exercises = {c.get("id") for c in ran.cells
                 if c.get("metadata", {}).get("nbgrader", {}).get("grade")}
    assert set(errors) <= exercises, f"cells that failed besides the unanswered tests: {errors}"


def test_student_image_holds_one_torch_and_no_instructor_files(course_images):
    engine = course_images.engine
    script = ("find / -xdev -name 'torch-*.dist-info' -type d; "
              "python -c 'import torch; print(\"version\", torch.__version__)'; "
              "cat /opt/venv/etc/jupyter/labconfig/page_config.json; "
              "ls -A /opt/course; "
              "grep -rl 'BEGIN HIDDEN TESTS\\|BEGIN SOLUTION' /opt/course /home/jovyan "
              "/opt/venv/etc || echo no-secrets")
    done = engine.run("run", "--rm", "--network", "none", "--entrypoint", "sh",
                      course_images.student, "-c", script)
    lines = done.stdout.splitlines()
    assert len([line for line in lines if line.endswith(".dist-info")]) == 1, done.stdout
    page_config = json.loads(done.stdout[done.stdout.index("{"):done.stdout.rindex("}") + 1])
    instructor_panels = {f"@jupyter/nbgrader:{plugin}" for plugin in
                         ("formgrader", "create-assignment", "course-list")}
    assert set(page_config["lockedExtensions"]) == instructor_panels
    # the Assignments panel too, but for a hub's server with nbgrader's exchange (test_hub.py)
    assert set(page_config["disabledExtensions"]) == \
        instructor_panels | {"@jupyter/nbgrader:assignment-list"}
    assert "version 2.13.0" in done.stdout.replace("version 2.13.0+", "version 2.13.0 ")
    course = set(lines)
    assert not {"solutions", "grader", "tests", "requirements-dev.txt"} & course, done.stdout
    assert {"notebooks", "helpers", "Makefile"} <= course, done.stdout
    assert lines[-1] == "no-secrets", done.stdout


# --- a laptop, as the Dockerfile's opening comment says ------------------------------------------

def test_laptop_lines_of_the_dockerfile_build_the_cpu_image_and_run_lab_without_gpus(
        course_images, tmp_path):
    """The Dockerfile's laptop commands as written: torch's CPU build, and a docker run without
    --gpus (which stops on every machine without the NVIDIA Container Toolkit)."""
    commands = dockerfile_header_commands()
    build = next(c for c in commands if c.startswith("docker build") and "TORCH=cpu" in c)
    run = next(c for c in commands if c.startswith("docker run") and "--gpus" not in c)
    rename = {course_images.student: "commlab-course-laptop"}
    argv = build_argv(build, course_images.flags, rename=rename)
    with step("laptop build (TORCH=cpu), after the others"):
        course_images.engine.run(*argv, timeout=2400)
    _shell("mkdir -p commlab-work", tmp_path)
    lab = LabContainer(course_images.engine, run, tmp_path, rename=rename)
    with step("laptop run: Lab prints its token URL"):
        lab.start()
    try:
        assert _get(f"{lab.base_url}/lab?token={lab.token}")[0] == 200, lab.logs()
        version = lab.exec("python", "-c", "import torch; print(torch.__version__, "
                           "torch.cuda.is_available())")
        assert version.stdout.split() == ["2.13.0+cpu", "False"], version
        assert sorted(p.name for p in (tmp_path / "commlab-work").iterdir()) == CHAPTERS
        # make inside keeps the image's build, and says nothing of TORCH
        check = lab.exec("make", "-C", "/opt/course", "setup")
        assert check.returncode == 0 and "TORCH" not in check.stdout + check.stderr, check
    finally:
        lab.stop()
        course_images.engine.run("rmi", "commlab-course-laptop", check=False)


# --- grading in the instructor image, as docs/security.md says -----------------------------------

def _small_class(folder: Path, students: dict[str, str]) -> None:
    """``students``: name -> "correct" or "untouched", each handing in chapter 01."""
    for student, kind in students.items():
        nb = class_factory.correct(CHAPTER) if kind == "correct" else \
            class_factory.release(CHAPTER)
        class_factory.write(folder / "class", student, nb, CHAPTER)


def _grade(images, folder: Path, ids=None, rename=None, label="") -> dict[str, dict]:
    """docs/security.md's grading lines in ``folder``; grades.csv's rows by student."""
    _shell("mkdir -p grades", folder)
    if ids is not None:
        os.chown(folder / "grades", *ids)
    argv = run_argv(images.commands["grade"], folder, None, f"commlab-grade-{os.getpid()}",
                    ids, rename)
    students = len(list((folder / "class").iterdir()))
    with step(f"grading {students} submission{'s' if students > 1 else ''}{label}"):
        done = images.engine.run(*argv, check=False, timeout=1200)
    assert done.returncode == 0, (
        f"docs/security.md's grading command failed ({_about(images)}):\n"
        f"{done.stdout[-4000:]}\n{done.stderr[-4000:]}")
    return read_grades(folder / "grades")


def test_instructor_image_grades_a_small_class(course_images, tmp_path):
    # its make setup is done: a stamp older than the course's files (a cached set-up layer under
    # a newer copy) would have make grade install again, without a network
    done = course_images.engine.run(
        "run", "--rm", "--network", "none", course_images.instructor, "sh", "-c",
        "for f in requirements.txt requirements-dev.txt pyproject.toml "
        "helpers/scripts/install_requirements.sh; do [ $f -ot /opt/venv/.installed ] || "
        "{ echo $f is newer than the stamp; exit 1; }; done", check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    _small_class(tmp_path, {"alice": "correct", "bob": "untouched"})
    rows = _grade(course_images, tmp_path)
    assert (rows["alice"]["status"], float(rows["alice"]["score"])) == ("graded", 4.0)
    assert (rows["bob"]["status"], float(rows["bob"]["score"])) == ("graded", 0.0)
    grades = tmp_path / "grades"
    assert (grades / "gradebook.db").exists()
    assert (grades / "feedback" / "bob" / f"{CHAPTER}.html").exists()
    assert _owners(grades) == {(os.getuid(), os.getgid())}


# --- a host user the base image does not know, with a group it has ------------------------------

@pytest.fixture(scope="module")
def other_user_instructor(course_images):
    """The instructor image built with the documented line as a host user with OTHER_IDS would
    run it (their `id -u` and `id -g`), under a name of its own. Its runtime stage, where the
    user is made, is the student image's too."""
    rename = {course_images.instructor: "commlab-instructor-other"}
    course_images.build("instructor build", OTHER_IDS, rename,
                        f" (uid {OTHER_IDS[0]}, gid {OTHER_IDS[1]})")
    return rename


def test_image_user_script_handles_ids_the_base_has_and_lacks(course_images):
    """helpers/scripts/image_user.sh, as the Dockerfile runs it, in the bare base image."""
    script = ROOT / "helpers" / "scripts" / "image_user.sh"
    expected = {"1500 1500": "uid=1500(jovyan) gid=1500(jovyan)",
                "501 20": "uid=501(jovyan) gid=20(dialout)",
                "1000 100": "uid=1000(jovyan) gid=100(users)",
                "2 2": "uid=2(bin) gid=2(bin)",  # an id of the base: jovyan shares it
                "0 0": "root: allow_root"}
    for ids, wanted in expected.items():
        done = course_images.engine.run(
            "run", "--rm", "--network", "none", "-v", f"{script}:/image_user.sh:ro",
            course_images.base, "sh", "-c",
            f"sh /image_user.sh {ids} >/dev/null && "
            "if [ -f /etc/jupyter/jupyter_server_config.json ]; then echo root: allow_root; "
            "else id jovyan; fi && stat -c '%u:%g' /home/jovyan/work")
        assert wanted in done.stdout, (ids, done.stdout, done.stderr)
        assert done.stdout.split()[-1] == ids.replace(" ", ":"), (ids, done.stdout)
    # the instructor image's course is set up under the home before the user is made
    done = course_images.engine.run(
        "run", "--rm", "--network", "none", "-v", f"{script}:/image_user.sh:ro",
        course_images.base, "sh", "-c",
        "mkdir -p /home/jovyan/course && sh /image_user.sh 1500 20 >/dev/null && "
        "stat -c '%u:%g %n' /home/jovyan /home/jovyan/.bashrc /home/jovyan/course")
    assert done.stdout.split("\n")[:3] == ["1500:20 /home/jovyan", "1500:20 /home/jovyan/.bashrc",
                                           "0:0 /home/jovyan/course"], (done.stdout, done.stderr)
    refused = course_images.engine.run(
        "run", "--rm", "--network", "none", "-v", f"{script}:/image_user.sh:ro",
        course_images.base, "sh", "/image_user.sh", "me", "20", check=False)
    assert refused.returncode == 2 and "are numbers" in refused.stderr, refused.stderr


def test_other_host_user_grades_with_the_readme_command(course_images, other_user_instructor,
                                                        tmp_path):
    # their own grades/ folder: the grader runs as them and writes it, and every file there
    # is theirs
    _small_class(tmp_path, {"carol": "correct"})
    rows = _grade(course_images, tmp_path, OTHER_IDS, other_user_instructor,
                  f" (uid {OTHER_IDS[0]}, gid {OTHER_IDS[1]})")
    assert (rows["carol"]["status"], float(rows["carol"]["score"])) == ("graded", 4.0)
    assert _owners(tmp_path / "grades") == {OTHER_IDS}


def test_readme_lines_expand_as_a_shell_would(tmp_path):
    """The test runs the documented lines through bash's own expansion."""
    words = expand('docker build --build-arg UID="$(id -u)" -t x .', tmp_path, (1500, 20))
    assert words == ["build", "--build-arg", "UID=1500", "-t", "x", "."]


def test_the_documented_builds_share_the_runtime_stage():
    """The student's, the instructor's and the hub's build lines give the Dockerfile's runtime
    stage the same arguments, so that a machine building more than one of them (an instructor,
    a hub's server, this suite) installs torch and the pins once."""
    stage = re.search(r"^FROM .* AS runtime\n(.*?)^FROM ", (ROOT / "Dockerfile").read_text(),
                      re.S | re.M).group(1)
    names = set(re.findall(r"^ARG (\w+)", stage, re.M))
    assert "TORCH" in names, names
    commands = documented_commands()
    given = {}
    for which in ("build", "instructor build", "hub build"):
        words = expand(commands[which], ROOT, (1000, 100))
        arguments = dict(words[i + 1].split("=", 1) for i, word in enumerate(words)
                         if word == "--build-arg")
        given[which] = {name: arguments.get(name, "") for name in sorted(names)}
    assert given["build"] == given["instructor build"] == given["hub build"], given


# --- the image as a JupyterHub's spawner starts it ----------------------------------------------

class _HubAPI:
    """What jupyterhub-singleuser asks of its hub while it starts (the API's version): a
    stand-in on this machine's loopback, which the container reaches as 10.0.2.2 (slirp4netns),
    or on Docker's bridge."""

    def __init__(self, version: str):
        import http.server
        import threading

        class Answer(http.server.BaseHTTPRequestHandler):
            def _json(self, status: int = 200) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("X-JupyterHub-Version", version)
                self.end_headers()
                self.wfile.write(json.dumps({"version": version}).encode())

            def do_GET(self):  # noqa: N802 - http.server's name
                self._json()

            def do_POST(self):  # noqa: N802 - activity reports
                self._json()

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Answer)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _hub_pin() -> str:
    return next(line.split("==")[1] for line in (ROOT / "requirements.txt").read_text()
                .splitlines() if line.startswith("jupyterhub=="))


@pytest.fixture(scope="module")
def spawned(hub_image, tmp_path_factory):
    """The hub image started as DockerSpawner starts it: the hub's environment, its own user
    (uid 1000), an empty volume on the home, /dev/shm of Docker's default size; its logs."""
    engine = hub_image.engine
    home = tmp_path_factory.mktemp("hub-home")
    os.chown(home, 1000, 100)  # an empty volume, writable by the hub's user (fsGid 100)
    api = _HubAPI(_hub_pin())
    port = free_port()
    name = f"commlab-spawned-{os.getpid()}"
    hub_url = f"http://10.0.2.2:{api.port}/hub/api"
    env = {"JUPYTERHUB_API_TOKEN": "not-a-real-token", "JUPYTERHUB_API_URL": hub_url,
           "JUPYTERHUB_CLIENT_ID": "jupyterhub-user-alice", "JUPYTERHUB_USER": "alice",
           "JUPYTERHUB_BASE_URL": "/", "JUPYTERHUB_SERVICE_PREFIX": "/user/alice/",
           "JUPYTERHUB_SERVICE_URL": "http://0.0.0.0:8888/user/alice/",
           "JUPYTERHUB_OAUTH_CALLBACK_URL": "/user/alice/oauth_callback",
           "JUPYTERHUB_HOST": "", "NBGRADER_EXCHANGE": "/srv/nbgrader/exchange"}
    network = ["--network", "slirp4netns:allow_host_loopback=true"] \
        if engine.name == "podman" else []
    try:
        with step("hub image: started as a spawner would, until its server answers"):
            engine.run("run", "-d", "--name", name, *network, "-p", f"127.0.0.1:{port}:8888",
                       "-v", f"{home}:/home/jovyan",
                       *[f"-e{k}={v}" for k, v in env.items()], hub_image.hub)
            deadline = time.monotonic() + 120
            status = 0
            while time.monotonic() < deadline and status != 200:
                # the port is forwarded before the server listens: resets until then
                with contextlib.suppress(OSError):
                    status = _get(f"http://127.0.0.1:{port}/user/alice/api")[0]
                time.sleep(0.5)
        logs = engine.run("logs", name, check=False)
        yield {"port": port, "home": home, "name": name, "engine": engine,
               "logs": logs.stdout + logs.stderr}
    finally:
        engine.run("rm", "--force", name, check=False)
        api.stop()


def test_hub_image_serves_lab_with_jupyterhub_singleuser(spawned):
    port, logs = spawned["port"], spawned["logs"]
    assert "jupyterhub-singleuser on /home/jovyan/work" in logs, logs[-3000:]
    assert "JupyterHubSingleUser" in logs and f"version {_hub_pin()}" in logs, logs[-3000:]
    assert "nbgrader.server_extensions.assignment_list | extension was successfully loaded" \
        in logs, logs[-3000:]
    assert "ERROR" not in logs and "Traceback" not in logs, logs[-3000:]
    # /dev/shm of Docker's default size: the start says what to do
    # (64 MB: Docker's 65536 KiB, podman's 64000 KiB)
    assert re.search(r"/dev/shm holds 6[0-9] MB", logs) and "--shm-size=1g" in logs, logs[-3000:]
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/user/alice/api", timeout=30) as answer:
        assert "version" in json.loads(answer.read())
    # Lab itself only after the hub's login (OAuth)
    status, location = _get(f"http://127.0.0.1:{port}/user/alice/lab")
    assert status == 302 and "/hub/api/oauth2/authorize" in location, (status, location)


def test_hub_image_fills_the_empty_home_as_jovyan(spawned):
    work = spawned["home"] / "work"
    assert sorted(p.name for p in work.iterdir() if p.is_dir()) == CHAPTERS
    assert _owners(work) == {(1000, 100)}
    engine, name = spawned["engine"], spawned["name"]
    who = engine.run("exec", name, "sh", "-c", "id -un; id -u; python -c 'from nbgrader.utils "
                     "import get_username; print(get_username())'; jupyterhub-singleuser "
                     "--version").stdout.split()
    # every student is jovyan, uid 1000; nbgrader files her work under her hub login
    assert who == ["jovyan", "1000", "alice", _hub_pin()], who
