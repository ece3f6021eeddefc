# The course in a container: one torch (requirements.txt's pin), CUDA for NCCL when the host
# has GPUs, the student's work in a folder a host volume keeps. The same image is a JupyterHub's
# single-user image (docs/hub.md, "Teaching a class on a JupyterHub").
#
# A laptop, or any machine without an NVIDIA GPU (a Mac, Windows with WSL2, Linux): torch's CPU
# build, several GB smaller, and no --gpus:
#   docker build --build-arg TORCH=cpu --build-arg UID="$(id -u)" --build-arg GID="$(id -g)" \
#       -t commlab-course .
#   mkdir -p commlab-work
#   docker run --rm -it --shm-size=1g -p 127.0.0.1:8888:8888 \
#       -v "$PWD/commlab-work:/home/jovyan/work" commlab-course
# A host with NVIDIA GPUs, their driver and the NVIDIA Container Toolkit: PyPI's torch (CUDA),
# and the GPUs handed to the container:
#   docker build --build-arg UID="$(id -u)" --build-arg GID="$(id -g)" -t commlab-course .
#   docker run --rm -it --gpus all --shm-size=1g -p 127.0.0.1:8888:8888 \
#       -v "$PWD/commlab-work:/home/jovyan/work" commlab-course
#
# The build needs BuildKit (RUN --mount): Docker 23 or newer uses it by default; Docker 20.10
# (Debian 12's docker.io) stops with "the --mount option requires BuildKit" unless built with
# DOCKER_BUILDKIT=1 docker build ... . podman builds it as it is. Rootless podman (Fedora's
# default) maps your uid to root inside the container, so commlab-work/ is not the image
# user's: start it with podman run --userns=keep-id ... .
#
# Targets: `student` (the default, last below): the student edition (helpers/scripts/student_edition.py),
# no solutions, hidden tests, grader or gradebook; the student edition builds it too.
# `instructor`: the whole course, for grading and for the maintainers' tests.
#
# Build arguments (docs/docker.md):
#   UID, GID      the host user's ids (default 1000 and 100, a JupyterHub's); ids the base has
#                 already are reused, and UID 0 runs the container as root
#                 (helpers/scripts/image_user.sh)
#   JUPYTERHUB    the version of the hub that will start the image, when it is not
#                 requirements.txt's jupyterhub pin (jupyterhub-singleuser must match the hub's
#                 major.minor version: Zero to JupyterHub 4.4.0 runs JupyterHub 5.5.0)
#   TORCH         empty or cuda: the pin's PyPI wheel (on Linux x86-64 built for CUDA 13.0);
#                 cpu: the CPU build (from the build's pip configuration where it has it, else
#                 PyTorch's CPU index); cu126: another CUDA, from PyTorch's index
#   TORCH_INDEX   the address of that index or of a mirror of it, when it is not
#                 https://download.pytorch.org/whl/$TORCH (torch alone comes from it)
#   PYTHON_IMAGE  the base: a Debian-like image with python3 (3.11 or newer, with its venv
#                 module) first on PATH
# Build secrets, behind a PyPI mirror or a TLS-inspecting proxy (used by pip, never stored in
# the image): --secret id=pip_conf,src=<a pip.conf> --secret id=ca_bundle,src=<CA bundle, PEM>
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS runtime

# The venv lives outside the course folder, so that a volume over the course cannot hide it,
# and comes first on PATH, so that Lab terminals and torchrun use the course's torch.
ENV PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore \
    VENV=/opt/venv \
    PATH=/opt/venv/bin:$PATH \
    SHELL=/bin/bash

# make for the course's commands; tini as PID 1, to pass on signals and reap the processes that
# kernels and ranks leave; util-linux (unshare) and iproute2 (ip) for grading without network.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends make tini util-linux iproute2 \
    && rm -rf /var/lib/apt/lists/*

# The dependencies first, as root and before the user exists: editing the course does not
# reinstall torch, and neither do other ids (this layer is shared by every user's image and
# by both targets). The student uses the environment and does not change it. The same script
# as `make setup`, from requirements.txt's pins.
WORKDIR /tmp/install
ARG TORCH=""
ARG TORCH_INDEX=""
COPY requirements.txt helpers/scripts/install_requirements.sh ./
RUN --mount=type=secret,id=pip_conf --mount=type=secret,id=ca_bundle \
    TORCH="${TORCH}" TORCH_INDEX="${TORCH_INDEX}" sh install_requirements.sh

# jupyterhub-singleuser of the hub's own version, where it is not requirements.txt's pin
ARG JUPYTERHUB=""
RUN --mount=type=secret,id=pip_conf --mount=type=secret,id=ca_bundle \
    if [ -n "${JUPYTERHUB}" ]; then sh install_requirements.sh "jupyterhub==${JUPYTERHUB}"; fi

# The user is made last in each target (helpers/scripts/image_user.sh): other ids rebuild no
# set-up.
COPY helpers/scripts/image_user.sh ./

ENV WORK=/home/jovyan/work \
    LAB_FLAGS="--ip=0.0.0.0 --port=8888 --no-browser"
# Lab's terminals are login shells, whose /etc/profile sets PATH to the system's: the venv
# first again there, or a terminal's python, jupyter and torchrun are not the course's ($PATH
# is for the shell that reads the file, hence the single quotes)
# hadolint ignore=SC2016
RUN printf '%s\n' 'PATH="/opt/venv/bin:$PATH"; export PATH' > /etc/profile.d/commlab-venv.sh
EXPOSE 8888
ENTRYPOINT ["tini", "-g", "--"]


# Cut the student edition out of the whole course (with the environment's python3, whatever
# the base).
FROM runtime AS edition
COPY . /tmp/course
RUN make -C /tmp/course student-edition DEST=/tmp/edition


# The whole course: solutions, grader, tests (grading, `make test`, `make validate`).
FROM runtime AS instructor
WORKDIR /home/jovyan/course
# make setup from the files it reads, before the rest of the course and before the user: editing
# a chapter, the grader or a test rebuilds none of it, and neither do other ids. The package's
# __init__.py is all the editable install needs of it (it points Python at the folder).
# (requirements*.txt: the student edition, which ships this file too, has no requirements-dev.txt)
COPY Makefile pyproject.toml requirements*.txt LICENSE ./
COPY helpers/scripts/ helpers/scripts/
COPY helpers/jupyter/ helpers/jupyter/
COPY helpers/commlab/__init__.py helpers/commlab/
# requirements-dev.txt's test tools go into the environment too, through the same secrets
RUN --mount=type=secret,id=pip_conf --mount=type=secret,id=ca_bundle make setup
# The user's ids: give yours (--build-arg UID="$(id -u)" GID="$(id -g)") so that files in a
# mounted host folder stay yours and the container can write them.
ARG UID=1000
ARG GID=100
RUN sh /tmp/install/image_user.sh "${UID}" "${GID}"
COPY --chown=${UID}:${GID} . .
# make's stamp made newer than the files just copied, whatever times the copy gave them: the
# set-up above was made from these very files (a change to them rebuilds it), and a stamp older
# than them would have `make grade` install again, without a network, when the layer was cached
RUN touch "${VENV}/.installed"
USER ${UID}:${GID}
# COMMLAB_INSTRUCTOR_IMAGE: the grader's advice where namespaces are not allowed speaks of
# this image as the one you are in (grader/sandboxed/namespaces.py)
ENV HOME=/home/jovyan \
    COMMLAB_INSTRUCTOR_IMAGE=1
# matplotlib's font cache, in the user's home: built once here, not on the first picture
RUN python -c "import matplotlib.font_manager"
# the instructor's Lab: the course's root with nbgrader's Formgrader (`make lab` is a student's)
CMD ["make", "formgrader"]


# What students run: the student edition only, in /opt/course, outside the home that a hub
# mounts each student's volume over; owned by root, read-only for the student.
FROM runtime AS student
COPY --from=edition /tmp/edition /opt/course
WORKDIR /opt/course
RUN --mount=type=secret,id=pip_conf --mount=type=secret,id=ca_bundle make setup
# A student's Lab keeps nbgrader's Validate button and loses the instructor's panels
# (formgrader, create assignment, courses), as nbgrader's install docs advise, locked so that
# Lab's plugin manager cannot turn them on again. The Assignments panel (fetch, submit) is off
# too, but for a server with nbgrader's exchange (helpers/scripts/image_start.sh).
RUN jupyter labextension disable --level=sys_prefix @jupyter/nbgrader:formgrader \
        @jupyter/nbgrader:create-assignment @jupyter/nbgrader:course-list \
        @jupyter/nbgrader:assignment-list \
    && jupyter labextension lock --level=sys_prefix @jupyter/nbgrader:formgrader \
        @jupyter/nbgrader:create-assignment @jupyter/nbgrader:course-list \
    && jupyter server extension disable --sys-prefix nbgrader.server_extensions.formgrader \
        nbgrader.server_extensions.course_list nbgrader.server_extensions.assignment_list \
    && cp helpers/jupyter/nbgrader_config.py /opt/venv/etc/jupyter/nbgrader_config.py \
    && install -d -m 1777 /srv/nbgrader/exchange \
    && MPLCONFIGDIR=/opt/matplotlib-cache python -c "import matplotlib.font_manager"
# The user's ids, as for the instructor
ARG UID=1000
ARG GID=100
RUN sh /tmp/install/image_user.sh "${UID}" "${GID}"
USER ${UID}:${GID}
ENV HOME=/home/jovyan \
    COURSE=/opt/course
WORKDIR /home/jovyan
# Fills ~/work from /opt/course/notebooks (only what it lacks, never overwriting), then starts
# Lab there: jupyterhub-singleuser when a hub started the container, else `jupyter lab`, which
# prints its address with the token. Other commands run after the fill.
ENTRYPOINT ["tini", "-g", "--", "sh", "/opt/course/helpers/scripts/image_start.sh"]
CMD ["lab"]
