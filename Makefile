# Two commands do all the set-up on a fresh machine:
#   make lab    create .venv if needed, then start JupyterLab on the course
#   make test   create .venv if needed, then run every test
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup lab test lint bench bench-grade baselines generate validate grade clean

setup: $(STAMP)

# Reinstalls whenever the pins or the package metadata change.
$(STAMP): requirements.txt pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -r requirements.txt
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-deps \
		--no-build-isolation -e .
	# matplotlib builds its font cache on first import and says so on stderr, which strict
	# nbval would count against the first cell that draws: build it here, once.
	$(BIN)/python -c "import matplotlib.font_manager"
	touch $(STAMP)

lab: setup
	$(BIN)/jupyter lab --notebook-dir=notebooks

lint: setup
	$(BIN)/ruff check helpers tests bench grader

test: lint
	$(BIN)/python -m pytest -q

bench: setup
	$(BIN)/python bench/launch_bench.py

bench-grade: setup
	PYTHONPATH=.:tests $(BIN)/python bench/grade_bench.py

# Redraw tests/baseline_images (all, or CASES="reduce ..."); look at every PNG before committing.
baselines: setup
	PYTHONPATH=tests $(BIN)/python tests/scripts/make_baselines.py $(CASES)

# The instructor's commands (README, "Grading").
generate: setup
	$(BIN)/python -m grader generate

validate: setup
	$(BIN)/python -m grader validate

grade: setup
	@test -n "$(SUBMISSIONS)" -a -n "$(OUT)" || \
		{ echo "usage: make grade SUBMISSIONS=<folder or zip> OUT=<folder>"; exit 2; }
	$(BIN)/python -m grader grade "$(SUBMISSIONS)" "$(OUT)" $(GRADE_FLAGS)

clean:
	rm -rf $(VENV) helpers/*.egg-info
