# Every target sets itself up: a fresh clone needs only Python >= 3.11.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test lint bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)  ## run the quickstart scenario; results in out/quickstart/
	$(BIN)/blis-simpy run scenarios/quickstart.yaml

test: $(STAMP)  ## lint, type-check, then the whole test suite
	$(BIN)/ruff check blis_simpy tests scripts notebooks
	$(BIN)/mypy
	$(BIN)/pytest

lint: $(STAMP)
	$(BIN)/ruff check blis_simpy tests scripts notebooks
	$(BIN)/mypy

bench: $(STAMP)  ## timings of scenarios/bench/*.yaml
	$(BIN)/python scripts/bench.py

clean:
	rm -rf $(VENV) out .pytest_cache .ruff_cache .hypothesis
