# The two commands of this project: `make test` and `make bench`.
# Both create .venv and install pinned dependencies themselves; nothing is needed
# beforehand but python3 (>= 3.11), make, and node/npm for the js baseline.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# The oldest trio we support, tested on by `make test` (see pyproject.toml).
TRIO_MIN := 0.27.0

# The js peers (tests/interop/peer.mjs and the benchmark's benchmarks/js/peer.mjs) share
# one pinned npm install.
JS_DIR := tests/interop
JS_STAMP := $(JS_DIR)/node_modules/.installed
# py-libp2p (the benchmark baseline, and the hosts the tests in tests/libp2p run
# mplex.libp2p in) lives in its own venv: it brings ~70 packages, among them
# trio-typing, whose stale stubs would shadow trio's own types for mypy.
BENCH_VENV := .venv-bench
BENCH_STAMP := $(BENCH_VENV)/.installed
SUITE_DIR := .cache/pylibp2p
SUITE_STAMP := $(SUITE_DIR)/.installed
export MPLEX_BENCH_PYLIBP2P_PYTHON := $(abspath $(BENCH_VENV))/bin/python

.PHONY: test test-quick test-full test-pythons test-libp2p lint docs bench bench-quick matrices clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml constraints.txt | $(BIN)/python
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -c constraints.txt -e '.[test,cli,docs]'
	touch $@

lint: $(STAMP)
	$(BIN)/ruff check mplex tests benchmarks examples fuzz tools docs
	$(BIN)/mypy --strict mplex tools

# The js peer is pinned by package-lock.json; npm ci installs exactly that.
$(JS_STAMP): $(JS_DIR)/package.json $(JS_DIR)/package-lock.json
	cd $(JS_DIR) && npm ci --no-audit --no-fund
	touch $@

# py-libp2p's pinned release (constraints.txt) is the benchmark's baseline and the
# host the tests in tests/libp2p run in.
$(BENCH_STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(BENCH_VENV)
	$(BENCH_VENV)/bin/python -m pip install -q --upgrade pip
	$(BENCH_VENV)/bin/python -m pip install -q -c constraints.txt -e '.[libp2p]' pytest pytest-trio trustme
	touch $@

test: lint docs $(STAMP) $(JS_STAMP) $(BENCH_STAMP)
	$(BIN)/python -m pytest
	$(MAKE) test-libp2p
	$(MAKE) test-pythons

# While iterating: lint and the library's own tests, without the docs, the py-libp2p
# hosts and the other Pythons (stops at the first failure).
test-quick: lint $(STAMP) $(JS_STAMP) $(BENCH_STAMP)
	$(BIN)/python -m pytest -q -x

# mplex.libp2p inside py-libp2p hosts: needs py-libp2p, so it runs in its venv (where a
# missing py-libp2p, node or npm install fails the run).
test-libp2p: $(BENCH_STAMP) $(JS_STAMP) $(SUITE_STAMP)
	MPLEX_LIBP2P_TESTS=1 $(BENCH_VENV)/bin/python -m pytest -q -p no:cacheprovider tests/libp2p

# py-libp2p's own tests (its sdist ships them), run by tests/libp2p/test_pylibp2p_suite.py
# with our mplex in place of its own.  Its test dependencies are pinned here.
$(SUITE_STAMP): $(BENCH_STAMP)
	rm -rf $(SUITE_DIR) && mkdir -p $(SUITE_DIR)
	$(BENCH_VENV)/bin/python -m pip download -q --no-deps --no-binary :all: -d $(SUITE_DIR) libp2p==0.8.1
	tar -xzf $(SUITE_DIR)/libp2p-0.8.1.tar.gz -C $(SUITE_DIR) libp2p-0.8.1/tests libp2p-0.8.1/pyproject.toml
	$(BENCH_VENV)/bin/python -m pip install -q -c constraints.txt factory-boy pytest-mock pytest-timeout
	touch $@

# The interop matrices on the documentation's Interoperability and py-libp2p pages:
# rerun the interop tests and write what they saw (no other run writes them).
matrices: $(STAMP) $(JS_STAMP) $(BENCH_STAMP) $(SUITE_STAMP)
	MPLEX_WRITE_MATRICES=1 $(BIN)/python -m pytest -q tests/test_interop.py
	MPLEX_WRITE_MATRICES=1 MPLEX_LIBP2P_TESTS=1 $(BENCH_VENV)/bin/python -m pytest -q -p no:cacheprovider tests/libp2p

# The long versions: the 30-second soak, the 100,000-stream churn, and py-libp2p's
# identify-push tests with our mplex.
test-full: lint $(STAMP) $(JS_STAMP) $(BENCH_STAMP)
	MPLEX_FULL=1 $(BIN)/python -m pytest
	MPLEX_FULL=1 $(MAKE) test-libp2p

# The library's tests (those that need no node, py-libp2p or package index) on every
# other supported CPython found here (python3.X on PATH, or pyenv's), the first of them
# on the oldest supported trio; a missing version fails the run under CI=true.  Ends by
# saying which interpreters ran what.
test-pythons: $(STAMP)
	$(BIN)/python tools/pythons.py --trio-min $(TRIO_MIN) --main-venv $(VENV)

# The documentation site, warnings as errors, into docs/_build/html.
docs: $(STAMP)
	$(BIN)/sphinx-build -q -W --keep-going -b html docs docs/_build/html

bench: $(STAMP) $(JS_STAMP) $(BENCH_STAMP)
	$(BIN)/python -m benchmarks --write-results --require-baselines

bench-quick: $(STAMP) $(JS_STAMP) $(BENCH_STAMP)
	$(BIN)/python -m benchmarks --quick --require-baselines

clean:
	rm -rf $(VENV) .venv-py3.* $(BENCH_VENV) $(JS_DIR)/node_modules .cache .pytest_cache .mypy_cache .ruff_cache docs/_build
