# Two commands: `make demo` and `make test`. Each builds its own virtualenv from scratch.
# The demo environment holds every extra and pytest, so each command the README shows runs in it
# (`. .venv-demo/bin/activate` puts `lifecycle` on the PATH); the test environment adds the
# development group (PEP 735: linters, type checker, benchmark baselines).
PYTHON ?= python3
VENV_DEMO := .venv-demo
VENV_TEST := .venv
VENV_DOCS := .venv-docs
DEMO_DB := .demo/demo.db
# The supported Pythons, oldest first (pyproject's classifiers name the same; a test holds them
# together). `make test` runs on $(PYTHON), the oldest; `make test-pythons` on the others.
SUPPORTED_PYTHONS := 3.11 3.12 3.13

.PHONY: demo test lint typecheck unit clean bench bench-quick wheel-check newcomer docs \
	generate floors test-pythons docs-check

$(VENV_DEMO)/.ok: pyproject.toml
	$(PYTHON) -m venv $(VENV_DEMO)
	$(VENV_DEMO)/bin/pip install --quiet --upgrade pip
	$(VENV_DEMO)/bin/pip install --quiet -e '.[all]' pytest
	touch $@

$(VENV_TEST)/.ok: pyproject.toml
	$(PYTHON) -m venv $(VENV_TEST)
	$(VENV_TEST)/bin/pip install --quiet --upgrade pip
	$(VENV_TEST)/bin/pip install --quiet -e '.[all]' --group dev
	touch $@

$(VENV_DOCS)/.ok: pyproject.toml
	$(PYTHON) -m venv $(VENV_DOCS)
	$(VENV_DOCS)/bin/pip install --quiet --upgrade pip
	$(VENV_DOCS)/bin/pip install --quiet -e '.[all]' --group docs
	touch $@

demo: $(VENV_DEMO)/.ok
	@rm -rf .demo && mkdir -p .demo
	$(VENV_DEMO)/bin/lifecycle replay examples/traces/demo.jsonl --store sqlite:///$(DEMO_DB) \
		--metrics .demo/metrics.prom
	@echo "metrics of this replay: .demo/metrics.prom (Prometheus text format; README: Operating it)"

lint: $(VENV_TEST)/.ok
	$(VENV_TEST)/bin/ruff check src tests examples benchmarks scripts
	$(VENV_TEST)/bin/ruff format --check src tests examples benchmarks scripts

typecheck: $(VENV_TEST)/.ok
	$(VENV_TEST)/bin/mypy

unit: $(VENV_TEST)/.ok
	$(VENV_TEST)/bin/pytest -n auto

test: lint typecheck unit

# Regenerate the synchronous PostgreSQL store from its asyncio source (ADR 0126);
# tests/test_generated_sync.py fails while the committed file is stale.
generate: $(VENV_TEST)/.ok
	$(VENV_TEST)/bin/python scripts/async_to_sync.py

# Benchmarks: side-by-side ratios against the baselines (see docs/performance.md).
bench: $(VENV_TEST)/.ok
	$(VENV_TEST)/bin/python -m benchmarks.run

bench-quick: $(VENV_TEST)/.ok
	@mkdir -p benchmarks/out
	$(VENV_TEST)/bin/python -m benchmarks.run --quick --out benchmarks/out/latest-quick.json

# Build the wheel and the sdist, install the wheel into a clean virtualenv and run the
# quick-starts against it (not against the checkout), and type-check a consumer of it.
wheel-check: $(VENV_TEST)/.ok
	bash scripts/wheel_check.sh $(VENV_TEST)

# The core install (no extra): the wheel in a clean virtualenv; every public module imports or
# names its extra, every README command that needs no extra runs, each that needs one exits 4
# naming it (ADR 0136).
.PHONY: core-check
core-check: $(VENV_TEST)/.ok
	bash scripts/core_check.sh $(VENV_TEST)

# The architecture report (ADR 0151), not part of `make test`: a duplicate-code report of src/
# (when that tool is on the PATH), radon's cyclomatic grades D-F of src/lifecycle with a count,
# and the exception tree under LifecycleError (the page docs/reference/errors.md).
.PHONY: architecture
architecture: $(VENV_TEST)/.ok
	$(VENV_TEST)/bin/python scripts/architecture.py

# The documentation site (docs/, ADR 0120): guides, the API reference from the docstrings, the
# machine pages and the ADRs; every warning is an error. Opens as docs/_build/html/index.html.
docs: $(VENV_DOCS)/.ok
	@rm -rf docs/_build
	$(VENV_DOCS)/bin/sphinx-build -W --keep-going -n -b html -q docs docs/_build/html

# Open every page of the built site (after `make docs`) in headless Chromium, installed here
# when missing (Debian's chromium, as root): fails on a script error, a request to another host,
# a file that does not load or an unrendered diagram (ADR 0137). Screenshots of every page go to
# docs/_build/screenshots.
docs-check: $(VENV_DOCS)/.ok
	bash scripts/chromium.sh
	$(VENV_DOCS)/bin/python scripts/check_site.py docs/_build/html --screenshots docs/_build/screenshots

# The lowest declared version of every direct dependency (core and each extra), from the wheel
# in a clean virtualenv on the oldest Python: the quick-starts and the core slice of the suite.
floors: $(VENV_TEST)/.ok
	bash scripts/floors.sh $(VENV_TEST) $(firstword $(SUPPORTED_PYTHONS))

# The other supported Pythons: the wheel in a clean virtualenv each, the quick-starts, the suite.
test-pythons: $(VENV_TEST)/.ok
	bash scripts/pythons.sh $(VENV_TEST) $(wordlist 2,99,$(SUPPORTED_PYTHONS))

# The README's newcomer path, command by command, on a fresh clone of this checkout's HEAD.
newcomer:
	$(PYTHON) scripts/newcomer.py $(NEWCOMER_FLAGS)

clean:
	rm -rf $(VENV_DEMO) $(VENV_TEST) $(VENV_DOCS) docs/_build .demo .mypy_cache .pytest_cache .ruff_cache dist
