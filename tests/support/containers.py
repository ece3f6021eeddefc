"""The course's image built and run by a real container engine, as docs/docker.md says, for
tests/system/test_image.py and tests/system/test_browser.py.

- **Engine**: a running Docker daemon, else podman as root. podman keeps everything in the
  test's own scratch folder (``SCRATCH``): its storage (``--root``), run state (``--runroot``,
  ``--tmpdir``) and a private ``containers.conf`` (``CONTAINERS_CONF``): runc (crun 1.8 refuses
  hybrid cgroups), ulimits under the hard limits root may not raise, and containers on
  slirp4netns, so that publishing a port changes no firewall rule or interface of the host.
  Nothing under /etc changes.
- **Base**: the Dockerfile's own base (``python:3.11-slim-bookworm``) where it can be pulled;
  otherwise a stand-in made with mmdebstrap from the host's Debian mirror (Debian's python3
  3.11, nothing at /usr/local), built once and kept in the scratch storage for a week, so that
  a second run starts at once and a run a week later gets fresh packages.
- **pip**: the build gets the host's pip configuration through the documented build secrets
  (``pip_conf``, ``ca_bundle``). Where that configuration names folders of this machine
  (``file://`` indexes, find-links folders), they are served read-only on 127.0.0.1 for the
  time of the build; torch comes through ``TORCH_INDEX`` from a one-project index of the pinned
  wheel when the host has its CPU build. Builds use the host's network (``--network=host``):
  they reach what is served on 127.0.0.1, and no bridge or firewall rule is made for them.
- **Commands**: the documentation's own lines (``documented_commands``), expanded by bash as a
  user's shell would, with the few changes a test needs said in ``run_argv`` and ``build_argv``.

``STEPS`` records each step's seconds, ``SIZES`` the images' sizes and ``MEASURED`` a hub
server's memory and CPU (tests/system/test_hub.py); conftest prints them at the end of the session.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import http.server
import json
import os
import random
import re
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path

from support.waiting import until_answering

ROOT = Path(__file__).resolve().parents[2]
SCRATCH = Path(os.environ.get("COMMLAB_IMAGE_SCRATCH")
               or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
               / "commlab-course-image-test")
# The stand-in base is made again after this long, or when its recipe changes.
STAND_IN_DAYS = 7

STEPS: list[tuple[str, float]] = []
SIZES: dict[str, int] = {}
MEASURED: dict[str, float] = {}  # a student's server on the hub, while a chapter runs


@contextlib.contextmanager
def step(name: str):
    """Time ``name``; its seconds go into STEPS (printed at the end of the session)."""
    start = time.monotonic()
    try:
        yield
    finally:
        STEPS.append((name, time.monotonic() - start))


def free_port() -> int:
    """A port free on this machine for a server a test starts, chosen below the ephemeral range.

    The kernel hands out ephemeral ports to every bind of port 0 and every outgoing connection
    (the ranks' gloo meshes and stores of the tests beside, under pytest -n): a port chosen from
    that range could be handed to one of them between this choice and the server's own bind
    ("port ... is not available"). Below it, only another such choice can take it: each xdist
    worker chooses from a stretch of its own, and never the same port twice (a test often
    chooses several ports before its servers bind any).
    """
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    index = int(worker[2:]) if worker[2:].isdigit() else 0
    start = _lowest_ephemeral_port() - _PORTS_PER_WORKER * (index + 1)
    if start >= 1024:
        stretch = range(start, start + _PORTS_PER_WORKER)
        if _HANDED_OUT.issuperset(stretch):
            _HANDED_OUT.clear()  # every port given once: the first ones are long free again
        for port in random.sample(stretch, _PORTS_PER_WORKER):
            if port in _HANDED_OUT:
                continue
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", port))
                except OSError:
                    continue
                _HANDED_OUT.add(port)
                return port
    with socket.socket() as s:  # no room below the range: any port, as the kernel picks
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


_PORTS_PER_WORKER = 500
_HANDED_OUT: set[int] = set()


def _lowest_ephemeral_port() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


# --- the engine ---------------------------------------------------------------------------------

CONTAINERS_CONF = """\
# written by tests/support/containers.py for the course's image tests only
[containers]
default_ulimits = ["nofile=16384:16384", "nproc=32768:32768"]
netns = "slirp4netns"

[engine]
runtime = "runc"
tmp_dir = "{scratch}/tmp"

[network]
network_config_dir = "{scratch}/networks"
"""


# the prefix that runs a command, and what it starts, at a low CPU priority
LOW_PRIORITY = ["nice", "-n", "10"]


@dataclass
class Engine:
    name: str  # "podman" or "docker"
    argv: list[str]  # the command with its global options
    env: dict[str, str]

    def run(self, *args: str, timeout: float = 600, check: bool = True, low_priority: bool = False,
            **kwargs) -> subprocess.CompletedProcess:
        """``low_priority``: at the CPU priority of ``nice -n 10`` (podman's builds, whose
        processes inherit it), so that an image build leaves the cores to the tests beside it
        first: a test case's ranks starved by a build's pip past their 8 s limit failed the
        case (chapter 08's, once)."""
        nice = LOW_PRIORITY if low_priority else []
        done = subprocess.run([*nice, *self.argv, *args], env=self.env, capture_output=True,
                              text=True, timeout=timeout, **kwargs)
        if check and done.returncode != 0:
            raise AssertionError(f"{self.name} {shlex.join(args)} exited {done.returncode}:\n"
                                 f"{tail(done.stdout + done.stderr)}")
        return done

    def size(self, image: str) -> int:
        return int(self.run("image", "inspect", "--format", "{{.Size}}", image).stdout.strip())


def tail(text: str, lines: int = 60) -> str:
    return "\n".join(text.splitlines()[-lines:])


def _works(argv: list[str], env: dict | None = None, timeout: float = 60) -> tuple[bool, str]:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env)
    except (OSError, subprocess.TimeoutExpired) as error:
        return False, str(error)
    return done.returncode == 0, (done.stdout + done.stderr).strip()


def find_engine() -> Engine | str:
    """A container engine that can build and run here, or why there is none."""
    if shutil.which("docker") and _works(["docker", "info"], timeout=20)[0]:
        return Engine("docker", ["docker"], dict(os.environ))
    if not shutil.which("podman"):
        return ("no container engine: no Docker daemon answers and podman is not installed "
                "(Debian, as root: tools/install_test_tools.sh)")
    if os.geteuid() != 0:
        return ("podman needs root here: the image test does not set up rootless podman "
                "(subordinate ids, user namespaces); run it as root or with a Docker daemon")
    ok, said = _works(["unshare", "--mount", "--pid", "--net", "--fork", "true"])
    if not ok:
        return f"this machine allows no namespaces, so no container can run: {said}"
    for folder in ("storage", "run", "tmp", "networks"):
        (SCRATCH / folder).mkdir(parents=True, exist_ok=True)
    _forget_a_reboot()
    conf = SCRATCH / "containers.conf"
    conf.write_text(CONTAINERS_CONF.format(scratch=SCRATCH))
    env = {**os.environ, "CONTAINERS_CONF": str(conf), "TMPDIR": str(SCRATCH / "tmp")}
    engine = Engine("podman", ["podman", "--root", str(SCRATCH / "storage"),
                               "--runroot", str(SCRATCH / "run"),
                               "--tmpdir", str(SCRATCH / "tmp")], env)
    ok, said = _works([*engine.argv, "info"], env=env)
    if not ok:
        return f"podman does not start here: {tail(said, 10)}"
    return engine


def _forget_a_reboot() -> None:
    """podman's run state lives in the scratch folder, not on a tmpfs: after a reboot, drop it
    as a reboot would (it names containers that no longer run)."""
    boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    marker = SCRATCH / "run" / "boot_id"
    if marker.exists() and marker.read_text().strip() != boot:
        for folder in ("run", "tmp"):
            shutil.rmtree(SCRATCH / folder, ignore_errors=True)
            (SCRATCH / folder).mkdir()
    marker.write_text(boot)


# --- the base image ----------------------------------------------------------------------------

def dockerfile_base() -> str:
    """The Dockerfile's default base, e.g. python:3.11-slim-bookworm."""
    text = (ROOT / "Dockerfile").read_text()
    return re.search(r"^ARG PYTHON_IMAGE=(\S+)", text, re.M).group(1)


def _debian_mirror() -> str:
    """The Debian mirror this machine's apt uses."""
    for source in [Path("/etc/apt/sources.list"), *Path("/etc/apt/sources.list.d").glob("*")]:
        text = source.read_text() if source.is_file() else ""
        for match in re.finditer(r"^(?:deb\s+(?:\[[^]]*\]\s+)?(\S+)\s+bookworm\s|URIs:\s*(\S+))",
                                 text, re.M):
            url = match.group(1) or match.group(2)
            if "/debian" in url and "security" not in url:
                return url
    return "http://deb.debian.org/debian"


# What the stand-in is made of: Debian's own Python (3.11, at /usr/bin), with its venv module.
# mmdebstrap installs it with apt and one dpkg run and writes the image's tar to stdout, without
# package lists, downloaded packages, recommended packages or the usrmerge package (its hook
# merges /usr itself): as slim as the official image, for half the CPU debootstrap took, and no
# folder of the system to remove.
STAND_IN_RECIPE = ("mmdebstrap --mode=root --quiet --variant=minbase "
                   "--hook-dir=/usr/share/mmdebstrap/hooks/merged-usr "
                   "--aptopt='APT::Install-Recommends \"false\"' "
                   "--include=python3,python3-venv,ca-certificates,netbase,tzdata bookworm -")


def _stand_in_name() -> str:
    return "localhost/commlab-stand-in-" + dockerfile_base().replace(":", "-").replace("/", "-")


def _reference(image: str) -> str:
    """A short Docker Hub name in full (podman asks which registry otherwise)."""
    first = image.split("/")[0]
    if "/" in image and ("." in first or ":" in first or first == "localhost"):
        return image
    return f"docker.io/{image if '/' in image else 'library/' + image}"


def base_image(engine: Engine) -> tuple[str | None, str]:
    """(the PYTHON_IMAGE to build from, None for the Dockerfile's own; what it is)."""
    official = _reference(dockerfile_base())
    if engine.run("image", "inspect", official, check=False).returncode == 0:
        return None, f"{official} (already here)"
    pulled = engine.run("pull", official, check=False, timeout=900)
    if pulled.returncode == 0:
        return None, f"{official} (pulled)"
    name = _stand_in_name()
    recipe = hashlib.sha256(STAND_IN_RECIPE.encode()).hexdigest()[:16]
    found = engine.run("image", "inspect", "--format", "{{json .Config.Labels}} {{.Created}}",
                       name, check=False)
    if found.returncode == 0:
        labels, _, created = found.stdout.strip().partition(" ")
        made = (json.loads(labels) or {}).get("commlab.made", "0")
        fresh = time.time() - float(made) < STAND_IN_DAYS * 86400
        if (json.loads(labels) or {}).get("commlab.recipe") == recipe and fresh:
            return name, f"{name}, the Debian stand-in made earlier (kept {STAND_IN_DAYS} days)"
    if os.geteuid() != 0 or not shutil.which("mmdebstrap"):
        raise AssertionError(f"{official} cannot be pulled ({tail(pulled.stderr, 3)}) and "
                             "mmdebstrap (as root) is missing to make a stand-in: "
                             "tools/install_test_tools.sh installs it")
    # at a low CPU priority, as the builds (Engine.run); what it says goes to a file, which
    # nothing has to read while the import reads the tar
    with tempfile.TemporaryFile() as said:
        made = subprocess.Popen([*LOW_PRIORITY, *shlex.split(STAND_IN_RECIPE), _debian_mirror()],
                                stdout=subprocess.PIPE, stderr=said)
        imported = subprocess.run(
            [*engine.argv, "import", "--change", "ENV LANG=C.UTF-8", "--change",
             'CMD ["python3"]', "--change", f"LABEL commlab.recipe={recipe}",
             "--change", f"LABEL commlab.made={int(time.time())}", "-", name],
            stdin=made.stdout, env=engine.env, capture_output=True, text=True, timeout=1200)
        made.stdout.close()
        if made.wait(timeout=60) != 0:
            engine.run("rmi", "--force", name, check=False)  # the import of a tar cut short
            said.seek(0)
            text = said.read().decode(errors="replace")
            raise AssertionError(f"mmdebstrap failed:\n{tail(text)}")
    if imported.returncode != 0:
        raise AssertionError(f"importing the stand-in failed:\n{imported.stderr}")
    return name, f"{name}, a Debian stand-in made now ({official} cannot be pulled here)"


# --- pip for the build -------------------------------------------------------------------------

def _host_pip_settings() -> dict[str, list[str]]:
    """The host's pip settings that matter to a build: its configuration files, then PIP_*."""
    listed = subprocess.run([sys.executable, "-m", "pip", "config", "list"],
                            capture_output=True, text=True).stdout
    settings: dict[str, list[str]] = {}
    for line in listed.splitlines():
        key, _, value = line.partition("=")
        section, _, name = key.partition(".")
        if section in ("global", "install", "download") and value:
            settings[name] = value.strip().strip("'\"").replace("\\n", "\n").split()
    for key, value in os.environ.items():
        if key.startswith("PIP_") and key not in ("PIP_CONFIG_FILE",):
            settings[key[4:].lower().replace("_", "-")] = value.split()
    return settings


def _local_folder(location: str) -> Path | None:
    if location.startswith("file://"):
        return Path(urllib.parse.unquote(urllib.parse.urlparse(location).path))
    if "://" not in location:
        return Path(location)
    return None


SERVED_PORT = 47613


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


@dataclass
class PipForBuild:
    """The host's pip configuration and CA bundle as docs/docker.md's build secrets; folders of
    this machine served on 127.0.0.1 while the build needs them."""

    folder: Path
    flags: list[str] = field(default_factory=list)
    said: list[str] = field(default_factory=list)
    server: http.server.ThreadingHTTPServer | None = None

    def start(self) -> PipForBuild:
        self.folder.mkdir(parents=True, exist_ok=True)
        served = self.folder / "served"
        shutil.rmtree(served, ignore_errors=True)
        served.mkdir()
        handler = functools.partial(_Quiet, directory=str(served))
        try:  # the same address on every run: TORCH_INDEX is part of the build's cache key
            self.server = http.server.ThreadingHTTPServer(("127.0.0.1", SERVED_PORT), handler)
        except OSError:
            self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        url = f"http://127.0.0.1:{self.server.server_address[1]}"
        settings = _host_pip_settings()

        def serve(location: str, index: bool) -> str:
            local = _local_folder(location)
            if local is None:
                return location
            link = served / str(len(list(served.iterdir())))
            if index:  # with its parent: a page may link to ../../files/<wheel>
                link.symlink_to(local.resolve().parent)
                return f"{url}/{link.name}/{local.resolve().name}/"
            link.symlink_to(local)
            return f"{url}/{link.name}/"

        lines = ["[global]"]
        for key in ("index-url", "extra-index-url", "find-links", "trusted-host", "proxy",
                    "timeout", "default-timeout", "retries"):
            if key in settings:
                values = [serve(v, key.endswith("url")) if key.endswith(("url", "links"))
                          else v for v in settings[key]]
                lines.append(f"{key} = {' '.join(values)}")
        (self.folder / "pip.conf").write_text("\n".join(lines) + "\n")
        self.flags = ["--network=host", "--secret", f"id=pip_conf,src={self.folder / 'pip.conf'}"]
        cert = (settings.get("cert") or [None])[0]
        if cert and Path(cert).is_file():
            self.flags += ["--secret", f"id=ca_bundle,src={cert}"]
        self.said.append(f"pip configuration: {', '.join(lines[1:]) or 'none'}; "
                         f"CA bundle: {cert or 'pip’s own'}")
        self.flags += self._torch(settings, served, url)
        return self

    def _torch(self, settings: dict, served: Path, url: str) -> list[str]:
        """TORCH_INDEX: a one-project index of the pinned torch's CPU wheel where the host has
        it (as this machine's pip does), else TORCH=cpu (PyTorch's CPU index)."""
        if "COMMLAB_IMAGE_TORCH" in os.environ:
            return ["--build-arg", f"TORCH={os.environ['COMMLAB_IMAGE_TORCH']}"]
        pin = next(line for line in (ROOT / "requirements.txt").read_text().splitlines()
                   if line.startswith("torch=="))
        version = pin.split("==")[1]
        tag = f"cp{sys.version_info.major}{sys.version_info.minor}"
        for location in settings.get("find-links", []):
            local = _local_folder(location)
            wheels = sorted(local.glob(f"torch-{version}+cpu-{tag}-*linux*x86_64.whl")) \
                if local and local.is_dir() else []
            if wheels:
                project = served / "torch-index" / "torch"
                project.mkdir(parents=True)
                (project / wheels[0].name).symlink_to(wheels[0])
                quoted = urllib.parse.quote(wheels[0].name)
                (project / "index.html").write_text(
                    f'<html><body><a href="{quoted}">{wheels[0].name}</a></body></html>\n')
                self.said.append(f"torch: {wheels[0]} through TORCH_INDEX")
                return ["--build-arg", f"TORCH_INDEX={url}/torch-index/"]
        self.said.append("torch: TORCH=cpu (PyTorch's CPU index)")
        return ["--build-arg", "TORCH=cpu"]

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()


# --- the documented commands ------------------------------------------------------------------

# Where the container commands are written: the student's (docs/docker.md), the instructor's
# grading without namespaces (docs/security.md), a class's hub (docs/hub.md)
DOCUMENTED = ("docs/docker.md", "docs/security.md", "docs/hub.md")


def documented_commands() -> dict[str, str]:
    """The documentation's container commands, continuation lines joined: ``build`` and ``run``
    (the student's), ``instructor build`` and ``grade`` (the instructor's), ``hub build`` (the
    image a class's JupyterHub starts)."""
    text = "\n".join((ROOT / name).read_text() for name in DOCUMENTED)
    blocks = re.findall(r"```bash\n(.*?)```", text, re.S)
    lines = [line.strip() for block in blocks
             for line in re.sub(r"\\\n\s*", "", block).splitlines()]
    found: dict[str, str] = {}
    for line in lines:
        if line.startswith("docker build") and "commlab-hub" in line:
            found.setdefault("hub build", line)
        elif line.startswith("docker build") and "--target instructor" in line:
            found.setdefault("instructor build", line)
        elif line.startswith("docker build") and "--target" not in line and "--secret" not in line:
            found.setdefault("build", line)
        elif line.startswith("docker run") and "make grade" in line:
            found.setdefault("grade", line)
        elif line.startswith("docker run") and "commlab-course" in line:
            found.setdefault("run", line)
    missing = {"build", "run", "instructor build", "grade", "hub build"} - set(found)
    assert not missing, (f"{', '.join(DOCUMENTED)} show no docker command for: "
                         f"{', '.join(sorted(missing))}")
    return found


def expand(command: str, cwd: Path, ids: tuple[int, int] | None = None) -> list[str]:
    """``command`` (a documented line, ``docker`` first) as bash would pass it on: quotes,
    ``$PWD`` and ``$(id -u)`` expanded in ``cwd``. ``ids``: what ``id -u``/``id -g`` answer, as
    for a host user with those ids."""
    words = shlex.split(command, comments=True)
    assert words[0] == "docker", command
    env = dict(os.environ)
    with tempfile.TemporaryDirectory() as fake:
        if ids is not None:
            script = Path(fake, "id")
            script.write_text(f'#!/bin/sh\ncase "$1" in -u) echo {ids[0]};; '
                              f'-g) echo {ids[1]};; *) exec /usr/bin/id "$@";; esac\n')
            script.chmod(0o755)
            env["PATH"] = f"{fake}:{env['PATH']}"
        rest = command.split(None, 1)[1]
        done = subprocess.run(["bash", "-c", f"printf '%s\\0' {rest}"], cwd=cwd, env=env,
                              capture_output=True, text=True, check=True)
    return done.stdout.split("\0")[:-1]


def dockerfile_header_commands() -> list[str]:
    """The docker commands of the Dockerfile's opening comment, continuation lines joined."""
    header = []
    for line in (ROOT / "Dockerfile").read_text().splitlines():
        if not line.startswith("#"):
            break
        header.append(line[1:].strip())
    joined = re.sub(r"\\\n\s*", "", "\n".join(header))
    return [line for line in joined.splitlines() if line.startswith("docker ")]


def build_argv(command: str, extra: list[str], ids: tuple[int, int] | None = None,
               rename: dict[str, str] | None = None) -> list[str]:
    """A documented build line with the test's ``extra`` flags after ``build`` (and its image
    names changed as ``rename`` says)."""
    words = [(rename or {}).get(w, w) for w in expand(command, ROOT, ids)]
    assert words[0] == "build" and words[-1] == ".", command
    return [words[0], *extra, *words[1:]]


def run_argv(command: str, cwd: Path, port: int | None, name: str,
             ids: tuple[int, int] | None = None,
             rename: dict[str, str] | None = None) -> list[str]:
    """A documented run line as the test runs it: in the background (``-d`` for ``-it``), named,
    without ``--gpus all`` (no GPU here; podman has no such flag), on a free host port."""
    words = [(rename or {}).get(w, w) for w in expand(command, cwd, ids)]
    assert words[0] == "run", command
    out = [words[0], "--name", name]
    skip = 0
    for i, word in enumerate(words[1:], 1):
        if skip:
            skip -= 1
            continue
        if word == "--gpus":
            skip = 1
        elif word == "-it":
            out.append("-d")
        elif word == "-p" and port is not None:
            out += ["-p", re.sub(r":8888:", f":{port}:", words[i + 1])]
            skip = 1
        else:
            out.append(word)
    return out


# --- Lab in a container ------------------------------------------------------------------------

TOKEN_URL = re.compile(r"http://127\.0\.0\.1:8888/lab\?token=([0-9a-f]+)")


@dataclass
class LabContainer:
    """The student image's Lab, started with docs/docker.md's run line on a host folder."""

    engine: Engine
    run_command: str
    folder: Path  # where the documented commands run ($PWD)
    ids: tuple[int, int] | None = None
    rename: dict[str, str] | None = None
    port: int = 0
    name: str = ""
    token: str = ""

    def start(self, timeout: float = 180) -> LabContainer:
        self.port = free_port()
        self.name = f"commlab-lab-test-{os.getpid()}-{self.port}"
        argv = run_argv(self.run_command, self.folder, self.port, self.name, self.ids,
                        self.rename)
        self.engine.run(*argv)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            logs = self.logs()
            found = TOKEN_URL.search(logs)
            if found:
                self.token = found.group(1)
                url = f"{self.base_url}/api/status?token={self.token}"
                if until_answering(url, deadline - time.monotonic()) is None:
                    raise AssertionError(f"Lab printed its token URL but never answered at "
                                         f"{self.base_url}:\n{self.logs()}")
                return self
            if self.engine.run("container", "inspect", self.name, check=False).returncode:
                break  # it stopped
            time.sleep(0.5)
        raise AssertionError(f"Lab printed no token URL within {timeout:.0f} s:\n{self.logs()}")

    def logs(self) -> str:
        done = self.engine.run("logs", self.name, check=False)
        return done.stdout + done.stderr

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def exec(self, *argv: str, timeout: float = 600) -> subprocess.CompletedProcess:
        return self.engine.run("exec", self.name, *argv, check=False, timeout=timeout)

    def stop(self) -> None:
        self.engine.run("stop", "--time", "10", self.name, check=False, timeout=120)
        self.engine.run("rm", "--force", self.name, check=False, timeout=120)
