#!/bin/sh
# Create the course's virtual environment and install requirements.txt's exact pins into it,
# and requirements-dev.txt's (the maintainers' test tools) where that file exists.
# Shared by `make setup` and the Dockerfile, so a laptop and the image install the same way.
#
#   PYTHON=python3.11 VENV=.venv TORCH=cpu sh helpers/scripts/install_requirements.sh   (run where
#   requirements.txt is)
#   sh helpers/scripts/install_requirements.sh jupyterhub==5.5.0   (those packages only, into
#   the environment made before: the image's JUPYTERHUB build argument)
#
# PYTHON  the interpreter that creates VENV (3.11 or newer), when VENV does not exist yet
# VENV    the environment's folder (default .venv)
# TORCH   a PyTorch wheel index: cpu (no CUDA download), cu130, ...; empty or cuda: the torch
#         wheel PyPI gives (the CUDA build on Linux x86-64). make's TORCH=auto is chosen before
#         this script runs (helpers/scripts/torch_build.sh)
# TORCH_INDEX  the full index address of a PyTorch wheel index or a mirror of one, when it is
#         not https://download.pytorch.org/whl/$TORCH (only torch comes from it)
#
# In an image build, a pip configuration and a CA bundle given as the build secrets pip_conf
# and ca_bundle (docs/docker.md) are used as pip's (PIP_CONFIG_FILE, PIP_CERT); secrets are
# never stored in the image.
set -eu

PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv}
TORCH=${TORCH:-}
case "$TORCH" in
    cuda) TORCH= ;;
    auto)
        echo "TORCH=auto is make's (it looks for an NVIDIA GPU first): give this script the build," \
             "TORCH=cpu, TORCH=cuda (PyPI's) or an index name such as cu126" >&2
        exit 2 ;;
esac
MINIMUM=3.11

# The pins (numpy, matplotlib, ipykernel, nbgrader) need 3.11: say so before pip downloads
# anything and fails with "No matching distribution".
if [ -x "$VENV/bin/python" ]; then
    interpreter="$VENV/bin/python"
    advice="$VENV was made with an older Python: remove it (make clean) and run make again"
else
    interpreter=$PYTHON
    advice="install it (python.org, your package manager, pyenv or 'uv python install 3.11') \
and run make PYTHON=python3.11 ..., or use the Docker image (docs/docker.md)"
fi
found=$("$interpreter" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null) || {
    echo "Python $MINIMUM or newer is needed, and '$interpreter' could not be run; $advice" >&2
    exit 1
}
major=${found%%.*}
minor=${found#*.}
if [ "$major" -lt 3 ] || { [ "$major" -eq 3 ] && [ "$minor" -lt 11 ]; }; then
    echo "Python $MINIMUM or newer is needed (found $found); $advice" >&2
    exit 1
fi

if [ ! -x "$VENV/bin/python" ]; then
    new_folder=$([ -e "$VENV" ] || echo yes)
    "$PYTHON" -m venv "$VENV" || {
        # a venv without pip is left behind when ensurepip is missing: do not keep it (only
        # ever a folder made here: the image's /opt/venv, say, exists beforehand)
        if [ "$new_folder" = yes ]; then rm -rf "$VENV"; fi
        echo "could not create $VENV with $PYTHON: on Debian or Ubuntu install the venv module \
(sudo apt install python$found-venv) and run make again" >&2
        exit 1
    }
fi

if [ -f /run/secrets/pip_conf ]; then
    export PIP_CONFIG_FILE=/run/secrets/pip_conf
fi
if [ -f /run/secrets/ca_bundle ]; then
    export PIP_CERT=/run/secrets/ca_bundle
fi

pip_install() {
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "$@"
}
# rfc3987-syntax comes with Jupyter's event schemas (jsonschema[format-nongpl]), for a check of
# "iri" strings nothing here asks for, and builds some thirty grammars when jsonschema is first
# imported: 1.7 s of CPU in every process that reads a notebook (each Validate, make check, Lab
# start and grading run). Without it jsonschema leaves that format unchecked; pip check agrees.
drop_slow_imports() {
    if "$VENV/bin/python" -m pip show --quiet rfc3987-syntax >/dev/null 2>&1; then
        "$VENV/bin/python" -m pip uninstall --quiet --yes rfc3987-syntax
    fi
}
if [ "$#" -gt 0 ]; then
    pip_install "$@"
    drop_slow_imports
    exit 0
fi
# pip itself first: the pip a new venv brings (23.2 with Python 3.11) spends most of an install
# matching every file of every project's index page against the machine's tags, which a newer
# one does several times faster (the whole install: a quarter less time). Where it can't be had
# (a mirror without it), the venv's own pip does the rest.
PIP_PIN=pip==26.3
pip_install "$PIP_PIN" ||
    echo "could not install $PIP_PIN: installing with $("$VENV/bin/python" -m pip --version)" >&2
if [ -n "$TORCH" ] || [ -n "${TORCH_INDEX:-}" ]; then
    # torch alone from PyTorch's own index (e.g. the CPU build), without its dependencies, so
    # that a mirror holding torch alone will do; the rest from PyPI, where requirements.txt's
    # torch==X then finds X+cpu already installed and adds what it needs
    index=${TORCH_INDEX:-https://download.pytorch.org/whl/$TORCH}
    torch_pin=$(grep -E '^torch==' requirements.txt)
    # ... unless pip's own configuration (a wheelhouse, a mirror, a cache of wheels) already
    # offers that build (torch==X+cpu): then PyTorch's index is never asked, which a machine
    # behind a proxy may not reach at all (pip retries for a while before it gives up)
    if [ -n "$TORCH" ] && [ -z "${TORCH_INDEX:-}" ] &&
        pip_install --no-deps "$torch_pin+$TORCH" >/dev/null 2>&1; then
        :
    else
        pip_install --no-deps --index-url "$index" "$torch_pin"
    fi
fi
if [ -f requirements-dev.txt ]; then
    pip_install -r requirements.txt -r requirements-dev.txt  # one resolution for both
else
    pip_install -r requirements.txt
fi
drop_slow_imports
