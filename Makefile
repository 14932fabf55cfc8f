# Two commands do all set-up: `make demo` and `make test` (see README.md).
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
BASE_STAMP := $(VENV)/.oodbench-base
DEV_STAMP  := $(VENV)/.oodbench-dev

.PHONY: demo test lint typecheck bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

$(BASE_STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e .
	touch $@

$(DEV_STAMP): pyproject.toml $(BASE_STAMP)
	$(BIN)/pip install --quiet -e ".[dev]"
	touch $@

demo: $(BASE_STAMP)
	$(BIN)/oodbench demo

lint: $(DEV_STAMP)
	$(BIN)/ruff check src tests speed studies scripts

typecheck: $(DEV_STAMP)
	$(BIN)/mypy

# pytest-xdist workers: one more than the cores (`TEST_WORKERS=0` runs the suite in one process);
# each worker computes with one thread (tests/conftest.py), and the tests that share a session
# fixture or a Ray cluster share a worker. The extra worker computes while another waits on a
# subprocess, a Ray task or the disk: on 2 cores the suite kept them 84 % busy with 2 workers
# (370 s) and 91 % with 3 (329 s), about the same CPU time (pytest on an idle checkout of
# 6d64cda); fresh clones with 3: speed/results/bench_fresh_clone.json
TEST_WORKERS ?= $(shell echo $$(( $$(nproc 2>/dev/null || echo 1) + 1 )))

# mypy (one process, one core) type-checks while the suite runs, so the cores it would leave
# idle before the suite starts do work (speed/bench_fresh_clone.py times `make test`); its
# report is printed after the suite's, and either failing fails `make test`
test: lint
	@echo "mypy runs beside the suite; its report follows the suite's"
	@$(BIN)/mypy > .mypy-report.txt 2>&1 & mypy=$$!; \
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadgroup; suite=$$?; \
	wait $$mypy; types=$$?; cat .mypy-report.txt; rm -f .mypy-report.txt; \
	if [ $$types -ne 0 ]; then echo "make test: mypy failed (exit $$types)"; fi; \
	[ $$suite -eq 0 ] && [ $$types -eq 0 ]

bench: $(DEV_STAMP)
	$(BIN)/python speed/bench_metrics.py

clean:
	rm -rf $(VENV) build dist src/*.egg-info .pytest_cache .mypy_cache .ruff_cache
