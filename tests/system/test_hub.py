"""A class on a real JupyterHub, with the commands of docs/hub.md: `make hub` in a copy of the
course starts JupyterHub, its proxy and the course's Formgrader as a hub service; each student's
server is a container of the course's image (tests/support/image_fixtures.py), started by
DockerSpawner through the container engine's Docker API (podman's `system service` here), with a
volume for her home and nbgrader's exchange in a folder of this machine.

Everything is driven over HTTP as a browser would (tests/support/hub.py): the instructor
releases a chapter in Formgrader; four students log in, fetch it, answer it and submit it (one
late, two twice, one of them also a forged submission under another's name); the instructor
collects, grades with a roster and a due date and releases the feedback from Formgrader's
terminal; each student fetches her own page. Then one student's server runs a chapter on 4
ranks while its container's memory and CPU are read (docs/hub.md, "Sizing").

Ports are free ones on 127.0.0.1; the containers reach the hub's API through slirp4netns's
route to the host's loopback (10.0.2.2). Skips, with the reason, where no container engine can
run. Each step's seconds are printed at the end of the session.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import datetime
import json
import os
import re
import shlex
import subprocess
import threading
import time
from pathlib import Path

import psutil
import pytest
import requests

from grader.intake.deadlines import parse_time
from grader.intake.exchange import AGREE
from grader.trusted.exchange_feedback import OWN_FEEDBACK
from support import class_factory
from support.containers import MEASURED, SCRATCH, free_port, step
from support.course_copy import ROOT, tracked_copy
from support.grading import read_grades
from support.hub import HUB_VENV, HubUser, hub_environment
from support.sessions import stop_session

pytestmark = [pytest.mark.hub, pytest.mark.image]

CHAPTER = "01_broadcast"
STUDENTS = ("alice", "bob", "carol", "dave")
ROSTER = (*STUDENTS, "erin")  # erin never logs in
INSTRUCTOR = "teacher"
PASSWORD = "class-password-2026"
ADMIN_PASSWORD = "the-instructors-own-password-of-32-characters-at-least"


def _documented_hub_lines() -> dict[str, str]:
    """The commands of docs/hub.md ("Teaching a class on a JupyterHub"), continuation lines
    joined: ``hub`` (starting it), ``collect``, ``grade``, ``release-feedback``."""
    section = (ROOT / "docs" / "hub.md").read_text()
    lines = [line.strip() for block in re.findall(r"```bash\n(.*?)```", section, re.S)
             for line in re.sub(r"\\\n\s*", "", block).splitlines()]
    found = {}
    for line in lines:
        command = line.split("#")[0].strip()
        for key, start in (("hub", "make hub"), ("collect", "make collect"),
                           ("grade", "make grade"), ("release-feedback", "make release-feedback")):
            if (command.startswith(start) or f" {start}" in command) and \
                    not command.startswith("make hub-setup"):
                found.setdefault(key, command)
    missing = {"hub", "collect", "grade", "release-feedback"} - set(found)
    assert not missing, f"docs/hub.md shows no command for {sorted(missing)}"
    return found


def _engine_api(engine) -> tuple[str, dict[str, str], subprocess.Popen | None]:
    """(the Docker API's address, the HUB_* settings it needs, the podman service to stop)."""
    if engine.name == "docker":
        gateway = subprocess.run(
            ["docker", "network", "inspect", "bridge", "--format",
             "{{(index .IPAM.Config 0).Gateway}}"], capture_output=True, text=True).stdout.strip()
        return (os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock"),
                {"HUB_NETWORK": "bridge", "HUB_CONNECT_IP": gateway}, None)
    socket_path = SCRATCH / "run" / f"api-{os.getpid()}.sock"
    socket_path.unlink(missing_ok=True)
    service = subprocess.Popen([*engine.argv, "system", "service", "--time=0",
                                f"unix://{socket_path}"], env=engine.env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               start_new_session=True)
    deadline = time.monotonic() + 30
    while not socket_path.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert socket_path.exists(), "podman's API service did not start"
    # slirp4netns, as every container of these tests: no bridge or firewall rule on this
    # machine; 10.0.2.2 is the host's loopback seen from the container
    return (f"unix://{socket_path}",
            {"HUB_NETWORK": "slirp4netns:allow_host_loopback=true",
             "HUB_CONNECT_IP": "10.0.2.2", "HUB_API_IP": "127.0.0.1"}, service)


class ClassHub:
    """`make hub` in a copy of the course, as docs/hub.md says, with this test's settings."""

    def __init__(self, images, folder: Path):
        self.images, self.folder = images, folder
        self.course = folder / "course"
        self.course.mkdir()
        tracked_copy(self.course)
        (self.course / ".venv").symlink_to(ROOT / ".venv")
        (self.course / "roster.txt").write_text("\n".join(ROSTER) + "\n")
        self.exchange = folder / "exchange"
        self.course_id = f"class{os.getpid()}"  # containers and volumes of this run only
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = folder / "hub.log"
        self.process: subprocess.Popen | None = None
        self.started: list[psutil.Process] = []
        self.service = None

    def start(self, lines: dict[str, str]) -> ClassHub:
        api, network, self.service = _engine_api(self.images.engine)
        settings = {
            "HUB_URL": self.url, "HUB_API_PORT": str(free_port()),
            "HUB_PROXY_API_PORT": str(free_port()), "HUB_FORMGRADER_PORT": str(free_port()),
            "HUB_STUDENTS": "roster.txt", "HUB_INSTRUCTORS": INSTRUCTOR,
            "HUB_PASSWORD": PASSWORD, "HUB_ADMIN_PASSWORD": ADMIN_PASSWORD,
            "HUB_IMAGE": self.images.hub, "HUB_DOCKER": api, "HUB_EXCHANGE": str(self.exchange),
            "HUB_COURSE_ID": self.course_id, "HUB_DATA": str(self.folder / "hub-data"),
            "HUB_VENV": str(HUB_VENV), **network,
        }
        # docs/hub.md's line, its settings replaced by this test's
        words = [w for w in shlex.split(lines["hub"]) if not re.match(r"HUB_\w+=", w)]
        env = {k: v for k, v in os.environ.items()
               if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
        with open(self.log, "w") as log:
            self.process = subprocess.Popen(
                [*words, f"HUB_VENV={HUB_VENV}"], cwd=self.course, env={**env, **settings},
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 600  # a fresh machine installs the hub's environment
        while time.monotonic() < deadline and self.process.poll() is None:
            with contextlib.suppress(requests.RequestException):
                # 200 once the hub's route is in the proxy (before, the proxy's 404 page)
                login = requests.get(f"{self.url}/hub/login", timeout=5)
                if login.status_code == 200 and "jupyterhub" in login.text:
                    with contextlib.suppress(psutil.NoSuchProcess):
                        self.started = psutil.Process(self.process.pid).children(recursive=True)
                    return self
            time.sleep(0.5)
        raise AssertionError(f"the hub did not start:\n{self.log.read_text()[-5000:]}")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            with contextlib.suppress(psutil.NoSuchProcess):
                self.started = list({p.pid: p for p in [
                    *self.started, *psutil.Process(self.process.pid).children(recursive=True)]
                }.values())
            stop_session(self.process, grace=60)  # the hub stops its servers and proxy
        for left in self.started:  # the services have sessions of their own
            with contextlib.suppress(psutil.NoSuchProcess):
                left.kill()
        engine = self.images.engine
        names = engine.run("ps", "-a", "--format", "{{.Names}}", check=False).stdout.split()
        for name in names:
            if name.startswith(f"{self.course_id}-"):
                engine.run("rm", "--force", name, check=False)
        volumes = engine.run("volume", "ls", "--format", "{{.Name}}", check=False).stdout
        for name in volumes.split():
            if name.startswith(f"{self.course_id}-home-"):
                engine.run("volume", "rm", "--force", name, check=False)
        stop_session(self.service)


def _answer_and_submit(student: HubUser, notebook, course_id: str) -> str:
    """Save ``notebook`` as her chapter (Lab's save) and submit it (the Assignments panel's
    Submit); the timestamp nbgrader gave it."""
    body = {"type": "notebook", "format": "json", "content": notebook}
    student.json("PUT", student.lab_url, f"/api/contents/{CHAPTER}/{CHAPTER}.ipynb", json=body)
    listed = student.json("POST", student.lab_url, "/assignments/submit",
                          json={"course_id": course_id, "assignment_id": CHAPTER})
    assert listed["success"], listed
    submitted = [s for a in listed["value"] if a["status"] == "submitted"
                 for s in a["submissions"]]
    return max(s["timestamp"] for s in submitted)


class _CgroupSampler(threading.Thread):
    """A container's memory (resident, its peak) and CPU time, read from its cgroup on this
    machine while it runs."""

    def __init__(self, pid: int):
        super().__init__(daemon=True)
        self.paths = dict(line.split(":", 2)[1:] for line in
                          Path(f"/proc/{pid}/cgroup").read_text().splitlines())
        self.peak_rss = 0
        self.stopped = threading.Event()

    def _read(self, controller: str, name: str) -> str:
        if controller in self.paths:
            return Path(f"/sys/fs/cgroup/{controller}{self.paths[controller]}/{name}").read_text()
        return Path(f"/sys/fs/cgroup{self.paths['']}/{name}").read_text()  # cgroup v2

    def rss(self) -> int:
        if "memory" in self.paths:
            stat = dict(line.split() for line in self._read("memory", "memory.stat").splitlines())
            return int(stat["total_rss"]) + int(stat.get("total_shmem", 0))
        stat = dict(line.split() for line in self._read("", "memory.stat").splitlines())
        return int(stat["anon"]) + int(stat.get("shmem", 0))

    def cpu_seconds(self) -> float:
        if "cpuacct" in self.paths:
            return int(self._read("cpuacct", "cpuacct.usage")) / 1e9
        stat = dict(line.split() for line in self._read("", "cpu.stat").splitlines())
        return int(stat["usage_usec"]) / 1e6

    def run(self) -> None:
        while not self.stopped.wait(0.2):
            with contextlib.suppress(OSError, KeyError, ValueError):
                self.peak_rss = max(self.peak_rss, self.rss())


@pytest.fixture(scope="module")
def term(hub_image, tmp_path_factory):
    """A term in brief: everything the class and the instructor did, and what came of it."""
    lines = _documented_hub_lines()
    hub_environment()
    hub = ClassHub(hub_image, tmp_path_factory.mktemp("hub"))
    result = {"hub": hub}
    try:
        with step("hub: make hub until the login page answers"):
            hub.start(lines)
        _release(hub, result)
        _class_hands_in(hub, result)
        _instructor_grades(hub, lines, result)
        _students_fetch_feedback(hub, result)
        _a_chapter_in_a_server(hub, result)
        yield result
    except Exception as error:
        raise AssertionError(f"{error}\nthe hub's log ({hub.log}):\n"
                             f"{hub.log.read_text()[-6000:]}") from error
    finally:
        hub.stop()


def _release(hub: ClassHub, result: dict) -> None:
    teacher = HubUser(hub.url, INSTRUCTOR, ADMIN_PASSWORD).log_in()
    result["teacher"] = teacher
    service = f"formgrader-{hub.course_id}"
    page = teacher.open_service(service)
    result["formgrader page"] = page
    result["formgrader"] = formgrader = f"{hub.url}/services/{service}"
    with step("hub: the instructor releases the chapter in Formgrader"):
        released = teacher.json("POST", formgrader, f"/formgrader/api/assignment/{CHAPTER}/release")
    assert released["success"], released


def _class_hands_in(hub: ClassHub, result: dict) -> None:
    students = {name: HubUser(hub.url, name, PASSWORD).log_in() for name in STUDENTS}
    result["students"] = students
    with step(f"hub: {len(students)} students log in at once, until each server answers"), \
            concurrent.futures.ThreadPoolExecutor(len(students)) as pool:
        waited = dict(zip(students, pool.map(HubUser.wait_for_server, students.values())))
    result["server start"] = waited
    listed, fetched = {}, {}
    for name, student in students.items():
        listed[name] = student.json("GET", student.lab_url, "/assignments",
                                    params={"course_id": hub.course_id})
        fetched[name] = student.json("POST", student.lab_url, "/assignments/fetch",
                                     json={"course_id": hub.course_id, "assignment_id": CHAPTER})
    result["listed"], result["fetched"] = listed, fetched
    right, untouched = class_factory.correct(CHAPTER), class_factory.release(CHAPTER)
    times = {}
    with step("hub: on time: alice once, bob twice, dave once"):
        times["alice"] = [_answer_and_submit(students["alice"], right, hub.course_id)]
        times["bob"] = [_answer_and_submit(students["bob"], untouched, hub.course_id),
                        _answer_and_submit(students["bob"], right, hub.course_id)]
        times["dave"] = [_answer_and_submit(students["dave"], untouched, hub.course_id)]
        # bob, in a terminal of his server, hands in under alice's name
        code, shown = students["bob"].run_in_terminal(
            students["bob"].lab_url, f"cd ~/work && nbgrader submit {CHAPTER} --course "
            f"{hub.course_id} --student alice", timeout=120)
        result["forged"] = (code, shown)
    time.sleep(1.1)
    result["due"] = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    time.sleep(1.1)
    # dave, after the due date, rewrites his submission of before it (his nbgrader cache holds
    # its folder's name), notebook and timestamp.txt; then hands in late
    with step("hub: dave rewrites his submission after the due date"):
        body = {"type": "notebook", "format": "json", "content": right}
        students["dave"].json("PUT", students["dave"].lab_url,
                              f"/api/contents/{CHAPTER}/{CHAPTER}.ipynb", json=body)
        entry = _inbound_entry(hub, "dave", times["dave"][0])
        result["rewritten"] = students["dave"].run_in_terminal(
            students["dave"].lab_url,
            f'cp ~/work/{CHAPTER}/{CHAPTER}.ipynb "{entry}/{CHAPTER}.ipynb" && '
            f'printf %s "{times["dave"][0]}" > "{entry}/timestamp.txt"', timeout=120)
    with step("hub: late: carol once, dave again"):
        times["carol"] = [_answer_and_submit(students["carol"], right, hub.course_id)]
        times["dave"].append(_answer_and_submit(students["dave"], right, hub.course_id))
    # carol writes a time that is none into hers: her problem alone
    entry = _inbound_entry(hub, "carol", times["carol"][0])
    result["garbage time"] = students["carol"].run_in_terminal(
        students["carol"].lab_url, f'printf yesterday > "{entry}/timestamp.txt"', timeout=120)
    result["times"] = times


def _inbound_entry(hub: ClassHub, login: str, stamp: str) -> str:
    """The folder, as her server sees it, of ``login``'s submission of time ``stamp``."""
    mine = hub.exchange / hub.course_id / "inbound" / login
    name = next(p.name for p in mine.iterdir() if f"+{stamp}+" in p.name)
    return f"$NBGRADER_EXCHANGE/{hub.course_id}/inbound/{name}"


def _instructor_grades(hub: ClassHub, lines: dict[str, str], result: dict) -> None:
    """docs/hub.md's commands in a terminal of Formgrader's service (the course's folder)."""
    teacher, formgrader = result["teacher"], result["formgrader"]
    grade = re.sub(r"--due \S+?(?=[\"' ])", f"--due {result['due']}", lines["grade"])
    assert "--roster roster.txt" in grade and result["due"] in grade, grade
    for key, command in (("collect", lines["collect"]), ("grade", grade),
                         ("release-feedback", lines["release-feedback"])):
        with step(f"hub: {command.split(' GRADE_FLAGS')[0]} (Formgrader's terminal)"):
            result[key] = teacher.run_in_terminal(formgrader, command)
        assert result[key][0] == 0, f"{command}:\n{result[key][1][-4000:]}"
    result["submissions"] = teacher.json(
        "GET", formgrader, f"/formgrader/api/submissions/{CHAPTER}")


def _students_fetch_feedback(hub: ClassHub, result: dict) -> None:
    # bob, in his terminal, after the feedback is out: can he list it, or write beside it?
    course = f"$NBGRADER_EXCHANGE/{hub.course_id}"
    result["prying"] = result["students"]["bob"].run_in_terminal(
        result["students"]["bob"].lab_url,
        f'ls "{course}/feedback"; echo "listed=$?"; touch "{course}/feedback/x"; '
        f'echo "feedback=$?"; touch "{course}/outbound/x"; echo "outbound=$?"; '
        f'mkdir "{course}/inbound/../x"; echo "beside=$?"; true', timeout=120)
    pages = {}
    with step("hub: each student fetches her feedback"):
        for name, student in result["students"].items():
            listed = student.json("POST", student.lab_url, "/assignments/fetch_feedback",
                                  json={"course_id": hub.course_id, "assignment_id": CHAPTER})
            assert listed["success"], listed
            folder = student.json("GET", student.lab_url,
                                  f"/api/contents/{CHAPTER}/feedback")["content"]
            pages[name] = {}
            for stamp in folder:
                for page in student.json("GET", student.lab_url,
                                         f"/api/contents/{stamp['path']}")["content"]:
                    got = student.json("GET", student.lab_url, f"/api/contents/{page['path']}",
                                       params={"type": "file", "format": "text"})
                    pages[name][stamp["name"]] = got["content"]
    result["pages"] = pages


def _a_chapter_in_a_server(hub: ClassHub, result: dict) -> None:
    """alice runs the chapter (its worked examples on 4 ranks) in her server; her container's
    memory and CPU are read meanwhile."""
    engine = hub.images.engine
    container = f"{hub.course_id}-alice"
    pid = int(engine.run("inspect", "--format", "{{.State.Pid}}", container).stdout)
    sampler = _CgroupSampler(pid)
    idle = sampler.rss()
    cpu_before, began = sampler.cpu_seconds(), time.monotonic()
    sampler.start()
    alice = result["students"]["alice"]
    with step("hub: alice runs chapter 01 in her server (4 ranks)"):
        code, shown = alice.run_in_terminal(
            alice.lab_url, f"jupyter nbconvert --to notebook --execute --allow-errors "
            f"--output-dir /tmp --output ran ~/work/{CHAPTER}/{CHAPTER}.ipynb", timeout=300)
    wall = time.monotonic() - began
    sampler.stopped.set()
    sampler.join()
    assert code == 0, shown[-3000:]
    cpu = sampler.cpu_seconds() - cpu_before
    MEASURED.update({"idle server, MB resident": idle / 2**20,
                     "peak while chapter 01 ran on 4 ranks, MB resident": sampler.peak_rss / 2**20,
                     "chapter 01, seconds": wall, "CPU seconds used": cpu,
                     "CPUs busy on average": cpu / wall})
    result["sizing"] = dict(MEASURED)


# --- what the tests check ---------------------------------------------------------------------

def test_formgrader_is_a_page_of_its_own_for_the_instructors_only(term):
    page = term["formgrader page"]
    assert page.status_code == 200 and "/formgrader" in page.url, (page.status_code, page.url)
    # JupyterHub forbids framing every page, so Formgrader must be opened as its own page
    assert "frame-ancestors 'none'" in page.headers.get("Content-Security-Policy", "")
    alice = term["students"]["alice"]
    denied = alice.session.get(f"{term['formgrader']}/formgrader", timeout=60)
    assert denied.status_code == 403, (denied.status_code, denied.url)
    assert denied.url.startswith(f"{term['hub'].url}/hub/api/oauth2/authorize")


def test_each_student_gets_a_server_of_the_image_that_fetches_the_chapter(term):
    for name in STUDENTS:
        released = [a for a in term["listed"][name]["value"] if a["assignment_id"] == CHAPTER]
        # the image filled her work folder: the released chapter is there already
        assert released and released[0]["status"] == "fetched", term["listed"][name]
        assert term["fetched"][name]["success"], term["fetched"][name]
        page = term["students"][name].lab_page
        config = json.loads(re.search(r'id="jupyter-config-data"[^>]*>(.*?)</script>',
                                      page.text, re.S)[1])
        # nbgrader's Assignments panel for a server with the exchange; no news question
        assert "@jupyter/nbgrader:assignment-list" not in config["disabledExtensions"], config
        assert "@jupyter/nbgrader:formgrader" in config["disabledExtensions"]
        assert config["hubUser"] == name


def test_submissions_are_filed_under_the_hub_login_and_a_forged_one_is_not_graded(term):
    inbound = term["hub"].exchange / term["hub"].course_id / "inbound"
    for name in STUDENTS:
        entries = sorted(p.name for p in (inbound / name).iterdir())
        assert entries and all(e.startswith(f"{name}+{CHAPTER}+") for e in entries
                               if not e.startswith("alice+")), entries
    code, shown = term["forged"]
    assert code == 0, shown  # nbgrader took it...
    forged = [e.name for e in (inbound / "bob").iterdir() if e.name.startswith("alice+")]
    assert len(forged) == 1, sorted(p.name for p in (inbound / "bob").iterdir())
    # ...and the grader names it and does not grade it
    said = term["grade"][1]
    assert "claims to be alice's, but was handed in from bob's server" in said, said[-3000:]


def test_grades_csv_has_the_names_scores_and_late_flags(term):
    rows = read_grades(term["hub"].course / "grades")
    got = {name: (row["score"], row["status"], row["late"]) for name, row in rows.items()}
    assert got == {"alice": ("4", "graded", "on time"),  # alice's own, not bob's forgery
                   "bob": ("4", "graded", "on time"),  # his newest on time
                   "carol": ("4", "graded", "late"),  # her garbage time: by the record
                   "dave": ("4", "graded", "late"),  # his rewritten one is late too
                   "erin": ("0", "missing", "")}, got
    # the times make collect saw them land, a moment after nbgrader's timestamps
    for name, stamp in (("bob", term["times"]["bob"][1]), ("dave", term["times"]["dave"][1])):
        landed = parse_time(rows[name]["submitted"], "t") - parse_time(stamp, "t")
        assert datetime.timedelta(0) <= landed < AGREE, (name, rows[name]["submitted"], stamp)
    assert "its timestamp.txt: 'yesterday' is not a time, but it was last changed in the " \
        "exchange" in rows["carol"]["notes"], rows["carol"]["notes"]
    assert "late: handed in" in rows["carol"]["notes"]
    results = json.loads((term["hub"].course / "grades" / "results.json").read_text())
    assert {o["student"]: o["late"] for o in results["outcomes"]} == {
        "alice": False, "bob": False, "carol": True, "dave": True, "erin": None}


def test_a_submission_rewritten_after_the_due_date_is_late_and_a_garbage_time_stops_no_one(
        term):
    """dave's rewrite of his on-time submission (notebook and timestamp.txt) after the due
    date: make collect's record says when, so it is late (his newest, the late one, is
    graded); carol's 'yesterday' is hers alone (the class is graded)."""
    assert term["rewritten"][0] == 0 and term["garbage time"][0] == 0, term["rewritten"]
    rows = read_grades(term["hub"].course / "grades")
    assert "2 submissions; graded the one of" in rows["dave"]["notes"], rows["dave"]["notes"]
    record = json.loads((term["hub"].course / "collected" / "received.json").read_text())
    rewritten = next(datetime.datetime.fromisoformat(when) for rel, when in record.items()
                     if rel.startswith("dave/") and f"+{term['times']['dave'][0]}+" in rel)
    assert rewritten > datetime.datetime.fromisoformat(term["due"])


def test_a_student_cannot_list_the_feedback_or_write_outside_her_inbound(term):
    code, shown = term["prying"]
    said = dict(re.findall(r"^(listed|feedback|outbound|beside)=(\d+)", shown, re.M))
    assert said.keys() == {"listed", "feedback", "outbound", "beside"}, shown[-2000:]
    assert all(status != "0" for status in said.values()), shown[-2000:]
    exchange = term["hub"].exchange / term["hub"].course_id
    assert not (exchange / "x").exists() and not (exchange / "outbound" / "x").exists()


def test_the_hub_refuses_a_login_that_could_run_as_a_command(term):
    """The instructor, a hub admin, adds users in the hub's Admin page (its API): a login with
    a shell command in it is refused (the pattern), a plain one is taken."""
    teacher, api = term["teacher"], f"{term['hub'].url}/hub/api"
    hostile = teacher.call("POST", api, "/users", json={"usernames": ["eve`touch PWNED`"]})
    assert hostile.status_code == 400 and "Invalid username" in hostile.text, \
        (hostile.status_code, hostile.text[:300])
    plain = teacher.call("POST", api, "/users", json={"usernames": ["frank"]})
    assert plain.status_code == 201, (plain.status_code, plain.text[:300])
    assert teacher.call("DELETE", api, "/users/frank").status_code == 204


def test_the_gradebook_knows_the_due_date_and_formgrader_lists_the_class(term):
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{term['hub'].course / 'grader' / 'gradebook.db'}") as gb:
        late = {s.student.id: s.total_seconds_late
                for s in gb.find_assignment(CHAPTER).submissions}
        due = gb.find_assignment(CHAPTER).duedate
    assert due.replace(tzinfo=datetime.UTC) == datetime.datetime.fromisoformat(term["due"])
    assert late["carol"] > 0 and late["dave"] > 0 and late["alice"] == late["bob"] == 0, late
    listed = {s["student"]: s for s in term["submissions"]}
    assert {n: listed[n]["score"] for n in STUDENTS} == {
        "alice": 4, "bob": 4, "carol": 4, "dave": 4}, term["submissions"]


def test_each_student_fetches_her_own_feedback_and_no_one_elses(term):
    pages = term["pages"]
    for name in STUDENTS:
        assert len(pages[name]) == 1, (name, list(pages[name]))
    graded = {"alice": term["times"]["alice"][0], "bob": term["times"]["bob"][1],
              "carol": term["times"]["carol"][0], "dave": term["times"]["dave"][1]}
    for name, stamp in graded.items():
        assert list(pages[name]) == [stamp], (name, list(pages[name]))
    scores = {name: re.search(r"Score: ([\d.]+) / ([\d.]+)", next(iter(page.values())))
              for name, page in pages.items()}
    assert {n: float(m[1]) for n, m in scores.items()} == {
        "alice": 4, "bob": 4, "carol": 4, "dave": 4}
    for page in (p for by_time in pages.values() for p in by_time.values()):
        assert "BEGIN HIDDEN TESTS" not in page
    assert "released 4 feedback pages to 4 students" in term["release-feedback"][1]
    # what each server mounts as its feedback: that student's page alone
    own = term["hub"].exchange / term["hub"].course_id / OWN_FEEDBACK
    assert {name: len(list((own / name).iterdir())) for name in STUDENTS} == \
        dict.fromkeys(STUDENTS, 1)


def test_a_students_server_runs_a_chapter_within_its_limit(term):
    sizing = term["sizing"]
    limit = 3 * 2**30  # hub/jupyterhub_config.py's HUB_MEM_LIMIT default, 3G
    assert sizing["peak while chapter 01 ran on 4 ranks, MB resident"] * 2**20 < limit, sizing
    assert sizing["CPU seconds used"] > 0, sizing
