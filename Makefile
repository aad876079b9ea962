# Every target sets itself up: a fresh clone needs only Python >= 3.11.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# The modules setup.py compiles with mypyc. An editable install builds their C extensions next
# to the sources and the interpreter imports those instead: rebuilt when a source changes.
COMPILED := $(shell sed -n 's/^    "\(blis_simpy\/.*\.py\)",$$/\1/p' setup.py)
BUILT    := $(VENV)/.compiled
# setup.py's plain C extension (LOCKDOWN: the sandbox's lock-down), rebuilt likewise.
NATIVE   := blis_simpy/search/lockdown.c

.PHONY: demo test test-long lint bench validate-real compile clean browser docs notebooks

$(STAMP): pyproject.toml setup.py
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'  # compiles the extensions (setup.py)
	$(BIN)/python -m compileall -q blis_simpy  # what a wheel install does; an editable one does not
	$(BIN)/python -c 'from blis_simpy.core.dataclass_code import build; build()'  # likewise
	touch $(STAMP)

# Rebuilt when a compiled source changed since the last build (not right after the install,
# which has just built them). Extensions of modules no longer listed are removed.
$(BUILT): $(STAMP) $(COMPILED) $(NATIVE) setup.py
	if [ -f $(BUILT) ] || [ -n "$$(find $(COMPILED) $(NATIVE) setup.py -newer $(STAMP))" ]; then \
		rm -rf build && find blis_simpy -name '*.so' -delete && \
		$(BIN)/python setup.py --quiet build_ext --inplace; fi
	touch $(BUILT)

compile: $(BUILT)  ## rebuild the compiled modules' extensions after editing them

notebooks: $(BUILT)  ## execute the notebooks outside the repository and store their outputs
	$(BIN)/python scripts/run_notebooks.py

demo: $(BUILT)  ## run the quickstart scenario; results in out/quickstart/ (replaced on each run)
	$(BIN)/blis-simpy run scenarios/quickstart.yaml --force

test: $(BUILT) browser  ## lint, type-check, then the whole test suite (the docs build included)
	$(BIN)/ruff check blis_simpy tests scripts notebooks setup.py
	$(BIN)/mypy
	$(BIN)/pytest

test-long: $(BUILT)  ## the invariant and P/D properties with 1,000 examples each (nightly)
	BLIS_TEST_PROFILE=long $(BIN)/pytest tests/sim/test_cluster_invariants.py \
		tests/sim/test_fault_invariants.py \
		tests/engine/test_invariants.py tests/cluster/test_pd.py --hypothesis-show-statistics \
		-k 'not test_pd.py or pd_ownership or pd_handoff or no_double_counting'

# The HTML report's browser test drives Debian's Chromium (never `playwright install`, which
# downloads a browser build of its own). Installed once, as root; without root the test is
# skipped and says how to install it.
browser:  ## install headless Chromium for the HTML report's browser test (apt-get, as root)
	@if [ -x /usr/bin/chromium ]; then :; \
	elif [ "$$(id -u)" = 0 ]; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; \
	else echo "make browser: no /usr/bin/chromium and not root: run 'sudo apt-get install" \
		"chromium' for the browser test (skipped until then)"; fi

docs: $(BUILT)  ## serve the documentation site at http://127.0.0.1:8000 (rebuilt on edits)
	NO_MKDOCS_2_WARNING=1 MPLBACKEND=Agg $(BIN)/mkdocs serve

lint: $(STAMP)
	$(BIN)/ruff check blis_simpy tests scripts notebooks setup.py
	$(BIN)/mypy

bench: $(BUILT)  ## time the bench cases side by side with the Go reference (docs/performance.md)
	$(BIN)/python scripts/bench.py
	$(BIN)/python scripts/bench_sandbox.py  # what the code candidates' sandbox costs (docs/security.md)

# Every public set bundled with blis-simpy (docs/accuracy.md); GROUND_TRUTH=path adds your own
validate-real: $(STAMP)  ## simulated vs measured on real serving runs (docs/accuracy.md)
	$(BIN)/blis-simpy validate-real $(GROUND_TRUTH)

clean:
	rm -rf $(VENV) out build .pytest_cache .ruff_cache .hypothesis
	find blis_simpy -name '*.so' -delete
