# Two commands: `make demo` and `make test`. Each builds its own virtualenv from scratch.
PYTHON ?= python3
VENV_DEMO := .venv-demo
VENV_TEST := .venv
DEMO_DB := .demo/demo.db

.PHONY: demo test lint typecheck unit clean bench bench-quick

$(VENV_DEMO)/.ok: pyproject.toml
	$(PYTHON) -m venv $(VENV_DEMO)
	$(VENV_DEMO)/bin/pip install --quiet --upgrade pip
	$(VENV_DEMO)/bin/pip install --quiet -e .
	touch $@

$(VENV_TEST)/.ok: pyproject.toml
	$(PYTHON) -m venv $(VENV_TEST)
	$(VENV_TEST)/bin/pip install --quiet --upgrade pip
	$(VENV_TEST)/bin/pip install --quiet -e '.[dev]'
	touch $@

demo: $(VENV_DEMO)/.ok
	@rm -rf .demo && mkdir -p .demo
	$(VENV_DEMO)/bin/lifecycle replay examples/traces/demo.jsonl --store sqlite:///$(DEMO_DB)

lint: $(VENV_TEST)/.ok
	$(VENV_TEST)/bin/ruff check src tests examples benchmarks
	$(VENV_TEST)/bin/ruff format --check src tests examples benchmarks

typecheck: $(VENV_TEST)/.ok
	$(VENV_TEST)/bin/mypy

unit: $(VENV_TEST)/.ok
	$(VENV_TEST)/bin/pytest

test: lint typecheck unit

# Benchmarks: side-by-side ratios against the baselines (see docs/performance.md).
bench: $(VENV_TEST)/.ok
	$(VENV_TEST)/bin/python -m benchmarks.run

bench-quick: $(VENV_TEST)/.ok
	@mkdir -p benchmarks/out
	$(VENV_TEST)/bin/python -m benchmarks.run --quick --out benchmarks/out/latest-quick.json

clean:
	rm -rf $(VENV_DEMO) $(VENV_TEST) .demo .mypy_cache .pytest_cache .ruff_cache
