"""`make setup` (run by `make lab`, `make check`, `make test`): the Python check comes first;
TORCH=auto takes torch's CPU build on Linux without an NVIDIA GPU and PyPI's with one, and says
so; TORCH=cpu takes the pinned torch from pip's own configuration or PyTorch's CPU index; .venv
keeps the build it was made with, and a make that asks for another stops and says what to do.

PyTorch's index cannot be reached from CI, so these runs use a stand-in interpreter: a script
that answers the version question and makes a venv whose python writes down every command
it is given (and fails the pip installs that name $FAKE_PIP_LACKS, as a pip that does not find
a package). Everything else (make, the Makefile, helpers/scripts/install_requirements.sh and
torch_build.sh) is the real one.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from support.course_copy import ROOT, make, tracked_copy

# Answers `python -c ...` (the version question) with VERSION; `python -m venv DIR` makes
# DIR/bin/python, which logs its arguments, one call per line, to DIR/calls.
FAKE_PYTHON = """#!/bin/sh
if [ "$1" = -m ] && [ "$2" = venv ]; then
    mkdir -p "$3/bin"
    printf '#!/bin/sh\\necho "$*" >> "%s/calls"\\n' "$3" > "$3/bin/python"
    printf 'case "$*" in *"${FAKE_PIP_LACKS:-@nothing@}"*) exit 1 ;; esac\\n' >> "$3/bin/python"
    chmod +x "$3/bin/python"
    exit 0
fi
echo VERSION
"""

CPU_INDEX = "https://download.pytorch.org/whl/cpu"


def _fake_python(folder: Path, version: str = "3.11") -> Path:
    path = folder / f"python{version}"
    path.write_text(FAKE_PYTHON.replace("VERSION", version))
    path.chmod(0o755)
    return path


def _torch_pin() -> str:
    return next(line for line in (ROOT / "requirements.txt").read_text().splitlines()
                if line.startswith("torch=="))


def _pip_installs(venv: Path) -> list[str]:
    """What each pip install was asked, after pip's own options."""
    return [line.split("--disable-pip-version-check ")[1]
            for line in (venv / "calls").read_text().splitlines()
            if line.startswith("-m pip install")]


def _pip_pin() -> str:
    """The pip that install_requirements.sh installs before anything else."""
    script = (ROOT / "helpers" / "scripts" / "install_requirements.sh").read_text()
    return next(line.split("=", 1)[1] for line in script.splitlines()
                if line.startswith("PIP_PIN="))


PIP = _pip_pin()
REQUIREMENT_FILES = ["-r requirements.txt -r requirements-dev.txt",
                     "--no-deps --no-build-isolation -e ."]


def _machine_has_an_nvidia_gpu() -> bool:
    return bool(shutil.which("nvidia-smi")) or Path("/proc/driver/nvidia/version").exists()


def test_setup_stops_before_any_download_when_python_is_older_than_3_11(tmp_path):
    venv = tmp_path / "venv"
    done = make("setup", f"PYTHON={_fake_python(tmp_path, '3.10')}", f"VENV={venv}")
    assert done.returncode != 0
    assert "Python 3.11 or newer is needed (found 3.10)" in done.stderr
    assert "Docker image" in done.stderr  # and what to do instead
    assert not venv.exists()  # stopped before making the venv, so before any pip


def test_torch_cpu_takes_the_cpu_build_that_pips_own_configuration_offers(tmp_path):
    # a wheelhouse, a mirror or a cache that has torch==X+cpu: PyTorch's index is never asked
    venv = tmp_path / "venv"
    done = make("setup", f"PYTHON={_fake_python(tmp_path, '3.12')}", f"VENV={venv}",
                "TORCH=cpu")
    assert done.returncode == 0, done.stdout + done.stderr
    assert _pip_installs(venv) == [PIP, f"--no-deps {_torch_pin()}+cpu", *REQUIREMENT_FILES]


def test_torch_cpu_installs_the_pinned_torch_from_the_cpu_index_where_pip_lacks_it(
        tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_PIP_LACKS", "+cpu")
    venv = tmp_path / "venv"
    done = make("setup", f"PYTHON={_fake_python(tmp_path, '3.12')}", f"VENV={venv}",
                "TORCH=cpu")
    assert done.returncode == 0, done.stdout + done.stderr
    assert _pip_installs(venv) == [PIP, f"--no-deps {_torch_pin()}+cpu",
                                   f"--no-deps --index-url {CPU_INDEX} {_torch_pin()}",
                                   *REQUIREMENT_FILES]
    assert (venv / ".installed").read_text() == "cpu\n"


def test_setup_goes_on_with_the_venvs_own_pip_where_the_pinned_one_cant_be_had(
        tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_PIP_LACKS", PIP)  # a mirror without it
    venv = tmp_path / "venv"
    done = make("setup", f"PYTHON={_fake_python(tmp_path, '3.12')}", f"VENV={venv}",
                "TORCH=cuda")
    assert done.returncode == 0, done.stdout + done.stderr
    assert _pip_installs(venv) == [PIP, *REQUIREMENT_FILES]
    assert f"could not install {PIP}: installing with" in done.stderr


@pytest.mark.parametrize("asked", ["TORCH=", "TORCH=cuda"])
def test_torch_empty_or_cuda_installs_pypis_torch_through_the_requirement_files(tmp_path, asked):
    venv = tmp_path / "venv"
    done = make("setup", f"PYTHON={_fake_python(tmp_path)}", f"VENV={venv}", asked)
    assert done.returncode == 0, done.stdout + done.stderr
    assert _pip_installs(venv) == [PIP, *REQUIREMENT_FILES]
    assert (venv / ".installed").read_text() == "cuda\n"
    shown = 'TORCH=""' if asked == "TORCH=" else asked
    assert f"make: PyPI's torch (the CUDA build on Linux x86-64), as {shown} asks." in done.stderr


@pytest.mark.skipif(_machine_has_an_nvidia_gpu(), reason="this machine has an NVIDIA GPU")
def test_auto_takes_the_cpu_build_without_an_nvidia_gpu_and_says_why_in_one_line(tmp_path):
    venv = tmp_path / "venv"
    done = make("setup", f"PYTHON={_fake_python(tmp_path)}", f"VENV={venv}")
    assert done.returncode == 0, done.stdout + done.stderr
    assert _pip_installs(venv)[:2] == [PIP, f"--no-deps {_torch_pin()}+cpu"]
    assert (venv / ".installed").read_text() == "cpu\n"
    said = [line for line in done.stderr.splitlines() if line.startswith("make: torch's")]
    assert said == ["make: torch's CPU build: TORCH=auto found no NVIDIA "
                    "GPU (no nvidia-smi, no /proc/driver/nvidia/version). For PyPI's torch "
                    "(the CUDA build on Linux x86-64): make clean, then make setup TORCH=cuda"]


def test_auto_takes_pypis_build_where_nvidia_smi_is_found(tmp_path, monkeypatch):
    tools = tmp_path / "tools"
    tools.mkdir()
    (tools / "nvidia-smi").write_text("#!/bin/sh\nexit 0\n")
    (tools / "nvidia-smi").chmod(0o755)
    monkeypatch.setenv("PATH", f"{tools}:{Path('/usr/bin')}:{Path('/bin')}")
    venv = tmp_path / "venv"
    done = make("check", "CHAPTER=01", f"PYTHON={_fake_python(tmp_path)}", f"VENV={venv}")
    assert done.returncode == 0, done.stdout + done.stderr
    assert _pip_installs(venv) == [PIP, *REQUIREMENT_FILES]
    assert (venv / ".installed").read_text() == "cuda\n"
    assert "make: PyPI's torch (the CUDA build on Linux x86-64): TORCH=auto found an NVIDIA GPU " \
        "(nvidia-smi). For torch's CPU build: make clean, then make check " \
        "TORCH=cpu" in done.stderr


def test_a_later_make_that_asks_for_another_build_stops_and_says_to_make_clean(tmp_path):
    venv = tmp_path / "venv"
    python = _fake_python(tmp_path)
    assert make("setup", f"PYTHON={python}", f"VENV={venv}", "TORCH=cuda").returncode == 0
    made = (venv / "calls").read_text()

    done = make("setup", f"PYTHON={python}", f"VENV={venv}", "TORCH=cpu")
    assert done.returncode == 2
    assert "Nothing to be done" not in done.stdout + done.stderr
    assert (f"make: {venv} holds PyPI's torch (the CUDA build on Linux x86-64), and TORCH=cpu "
            "asks for torch's CPU build. Nothing was installed or "
            f"started. To switch, make {venv} again: make clean, then make setup TORCH=cpu"
            ) in done.stderr
    assert (venv / "calls").read_text() == made  # nothing installed
    assert (venv / ".installed").read_text() == "cuda\n"

    # without TORCH (auto), make goes on with the build .venv holds, whatever the machine
    again = make("setup", f"PYTHON={python}", f"VENV={venv}")
    assert again.returncode == 0, again.stderr
    assert (venv / "calls").read_text() == made


def test_an_environment_made_before_the_stamp_recorded_its_build_is_known_by_its_torch(
        tmp_path):
    venv = tmp_path / "venv"
    (venv / "lib" / "python3.11" / "site-packages" / "torch-2.13.0.dist-info").mkdir(
        parents=True)
    (venv / ".installed").touch()  # an empty stamp, newer than the pins: up to date
    done = make("setup", f"VENV={venv}", "TORCH=cpu")
    assert done.returncode == 2
    assert "holds PyPI's torch" in done.stderr and "make clean" in done.stderr
    assert make("setup", f"VENV={venv}", "TORCH=cuda").returncode == 0


@pytest.fixture
def course(tmp_path) -> Path:
    return tracked_copy(tmp_path / "course")


def test_make_lab_asking_for_another_build_starts_nothing_and_make_clean_switches(
        course, tmp_path):
    python = _fake_python(tmp_path)
    venv = course / ".venv"
    assert make("setup", f"PYTHON={python}", cwd=course).returncode == 0
    held = "cuda" if _machine_has_an_nvidia_gpu() else "cpu"  # TORCH=auto's choice
    assert (venv / ".installed").read_text() == f"{held}\n"
    other = "cpu" if held == "cuda" else "cuda"

    refused = make("lab", f"PYTHON={python}", f"TORCH={other}", cwd=course)
    assert refused.returncode == 2
    assert f"make clean, then make lab TORCH={other}" in refused.stderr
    assert not (course / "work").exists()  # stopped before the workspace and Lab

    switched = make("clean", "setup", f"PYTHON={python}", f"TORCH={other}", cwd=course)
    assert switched.returncode == 0, switched.stdout + switched.stderr
    assert (venv / ".installed").read_text() == f"{other}\n"
    first = _pip_installs(venv)[1]
    assert first.endswith("+cpu") if other == "cpu" else first.startswith("-r requirements.txt")


@pytest.mark.parametrize("version, stops", [("v12.22.9", True), ("v18.19.1", False),
                                            (None, True)])
def test_hub_setup_stops_before_any_download_when_node_is_older_than_18(tmp_path, version,
                                                                         stops):
    # Ubuntu 22.04's apt nodejs is 12, and the hub's proxy (configurable-http-proxy 5) needs 18
    stand_ins = tmp_path / "bin"
    stand_ins.mkdir()
    tools = {"npm": "exit 0", "node": f"echo {version}" if version else "exit 127"}
    for name, body in tools.items():
        (stand_ins / name).write_text(f"#!/bin/sh\n{body}\n")
        (stand_ins / name).chmod(0o755)
    venv = tmp_path / "hub-venv"
    done = make("hub-setup", f"HUB_VENV={venv}", f"PYTHON={_fake_python(tmp_path)}",
                path_first=stand_ins)
    if stops:
        assert done.returncode == 2, done.stdout + done.stderr
        assert (f"Node.js 18 or newer for the hub's proxy, found {version or 'none'}. Ubuntu "
                "22.04's own is 12") in done.stdout
        assert not venv.exists()
    else:
        assert "Node.js 18 or newer" not in done.stdout
        assert (venv / "bin" / "python").exists()  # on to the hub's venv (the stand-in's)
        # pip itself first, the pin the course's venv gets, then the hub's pins
        assert _pip_installs(venv) == [_pip_pin(), "-r hub/requirements.txt"]
