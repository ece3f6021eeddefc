#!/bin/sh
# The student image's start (its ENTRYPOINT, after tini): fill the student's work folder, then
# start what was asked for. One image serves `docker run` and a JupyterHub.
#
#   image_start.sh [lab] [ARGS...]    JupyterLab on the work folder, ARGS passed on: when a hub
#                                     started the container (JUPYTERHUB_API_TOKEN is set),
#                                     jupyterhub-singleuser; otherwise `jupyter lab` with
#                                     $LAB_FLAGS, which prints its token URL
#   image_start.sh COMMAND [ARGS...]  the work folder filled, then COMMAND (a hub's own
#                                     jupyterhub-singleuser, `make -C /opt/course check ...`)
#
# The chapters live in $COURSE/notebooks, outside the home (a hub mounts each student's volume
# over /home/jovyan); helpers/scripts/workspace.py copies into $WORK only what it lacks and never
# overwrites, as `make lab` does. NBGRADER_EXCHANGE set (a hub with nbgrader's exchange): the
# server gets nbgrader's Assignments panel (helpers/jupyter/exchange/).
set -eu

COURSE=${COURSE:-/opt/course}
WORK=${WORK:-$HOME/work}

say() { echo "commlab: $*" >&2; }

# The ranks share status arrays through /dev/shm, and NCCL moves data between GPUs through it;
# Docker's and a pod's default (64 MB) is too small for NCCL.
shm_mb=$(df -Pk /dev/shm 2>/dev/null | awk 'NR == 2 {print int($2 / 1024)}')
if [ -n "$shm_mb" ] && [ "$shm_mb" -lt 256 ]; then
    say "/dev/shm holds ${shm_mb} MB: the chapters' ranks on GPUs (NCCL) need more. Start the" \
        "container with --shm-size=1g (DockerSpawner: extra_host_config shm_size; Kubernetes:" \
        "an emptyDir of medium Memory on /dev/shm, docs/hub.md, \"Day one\")."
fi

fill() {
    python "$COURSE/helpers/scripts/workspace.py" "$COURSE/notebooks" "$WORK" || return 1
    # matplotlib's font cache, made when the image was built: a volume over the home hides it,
    # and building it again would cost the first picture a minute
    if [ -d /opt/matplotlib-cache ] && [ ! -d "$HOME/.cache/matplotlib" ]; then
        mkdir -p "$HOME/.cache" && cp -r /opt/matplotlib-cache "$HOME/.cache/matplotlib" \
            2>/dev/null || true
    fi
}

if [ -n "${NBGRADER_EXCHANGE:-}" ]; then
    JUPYTER_CONFIG_PATH="$COURSE/helpers/jupyter/exchange${JUPYTER_CONFIG_PATH:+:$JUPYTER_CONFIG_PATH}"
    export JUPYTER_CONFIG_PATH
fi

if [ "$#" -eq 0 ] || [ "$1" = lab ] || [ "${1#-}" != "$1" ]; then
    if [ "${1:-}" = lab ]; then
        shift
    fi
    fill || exit 1
    if [ -n "${JUPYTERHUB_API_TOKEN:-}" ]; then
        say "started by a JupyterHub as ${JUPYTERHUB_USER:-?}: jupyterhub-singleuser on $WORK"
        exec jupyterhub-singleuser --ServerApp.root_dir="$WORK" "$@"
    fi
    # shellcheck disable=SC2086
    exec jupyter lab --notebook-dir="$WORK" ${LAB_FLAGS:-} "$@"
fi
fill || say "the work folder $WORK was not filled (see above); going on with $1"
exec "$@"
