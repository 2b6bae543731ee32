# Two commands on a fresh machine: `make serve` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
# pytest workers (pytest-xdist) of the default tier; 0: one process. The slow tier runs in one process: its tests are
# CPU-bound model work, and on two workers of a 2-core machine it took 1,960 s against 1,499 s (docs/BENCHMARKS.md,
# "Round 30"). On more workers, `--dist loadfile` keeps the full corpus's tests on one (tests/conftest.py).
TEST_WORKERS ?= 2
# torch (and ONNX Runtime) threads per worker of the default tier: one per worker, so two workers fill the 2 cores
# without oversubscribing them (the default tier's four heaviest bench tests: 384 s -> 296 s, docs/BENCHMARKS.md,
# "Round 32"); unset with TEST_WORKERS=0 or 1, where torch takes every core.
TEST_THREADS ?= $(if $(filter 0 1,$(TEST_WORKERS)),,1)
# each tier ends with its slowest tests and their times (pytest --durations), where CI time goes; 0: all, unset: none
TEST_DURATIONS ?= 15
PYTEST_ARGS := -q $(if $(TEST_DURATIONS),--durations=$(TEST_DURATIONS))
PYTEST := $(if $(TEST_THREADS),OMP_NUM_THREADS=$(TEST_THREADS) )$(BIN)/python -m pytest $(PYTEST_ARGS) -n $(TEST_WORKERS)

.PHONY: serve test test-slow test-all venv bench clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[test]'
	touch $(STAMP)

venv: $(STAMP)

## Set up, ingest the default corpus if the store is empty, build the indexes, serve on 127.0.0.1:8000.
serve: $(STAMP)
	$(BIN)/cqa serve

## Set up with the test extra and run the test suite (slow tests excluded).
test: $(STAMP)
	$(PYTEST)

## The slow tests (full SemEval corpus, real model encoding).
test-slow: $(STAMP)
	$(BIN)/python -m pytest $(PYTEST_ARGS) -m slow

test-all: $(STAMP)
	$(PYTEST) --dist loadfile -m 'slow or not slow'

clean:
	rm -rf $(VENV) var build *.egg-info
