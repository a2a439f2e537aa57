# The two commands of this project: `make test` and `make bench`.
# Both create .venv and install pinned dependencies themselves; nothing is needed
# beforehand but python3 (>= 3.11), make, and node/npm for the js baseline.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# The oldest trio we support, tested on by `make test` (see pyproject.toml).
TRIO_MIN := 0.27.0
MIN_VENV := .venv-trio-min

JS_DIR := benchmarks/js
JS_STAMP := $(JS_DIR)/node_modules/.installed

.PHONY: test test-min lint bench bench-quick clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test,bench]'
	touch $@

lint: $(STAMP)
	$(BIN)/ruff check mplex tests benchmarks
	$(BIN)/mypy --strict mplex

# The js peer is pinned by package-lock.json; npm ci installs exactly that.
$(JS_STAMP): $(JS_DIR)/package.json $(JS_DIR)/package-lock.json
	cd $(JS_DIR) && npm ci --no-audit --no-fund
	touch $@

test: lint $(STAMP) $(JS_STAMP)
	$(BIN)/python -m pytest
	$(MAKE) test-min

# The suite once more on the oldest supported trio.  The benchmark-harness test is
# left out here: it checks the harness and its peers (py-libp2p brings its own trio
# requirement), not trio compatibility, and the main run above has already run it.
test-min: $(MIN_VENV)/.installed
	$(MIN_VENV)/bin/python -m pytest -q -p no:cacheprovider --ignore=tests/test_benchmarks.py

$(MIN_VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(MIN_VENV)
	$(MIN_VENV)/bin/python -m pip install -q --upgrade pip
	$(MIN_VENV)/bin/python -m pip install -q -e '.[test]' 'trio==$(TRIO_MIN)'
	touch $@

bench: $(STAMP) $(JS_STAMP)
	$(BIN)/python -m benchmarks --write-results

bench-quick: $(STAMP) $(JS_STAMP)
	$(BIN)/python -m benchmarks --quick

clean:
	rm -rf $(VENV) $(MIN_VENV) $(JS_DIR)/node_modules .pytest_cache .mypy_cache .ruff_cache
