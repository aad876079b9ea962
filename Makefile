# Every target sets itself up: a fresh clone needs only Python >= 3.11.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# The modules setup.py compiles with mypyc. An editable install builds their C extensions next
# to the sources and the interpreter imports those instead: rebuilt when a source changes.
COMPILED := $(shell sed -n 's/^    "\(blis_simpy\/.*\.py\)",$$/\1/p' setup.py)
BUILT    := $(VENV)/.compiled

.PHONY: demo test test-long lint bench validate-real compile clean

$(STAMP): pyproject.toml setup.py
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'  # compiles the extensions (setup.py)
	$(BIN)/python -m compileall -q blis_simpy  # what a wheel install does; an editable one does not
	touch $(STAMP)

# Rebuilt when a compiled source changed since the last build (not right after the install,
# which has just built them). Extensions of modules no longer listed are removed.
$(BUILT): $(STAMP) $(COMPILED) setup.py
	if [ -f $(BUILT) ] || [ -n "$$(find $(COMPILED) setup.py -newer $(STAMP))" ]; then \
		rm -rf build && find blis_simpy -name '*.so' -delete && \
		$(BIN)/python setup.py --quiet build_ext --inplace; fi
	touch $(BUILT)

compile: $(BUILT)  ## rebuild the compiled modules' extensions after editing them

demo: $(BUILT)  ## run the quickstart scenario; results in out/quickstart/
	$(BIN)/blis-simpy run scenarios/quickstart.yaml

test: $(BUILT)  ## lint, type-check, then the whole test suite
	$(BIN)/ruff check blis_simpy tests scripts notebooks setup.py
	$(BIN)/mypy
	$(BIN)/pytest

test-long: $(BUILT)  ## the invariant and P/D properties with 1,000 examples each (nightly)
	BLIS_TEST_PROFILE=long $(BIN)/pytest tests/sim/test_cluster_invariants.py \
		tests/engine/test_invariants.py tests/cluster/test_pd.py --hypothesis-show-statistics \
		-k 'not test_pd.py or pd_ownership or pd_handoff or no_double_counting'

lint: $(STAMP)
	$(BIN)/ruff check blis_simpy tests scripts notebooks setup.py
	$(BIN)/mypy

bench: $(BUILT)  ## time the bench cases side by side with the Go reference (docs/performance.md)
	$(BIN)/python scripts/bench.py

# Every public set bundled with blis-simpy (docs/accuracy.md); GROUND_TRUTH=path adds your own
validate-real: $(STAMP)  ## simulated vs measured on real serving runs (docs/accuracy.md)
	$(BIN)/blis-simpy validate-real $(GROUND_TRUTH)

clean:
	rm -rf $(VENV) out build .pytest_cache .ruff_cache .hypothesis
	find blis_simpy -name '*.so' -delete
