# The two commands of the README: `make demo` and `make test`. Each installs what it needs.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
INSTALLED := $(VENV)/.installed
DEMO_ENV := DEBUG=1 MLQ_AGENT_JOIN_TOKEN=$${MLQ_AGENT_JOIN_TOKEN:-demo-join-token}

.PHONY: demo test lint services clean

$(INSTALLED): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -e '.[dev]'
	touch $(INSTALLED)

services:
	@bash .ci/services
	@bash .ci/browser
	@bash .ci/podman
	@bash .ci/prometheus

lint: $(INSTALLED)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# The suite on TEST_WORKERS pytest-xdist workers: much of an end-to-end test is waiting on real
# processes, which the other workers' tests fill. `make test TEST_WORKERS=0` runs it in one
# process (as plain `python -m pytest` does), for debugging. The 30 slowest tests are listed at
# the end, so that a CI log shows where the suite's time goes. Tests marked `alone` (the fault
# campaign, whose outages and wall time are the figures it checks) run afterwards, by themselves:
# on a two-core machine shared with three workers' clusters, a restart takes three times as long.
# `--dist loadgroup`: tests marked with one xdist_group (benches sharing a Redis database) run on
# one worker, one after another; every other test goes to whichever worker is free.
TEST_WORKERS ?= 3

test: $(INSTALLED) lint services
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadgroup -m "not alone" --durations=30
	$(BIN)/python -m pytest -m alone --durations=5

demo: $(INSTALLED)
	$(DEMO_ENV) bash .ci/demo

clean:
	rm -rf $(VENV) var staticfiles .pytest_cache
