# Every target sets itself up: a fresh clone needs only Python >= 3.11.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test test-long lint bench validate-real clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	$(BIN)/python -m compileall -q blis_simpy  # what a wheel install does; an editable one does not
	touch $(STAMP)

demo: $(STAMP)  ## run the quickstart scenario; results in out/quickstart/
	$(BIN)/blis-simpy run scenarios/quickstart.yaml

test: $(STAMP)  ## lint, type-check, then the whole test suite
	$(BIN)/ruff check blis_simpy tests scripts notebooks
	$(BIN)/mypy
	$(BIN)/pytest

test-long: $(STAMP)  ## the invariant properties with 1,000 examples each (nightly)
	BLIS_TEST_PROFILE=long $(BIN)/pytest tests/sim/test_cluster_invariants.py \
		tests/engine/test_invariants.py --hypothesis-show-statistics

lint: $(STAMP)
	$(BIN)/ruff check blis_simpy tests scripts notebooks
	$(BIN)/mypy

bench: $(STAMP)  ## time the bench cases side by side with the Go reference (docs/performance.md)
	$(BIN)/python scripts/bench.py

# The 16 public vLLM runs: git clone https://github.com/inference-sim/training ../training
GROUND_TRUTH ?= ../training/default_args
validate-real: $(STAMP)  ## simulated vs measured on real vLLM runs (needs GROUND_TRUTH, see docs/accuracy.md)
	$(BIN)/blis-simpy validate-real $(GROUND_TRUTH)

clean:
	rm -rf $(VENV) out .pytest_cache .ruff_cache .hypothesis
