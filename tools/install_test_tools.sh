#!/bin/sh
# What tests/system/ (test_image.py, test_browser.py, test_hub.py, test_slurm.py) needs
# from the system, on Debian as root (CI runs this before `make test`): podman and its helpers,
# mmdebstrap for the stand-in base image, Chromium, Node.js with npm for the hub's proxy (make
# hub-setup), Slurm's daemons with munge, and the course's account of the Kubernetes
# Formgrader's test (test_formgrader_service.py: uid 2000). Elsewhere it says what is missing
# and leaves the machine alone: those tests then skip, each with its reason.
set -eu

PACKAGES="podman runc conmon slirp4netns uidmap netavark aardvark-dns iptables
containernetworking-plugins mmdebstrap chromium slurmctld slurmd slurm-client munge"

if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "install_test_tools.sh: not root on Debian; the image, browser, hub and Slurm tests need:" \
         $PACKAGES "nodejs npm (or a Docker daemon instead of podman)" >&2
    exit 0
fi
# uid 2000, the course's account in the instructor image built for Kubernetes (hub/formgrader.yaml),
# with a name: nbgrader asks for its user's name
if ! getent passwd 2000 >/dev/null; then
    getent group 2000 >/dev/null || groupadd --system --gid 2000 commlab-course
    useradd --system --uid 2000 --gid 2000 --no-create-home --home-dir /nonexistent \
        --shell /usr/sbin/nologin commlab-course
fi
missing=""
for package in $PACKAGES; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "ok installed" \
        || missing="$missing $package"
done
# Node.js's own packages (NodeSource's) carry npm: Debian's nodejs and npm only where none runs
if ! command -v npm >/dev/null 2>&1; then
    missing="$missing nodejs npm"
fi
if [ -z "$missing" ]; then
    exit 0
fi
echo "installing for the image, browser, hub and Slurm tests:$missing"
apt-get update -qq
# shellcheck disable=SC2086
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing \
    >/dev/null
