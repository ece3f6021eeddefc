# The course in a container, with CUDA for NCCL when the host has GPUs.
#   docker build -t commlab-course .
#   docker run --rm -it --gpus all --shm-size=1g -p 8888:8888 commlab-course
# The PyTorch base brings CUDA, cuDNN and Python; requirements.txt then pins the exact torch and
# everything else, the same pins as `make lab` installs.
ARG BASE_IMAGE=pytorch/pytorch:2.9.1-cuda12.8-cudnn9-runtime
FROM ${BASE_IMAGE}

ENV PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# make for the course's commands; util-linux (unshare) and iproute2 (ip) for grading without
# network access.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends make util-linux iproute2 \
    && rm -rf /var/lib/apt/lists/*

RUN useradd --create-home --uid 1000 student \
    && install -d -o student -g student /home/student/course
WORKDIR /home/student/course

# Dependencies first, so that editing a notebook does not reinstall torch. `make setup` builds
# the same .venv from requirements.txt as on a laptop, so `make test` and `make grade` work in
# the container too, even with --network none.
COPY --chown=student:student requirements.txt pyproject.toml Makefile ./
COPY --chown=student:student helpers ./helpers
USER 1000
RUN make setup

COPY --chown=student:student . .

EXPOSE 8888
CMD [".venv/bin/jupyter", "lab", "--ip=0.0.0.0", "--no-browser", "--notebook-dir=notebooks"]
