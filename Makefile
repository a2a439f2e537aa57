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

.PHONY: test test-fast test-min lint bench bench-quick clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test,bench]'
	touch $@

lint: $(STAMP)
	$(BIN)/ruff check mplex tests benchmarks
	$(BIN)/mypy --strict mplex

test: lint $(STAMP)
	$(BIN)/python -m pytest
	$(MAKE) test-min

# The whole suite once more on the oldest supported trio.
test-min: $(MIN_VENV)/.installed
	$(MIN_VENV)/bin/python -m pytest -q -p no:cacheprovider

$(MIN_VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(MIN_VENV)
	$(MIN_VENV)/bin/python -m pip install -q --upgrade pip
	$(MIN_VENV)/bin/python -m pip install -q -e '.[test]' 'trio==$(TRIO_MIN)'
	touch $@

bench: $(STAMP)
	$(BIN)/python -m benchmarks

bench-quick: $(STAMP)
	$(BIN)/python -m benchmarks --quick

clean:
	rm -rf $(VENV) $(MIN_VENV) .pytest_cache .mypy_cache .ruff_cache
