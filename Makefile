# Two commands do all the set-up on a fresh machine:
#   make lab    create .venv if needed, copy the chapters into work/, start JupyterLab there
#   make check CHAPTER=01_broadcast   run your notebook and say which visible tests pass
# Maintainers: make test runs every test (not part of the student edition).
# make site builds the course as a static website in build/site/html (docs/site.md), with its
# own pinned environment in build/site-venv.
#
# PYTHON  the interpreter that creates .venv (3.11 or newer)
# VENV    where the environment lives (the Docker image uses /opt/venv; conda: $CONDA_PREFIX)
# TORCH   auto: on Linux without an NVIDIA GPU torch's CPU build (PyTorch's CPU index), with one
#         PyPI's (CUDA); macOS: PyPI's (CPU). cpu or cuda: that one; cu126: PyTorch's cu126 index.
#         .venv keeps the build it was made with (helpers/scripts/torch_build.sh): make clean
#         before asking for another
# WORK    the student's workspace, filled from notebooks/ and never overwritten
PYTHON ?= python3
VENV ?= .venv
TORCH ?= auto
WORK ?= work
LAB_FLAGS ?=
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# The website: its environment, its build folder, and where its chapter pages send a learner
# (empty: helpers/site/site.toml's values)
SITE_VENV ?= build/site-venv
SITE_OUT ?= build/site
HUB ?=
REPO ?=
BRANCH ?=
# A class's JupyterHub (docs/hub.md, "Teaching a class on a JupyterHub"): the hub's own
# environment (JupyterHub, DockerSpawner, configurable-http-proxy), apart from the course's .venv
HUB_VENV ?= build/hub-venv
PIP_PIN = $(shell sed -n 's/^PIP_PIN=//p' helpers/scripts/install_requirements.sh)
# nbgrader's exchange and course id, for make collect and make release-feedback (the hub's
# Formgrader service sets NBGRADER_EXCHANGE and COMMLAB_COURSE_ID)
EXCHANGE ?= $(or $(NBGRADER_EXCHANGE),/srv/nbgrader/exchange)
COURSE_ID ?= $(or $(COMMLAB_COURSE_ID),commlab)
COLLECTED ?= collected

.PHONY: setup lab test test-fast test-environments lint bench bench-rendezvous bench-grade bench-preload baselines generate validate grade clean
.PHONY: torch-build check course-source student-edition execute formgrader site site-source site-venv
.PHONY: hub hub-setup collect release-feedback

setup: $(STAMP)

# The target a student ran, for the advice about TORCH (make lab, make check, ...)
GOAL = $(firstword $(filter-out clean,$(MAKECMDGOALS)) setup)

TORCH_CHOICE = sh helpers/scripts/torch_build.sh choose "$(VENV)" "$(TORCH)" "$(GOAL)"

# Every make that needs .venv, even an up-to-date one, stops when TORCH asks for another torch
# build than .venv holds, rather than keep it without a word.
torch-build:
	@sh helpers/scripts/torch_build.sh check "$(VENV)" "$(TORCH)" "$(GOAL)"

# Reinstalls whenever the pins, the package metadata or the install script change. The stamp
# records the torch build (cpu, cuda, cu126, ...), which torch_build.sh chooses and says why, in
# one line.
$(STAMP): requirements.txt $(wildcard requirements-dev.txt) pyproject.toml \
		helpers/scripts/install_requirements.sh | torch-build
	$(eval TORCH_BUILD := $(shell $(TORCH_CHOICE)))
	@test -n "$(TORCH_BUILD)" || { echo "make: no torch build chosen (TORCH=$(TORCH))"; exit 2; }
	@PYTHON="$(PYTHON)" VENV="$(VENV)" TORCH="$(TORCH_BUILD)" \
		sh helpers/scripts/install_requirements.sh
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-deps \
		--no-build-isolation -e .
	# matplotlib builds its font cache on first import and says so on stderr, which strict
	# nbval would count against the first cell that draws: build it here, once.
	$(BIN)/python -c "import matplotlib.font_manager"
	# Lab's settings for the course: no question about Jupyter's news to every student
	mkdir -p $(VENV)/share/jupyter/lab/settings
	cp helpers/jupyter/overrides.json $(VENV)/share/jupyter/lab/settings/overrides.json
	echo "$(TORCH_BUILD)" > $(STAMP)

# Jupyter stops as root ("Running as root is not recommended. Use --allow-root to bypass"): as
# root (a cloud VM, a container's shell) Lab is started with --allow-root, and says so.
AS_ROOT := $(if $(filter 0,$(shell id -u 2>/dev/null)),--allow-root)

# Students work in $(WORK)/, a copy of notebooks/ that git ignores and the tests never read.
# Their Lab keeps nbgrader's Validate button without the instructor's panels (Formgrader, Create
# assignment, Course list, Assignments), as the Docker image does: helpers/jupyter/student/
# turns them off for this Lab only, since make formgrader shares .venv and needs them.
STUDENT_CONFIG := $(CURDIR)/helpers/jupyter/student
lab: setup
	$(BIN)/python helpers/scripts/workspace.py notebooks $(WORK)
	@if [ -n "$(AS_ROOT)" ]; then echo "make lab: you are root, so JupyterLab starts with \
	--allow-root (everything your notebooks run, runs as root)"; fi
	JUPYTER_CONFIG_PATH="$(STUDENT_CONFIG)$${JUPYTER_CONFIG_PATH:+:$$JUPYTER_CONFIG_PATH}" \
		$(BIN)/jupyter lab --notebook-dir=$(WORK) $(AS_ROOT) $(LAB_FLAGS)

check: setup
	@$(BIN)/python helpers/scripts/check_notebook.py $(WORK) "$(CHAPTER)"

# The course without solutions/, grader/ and tests/ (helpers/scripts/student_edition.py lists it).
student-edition:
	@test -n "$(DEST)" || { echo "usage: make student-edition DEST=<new folder>"; exit 2; }
	$(PYTHON) helpers/scripts/student_edition.py "$(DEST)"

# The site's generator has pins of its own (helpers/site/requirements.txt), installed apart
# from the course's .venv: make lab never installs them.
site-venv: $(SITE_VENV)/.installed

$(SITE_VENV)/.installed: helpers/site/requirements.txt
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null || { \
		echo "make site needs Python 3.11 or newer: make site PYTHON=python3.11"; exit 1; }
	$(PYTHON) -m venv $(SITE_VENV)
	# every package is pinned, what they need included: pip resolves nothing (--no-deps) and
	# pip check says if a pin is missing; modules compile when the build first imports them
	$(SITE_VENV)/bin/python -m pip install --quiet --disable-pip-version-check --no-deps \
		--no-compile -r helpers/site/requirements.txt
	$(SITE_VENV)/bin/python -m pip check --disable-pip-version-check
	touch $@

# Builds from the files as they are, without the network and without running any notebook.
site: site-source site-venv
	$(SITE_VENV)/bin/python helpers/site/build.py --out "$(SITE_OUT)" \
		--hub "$(HUB)" --repo "$(REPO)" --branch "$(BRANCH)"

lint: setup
	$(BIN)/ruff check helpers tests bench grader tools $(wildcard solutions/*/checks.py)

# The suite on TEST_WORKERS processes (pytest-xdist); tests that share a fixture, a notebook or
# the images stay on one (tests/conftest.py). TEST_WORKERS=0 runs it in this process.
# Python keeps compiled modules in __pycache__ (git and Docker ignore it) even where the
# environment says not to (PYTHONDONTWRITEBYTECODE): the suite's hundreds of kernels and grader
# runs each compiled the course's modules again, and each worker its rewritten test modules.
# One compute thread per process, as torchrun gives each of several processes on one machine
# (and commlab each rank): the workers' kernels share the cores, and with a thread per core each
# they spin waiting for each other (a tenth more CPU for the chapters' strict runs). A test of
# the default thread count unsets it (tests/commlab/test_launch.py).
TEST_WORKERS ?= 3
TEST_ENV = PYTHONDONTWRITEBYTECODE= OMP_NUM_THREADS=1
test: course-source
	@$(MAKE) --no-print-directory -j2 lint test-environments GOAL=$(GOAL)
	$(TEST_ENV) $(BIN)/python -m pytest -q -n $(TEST_WORKERS) $(PYTEST_ARGS)

# The website's and the hub's own environments (the hub's where npm is found), which the system
# tests use, install beside .venv and at the same time (make test's -j2): make setup's pip keeps
# one core busy and leaves the other idle, and the tests then find them ready rather than
# install them on a machine their kernels keep busy. One that can't install here (offline, say)
# is left to the tests that need it, which try again and say why.
test-environments:
	-@$(MAKE) --no-print-directory site-venv $(if $(shell command -v npm),hub-setup)

# The edit loop's lane: every test of tests/commlab and tests/grader not marked slow (a launch
# of many runs, a class graded), and one chapter end to end (its solution run under strict nbval,
# its test cells included). make test runs these and everything else.
FAST_CHAPTER ?= 00_launching_ranks
test-fast: course-source lint
	$(TEST_ENV) $(BIN)/python -m pytest -q -n $(TEST_WORKERS) -m "not slow and not image and not browser and not hub" \
		tests/commlab tests/grader tests/test_layout.py solutions/$(FAST_CHAPTER) $(PYTEST_ARGS)

site-source:
	@test -d solutions -a -f helpers/site/build.py || { echo "make site builds the course's \
	website from solutions/ (the worked examples' outputs and pictures) and helpers/site/, which \
	the student edition leaves out: build it from the whole course."; exit 2; }

course-source:
	@test -d tests -a -d solutions || { echo "make test is the maintainers' suite and needs \
	tests/ and solutions/, which the student edition leaves out. To check your work: \
	make check CHAPTER=<chapter>"; exit 2; }

bench: setup
	$(BIN)/python bench/launch_bench.py

bench-rendezvous: setup
	$(BIN)/python bench/rendezvous_bench.py

bench-preload: setup
	$(BIN)/python bench/preload_bench.py

bench-grade: setup
	PYTHONPATH=.:tests $(BIN)/python bench/grade_bench.py

# Redraw tests/baseline_images (all, or CASES="reduce ..."); look at every PNG before committing.
baselines: setup
	PYTHONPATH=tests $(BIN)/python tools/make_baselines.py $(CASES)

# After editing a chapter: run solutions/<CHAPTER> in a fresh kernel, store its outputs (strict
# nbval compares them) and regenerate its student notebook.
execute: setup
	$(BIN)/python tools/execute_chapter.py $(CHAPTER)

# The instructor's commands (docs/instructors.md, "The commands" and "Grading").
generate: setup
	$(BIN)/python -m grader generate

validate: setup
	$(BIN)/python -m grader validate

# nbgrader's Formgrader on what `make grade` recorded in grader/gradebook.db (docs/instructors.md,
# "Reviewing grades in Formgrader"): JupyterLab in the course's root, with the course's
# nbgrader_config.py.
formgrader: setup
	JUPYTER_CONFIG_PATH="$(CURDIR)/grader" $(BIN)/jupyter lab --notebook-dir="$(CURDIR)" \
		$(AS_ROOT) $(LAB_FLAGS)

grade: setup
	@test -n "$(SUBMISSIONS)" -a -n "$(OUT)" || \
		{ echo "usage: make grade SUBMISSIONS=<folder or zip> OUT=<folder>"; exit 2; }
	$(BIN)/python -m grader grade "$(SUBMISSIONS)" "$(OUT)" $(GRADE_FLAGS)

# The hub's environment: hub/requirements.txt's pins, and hub/package-lock.json's proxy (npm ci,
# Node.js 18 or newer).
hub-setup: $(HUB_VENV)/.installed

$(HUB_VENV)/.installed: hub/requirements.txt hub/package.json hub/package-lock.json
	@command -v npm >/dev/null || { echo "make hub-setup needs Node.js 18 or newer and npm \
	(Debian 12, Ubuntu 24.04: apt install nodejs npm) for the hub's proxy"; exit 2; }
	@found=$$(node --version 2>/dev/null); major=$${found#v}; major=$${major%%.*}; \
	[ "$${major:-0}" -ge 18 ] 2>/dev/null || { echo "make hub-setup needs Node.js 18 or newer \
	for the hub's proxy, found $${found:-none}. Ubuntu 22.04's own is 12: see docs/hub.md, \
	\"On Ubuntu 24.04 and 22.04\""; exit 2; }
	$(PYTHON) -m venv $(HUB_VENV)
	# pip itself first, the one install_requirements.sh installs (PIP_PIN there): the new venv's
	# own pip takes half again as long to resolve the hub's pins; where the pin can't be had, it
	# does the rest
	$(HUB_VENV)/bin/python -m pip install --quiet --disable-pip-version-check $(PIP_PIN) || \
		echo "could not install $(PIP_PIN): installing with the venv's own pip"
	$(HUB_VENV)/bin/python -m pip install --quiet --disable-pip-version-check \
		-r hub/requirements.txt
	mkdir -p $(HUB_VENV)/proxy
	cp hub/package.json hub/package-lock.json $(HUB_VENV)/proxy/
	npm ci --prefix $(HUB_VENV)/proxy --no-audit --no-fund --loglevel=error
	touch $@

# The hub, in the foreground (HUB_* settings: hub/jupyterhub_config.py). Formgrader runs from the
# course's .venv, as a service of the hub.
hub: setup hub-setup
	HUB_COURSE="$(CURDIR)" $(HUB_VENV)/bin/jupyterhub -f hub/jupyterhub_config.py

# What the exchange received, copied into $(COLLECTED)/ (new submissions only); then
# make grade SUBMISSIONS=$(COLLECTED) OUT=grades GRADE_FLAGS="--roster roster.txt --due ..."
collect: setup
	$(BIN)/python -m grader collect $(COLLECTED) --exchange $(EXCHANGE) --course $(COURSE_ID)

# The feedback pages of OUT back to the students who handed them in through the exchange.
release-feedback: setup
	@test -n "$(OUT)" || { echo "usage: make release-feedback OUT=<the folder make grade wrote>"; \
		exit 2; }
	$(BIN)/python -m grader release-feedback $(OUT) --exchange $(EXCHANGE) --course $(COURSE_ID)

clean:
	rm -rf $(VENV) helpers/*.egg-info $(SITE_VENV) $(SITE_OUT) $(HUB_VENV)
