# greenroom — the two commands: `make run` (server on embedded defaults) and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

PEERS := .bench-peers
PEERS_STAMP := $(PEERS)/.installed

.PHONY: run test lint typecheck pytest bench bench-parts bench-peers fuzz clean

# First use (or a changed pyproject.toml): one line per step, then pip's own quiet install.
$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || \
	  { echo "greenroom needs Python 3.11 or newer; $(PYTHON) is older (make PYTHON=python3.12 ...)"; exit 2; }
	@test -x $(BIN)/python || { echo "greenroom: creating $(VENV) with $$($(PYTHON) --version)"; $(PYTHON) -m venv $(VENV); }
	@echo "greenroom: installing greenroom and its dependencies into $(VENV) (first time: about a minute)"
	@$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[dev]'
	@touch $(STAMP)
	@echo "greenroom: installed; $$($(BIN)/greenroom --version)"

run: $(STAMP)
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
