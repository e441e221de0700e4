# greenroom — the two commands: `make run` (server on embedded defaults) and `make test`.
#
# `make run` installs greenroom and its runtime dependencies only (its own stamp); `make test`
# and the other development targets add the dev extra (pytest, ruff, mypy, Playwright, ...).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
RUN_STAMP := $(VENV)/.installed-run
STAMP := $(VENV)/.installed
PIP := $(BIN)/python -m pip --disable-pip-version-check
# pip's own lines, one per package it fetches or installs, so a first install never looks hung.
# Everything pip says goes to $(PIP_LOG), shown in full when it fails.
PIP_LOG := $(VENV)/pip-install.log
PIP_LINES := tee $(PIP_LOG) | sed -u -n -e 's/^Collecting \([^ ]*\).*/  fetching \1/p' \
	-e 's|^Processing .*/\([^/ ]*\)\.whl.*|  fetching \1|p' \
	-e 's/^Installing collected packages:.*/  installing.../p' -e 's/^Successfully installed.*/  done/p'
PIP_FAILED := { echo "greenroom: pip failed; its output ($(PIP_LOG)):"; tail -n 40 $(PIP_LOG); exit 1; }
SHELL := /bin/bash
.SHELLFLAGS := -eo pipefail -c

PEERS := .bench-peers
PEERS_STAMP := $(PEERS)/.installed

.PHONY: run test test-under-load lint typecheck pytest bench bench-parts bench-peers fuzz clean \
	venv

venv:
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || \
	  { echo "greenroom needs Python 3.11 or newer; $(PYTHON) is older (make PYTHON=python3.12 ...)"; exit 2; }
	@test -x $(BIN)/python || { echo "greenroom: [1/3] creating $(VENV) with $$($(PYTHON) --version)"; $(PYTHON) -m venv $(VENV); }

# The server only (first use, or a changed pyproject.toml): greenroom and its runtime
# dependencies, about 60 packages; a development install (below) already has them.
$(RUN_STAMP): pyproject.toml | venv
	@if [ -f $(STAMP) ] && [ $(STAMP) -nt pyproject.toml ]; then touch $(RUN_STAMP); exit 0; fi; \
	echo "greenroom: [2/3] installing greenroom and its runtime dependencies into $(VENV)"; \
	$(PIP) install --progress-bar off --no-compile -e . 2>&1 | $(PIP_LINES) || $(PIP_FAILED); \
	touch $(RUN_STAMP); \
	echo "greenroom: [3/3] installed; $$($(BIN)/greenroom --version)"

# Development: the runtime plus the dev extra (test, lint, type and browser tools).
$(STAMP): pyproject.toml | venv
	@echo "greenroom: installing greenroom with its development tools (.[dev]) into $(VENV)"
	@$(PIP) install --progress-bar off -e '.[dev]' 2>&1 | $(PIP_LINES) || $(PIP_FAILED)
	@touch $(STAMP) $(RUN_STAMP)
	@echo "greenroom: installed; $$($(BIN)/greenroom --version)"

run: $(RUN_STAMP)
	@echo "greenroom: starting the server ($(BIN)/greenroom serve $(ARGS))"
	@$(BIN)/greenroom serve $(ARGS)

test: lint typecheck pytest

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy

pytest: $(STAMP)
	$(BIN)/pytest $(PYTEST_ARGS)

# By hand: the whole suite RUNS times (3) beside two CPU-burning processes, every real-clock
# wait scaled by SLOWNESS (4; see tests/slowness.py).
test-under-load: $(STAMP)
	$(BIN)/python -m tests.under_load --runs $(or $(RUNS),3) --slowness $(or $(SLOWNESS),4) \
		$(if $(PYTEST_ARGS),-- $(PYTEST_ARGS))

bench: $(STAMP) $(PEERS_STAMP)  # by hand, ~15 minutes; figures go into docs/benchmarks.md
	$(BIN)/python bench/side_by_side.py $(ARGS)

bench-parts: $(STAMP)  # by hand: the store, the actors and the transport on their own
	$(BIN)/python bench/store.py
	$(BIN)/python bench/actors.py
	$(BIN)/python bench/transport.py

# LangGraph's agent server, the benchmark's peer, in a venv of its own (never a dependency).
bench-peers: $(PEERS_STAMP)

$(PEERS_STAMP): bench/langgraph_peer/requirements.txt
	test -x $(PEERS)/bin/python || $(PYTHON) -m venv $(PEERS)
	$(PEERS)/bin/python -m pip install --quiet --disable-pip-version-check \
		-r bench/langgraph_peer/requirements.txt
	touch $(PEERS_STAMP)

fuzz: $(STAMP)  # by hand, ~10 minutes: schemathesis, all phases and checks, ~20,000 cases
	$(BIN)/python -m tests.fuzz.run --examples $(or $(EXAMPLES),100) --max-time $(or $(FUZZ_SECONDS),600) $(if $(SEED),--seed $(SEED))

clean:
	rm -rf $(VENV) $(PEERS) .mypy_cache .ruff_cache .pytest_cache
