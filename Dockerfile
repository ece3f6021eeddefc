# The course in a container: one torch (requirements.txt's pin), CUDA for NCCL when the host
# has GPUs, the student's work in a folder a host volume keeps.
#
#   docker build --build-arg UID="$(id -u)" --build-arg GID="$(id -g)" -t commlab-course .
#   mkdir -p commlab-work
#   docker run --rm -it --gpus all --shm-size=1g -p 127.0.0.1:8888:8888 \
#       -v "$PWD/commlab-work:/home/student/course/work" commlab-course
#
# Targets: `student` (the default, last below): the student edition (helpers/scripts/student_edition.py),
# no solutions, hidden tests, grader or gradebook. `instructor`: the whole course, for grading
# and for the maintainers' tests.
#
# Python comes from a slim image and torch from its pinned wheel alone, which brings its own CUDA
# libraries (the pin's PyPI wheel on Linux x86-64 is built for CUDA 13.0; --build-arg TORCH=cpu
# gives the CPU build, TORCH=cu126 another CUDA from PyTorch's index).
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS runtime

# The venv lives outside the course folder, so that a volume over the course cannot hide it,
# and comes first on PATH, so that Lab terminals and torchrun use the course's torch.
ENV PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    VENV=/opt/venv \
    PATH=/opt/venv/bin:$PATH \
    SHELL=/bin/bash

# make for the course's commands; tini as PID 1, to pass on signals and reap the processes that
# kernels and ranks leave; util-linux (unshare) and iproute2 (ip) for grading without network.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends make tini util-linux iproute2 \
    && rm -rf /var/lib/apt/lists/*

# The user's ids: give yours (--build-arg UID="$(id -u)" GID="$(id -g)") so that files in a
# mounted host folder stay yours and the container can write them.
ARG UID=1000
ARG GID=1000
RUN groupadd --gid "${GID}" student \
    && useradd --create-home --uid "${UID}" --gid "${GID}" student \
    && install -d -o student -g student /opt/venv /home/student/course /home/student/course/work

# The dependencies alone first: editing the course does not reinstall torch. The same script
# as `make setup`, from requirements.txt's pins.
USER ${UID}:${GID}
WORKDIR /tmp/install
ARG TORCH=""
COPY --chown=student:student requirements.txt helpers/scripts/install_requirements.sh ./
RUN TORCH="${TORCH}" sh install_requirements.sh
WORKDIR /home/student/course

ENV WORK=/home/student/course/work \
    LAB_FLAGS="--ip=0.0.0.0 --port=8888 --no-browser"
EXPOSE 8888
ENTRYPOINT ["tini", "-g", "--"]
# Fills work/ from notebooks/ (only what work/ lacks, never overwriting) and starts Lab on it;
# Lab prints its address with the token.
CMD ["make", "lab"]


# Cut the student edition out of the whole course.
FROM runtime AS edition
COPY --chown=student:student . /tmp/course
RUN make -C /tmp/course student-edition DEST=/tmp/edition PYTHON=/usr/local/bin/python3


# The whole course: solutions, grader, tests (grading, `make test`, `make validate`).
FROM runtime AS instructor
COPY --chown=student:student . .
RUN make setup


# What students run: the student edition only.
FROM runtime AS student
COPY --from=edition --chown=student:student /tmp/edition .
RUN make setup
# A student's Lab keeps nbgrader's Validate button and loses the instructor's panels
# (formgrader, create assignment, courses, assignment list), as nbgrader's install docs advise.
RUN set -e; for plugin in formgrader create-assignment course-list assignment-list; do \
        jupyter labextension disable --level=sys_prefix "@jupyter/nbgrader:${plugin}"; \
    done \
    && for extension in formgrader course_list assignment_list; do \
        jupyter server extension disable --sys-prefix "nbgrader.server_extensions.${extension}"; \
    done
