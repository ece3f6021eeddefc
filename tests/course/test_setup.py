"""`make setup` (run by `make lab`, `make check`, `make test`): the Python check comes first, and
TORCH=cpu takes the pinned torch from PyTorch's CPU index.

PyTorch's index cannot be reached from CI, so these runs use a stand-in interpreter: a script
that answers the version question and makes a venv whose python writes down every command
it is given. Everything else (make, the Makefile, helpers/scripts/install_requirements.sh) is
the real one.
"""

from __future__ import annotations

from pathlib import Path

from support.course_copy import ROOT, make

# Answers `python -c ...` (the version question) with VERSION; `python -m venv DIR` makes
# DIR/bin/python, which logs its arguments, one call per line, to DIR/calls.
FAKE_PYTHON = """#!/bin/sh
if [ "$1" = -m ] && [ "$2" = venv ]; then
    mkdir -p "$3/bin"
    printf '#!/bin/sh\\necho "$*" >> "%s/calls"\\n' "$3" > "$3/bin/python"
    chmod +x "$3/bin/python"
    exit 0
fi
echo VERSION
"""


def _fake_python(folder: Path, version: str) -> Path:
    path = folder / f"python{version}"
    path.write_text(FAKE_PYTHON.replace("VERSION", version))
    path.chmod(0o755)
    return path


def _torch_pin() -> str:
    return next(line for line in (ROOT / "requirements.txt").read_text().splitlines()
                if line.startswith("torch=="))


def test_setup_stops_before_any_download_when_python_is_older_than_3_11(tmp_path):
    venv = tmp_path / "venv"
    done = make("setup", f"PYTHON={_fake_python(tmp_path, '3.10')}", f"VENV={venv}")
    assert done.returncode != 0
    assert "Python 3.11 or newer is needed (found 3.10)" in done.stderr
    assert "Docker image" in done.stderr  # and what to do instead
    assert not venv.exists()  # stopped before making the venv, so before any pip


def test_setup_with_torch_cpu_installs_the_pinned_torch_from_the_cpu_index_first(tmp_path):
    venv = tmp_path / "venv"
    done = make("setup", f"PYTHON={_fake_python(tmp_path, '3.12')}", f"VENV={venv}",
                "TORCH=cpu")
    assert done.returncode == 0, done.stdout + done.stderr
    pip_installs = [line for line in (venv / "calls").read_text().splitlines()
                    if line.startswith("-m pip install")]
    assert pip_installs[0].endswith(
        f"--index-url https://download.pytorch.org/whl/cpu {_torch_pin()}")
    assert pip_installs[1].endswith("-r requirements.txt")


def test_setup_without_torch_option_installs_the_requirement_files_and_nothing_else(tmp_path):
    venv = tmp_path / "venv"
    done = make("setup", f"PYTHON={_fake_python(tmp_path, '3.11')}", f"VENV={venv}")
    assert done.returncode == 0, done.stdout + done.stderr
    pip_installs = [line for line in (venv / "calls").read_text().splitlines()
                    if line.startswith("-m pip install")]
    assert [call.split("--disable-pip-version-check ")[1] for call in pip_installs] == \
        ["-r requirements.txt", "-r requirements-dev.txt", "--no-deps --no-build-isolation -e ."]
