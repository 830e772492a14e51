# state_reader developer commands. `make help` lists them.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# make check runs in a virtualenv of its own: the package and its lint tools, no Java, no pyspark
LINT_VENV ?= .venv-lint
LINT_PY := $(LINT_VENV)/bin/python
LINT_STAMP := $(LINT_VENV)/.installed
LINTED := state_reader tests examples benchmarks

.DEFAULT_GOAL := help
.PHONY: help install java chromium demo test test-compat test-browser unit check lint docs bench dist clean

help: ## List the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-8s %s\n", $$1, $$2}'

java: ## Install Java 17 with apt-get if no java is on the PATH (Spark needs it)
	@command -v java >/dev/null 2>&1 || { \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq openjdk-17-jre-headless; }

$(STAMP): setup.cfg pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[spark,test]'
	@touch $(STAMP)

$(LINT_STAMP): setup.cfg pyproject.toml
	$(PYTHON) -m venv $(LINT_VENV)
	$(LINT_PY) -m pip install -q --upgrade pip
	$(LINT_PY) -m pip install -q -e '.[lint]'
	@touch $(LINT_STAMP)

install: java $(STAMP) ## Create .venv and install state_reader with its Spark and test extras

demo: install ## Run a streaming aggregation and read its state back both ways (KEEP=DIR keeps the checkpoint)
	$(PY) examples/demo.py $(if $(KEEP),--keep $(KEEP))

test: install ## Run the test suite (real Spark, real checkpoints)
	$(PY) -m pytest

test-compat: java ## Test the Spark fronts on pyspark 3.5, 4.0, 4.1 and 4.2, each in its own virtualenv (.venv-compat/)
	PYTHON=$(PYTHON) tests/compat/run.sh

chromium: ## Install Chromium and chromedriver with apt-get if missing (the browser tests drive them)
	@command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1 || { \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq chromium chromium-driver; }

test-browser: install chromium ## Install Chromium if missing, then run the browser tests (the screenshot goes to docs/)
	STATE_READER_SCREENSHOT=docs/notebook.png $(PY) -m pytest -m browser tests/fronts/test_notebook.py

unit: install ## Run only the tests that need no Spark (about a minute, no JVM)
	$(PY) -m pytest -m 'not spark'

check: $(LINT_STAMP) ## Lint, format, types, spelling, the layer contract and the tests' layout (no Java, no Spark)
	$(LINT_PY) -m ruff check $(LINTED)
	$(LINT_PY) -m ruff format --check $(LINTED)
	$(LINT_PY) -m mypy state_reader
	$(LINT_VENV)/bin/codespell $(LINTED) docs README.md CHANGELOG.md
	$(LINT_PY) -m pytest tests/contracts/test_architecture.py tests/contracts/test_layout.py -q

lint: check ## The same as make check

docs: install ## Build the documentation site (mkdocs, warnings are errors) into site/
	$(VENV)/bin/mkdocs build --strict

dist: $(LINT_STAMP) ## Build the sdist and wheel into dist/ and check them with twine (what a release uploads)
	rm -rf dist
	$(LINT_PY) -m build --sdist --wheel --outdir dist .
	$(LINT_PY) -m twine check --strict dist/*

bench: install ## Compare read speed with Spark's built-in reader
	$(PY) benchmarks/bench_read.py

clean: ## Remove the virtualenv and caches
	rm -rf $(VENV) $(LINT_VENV) dist .venv-compat .pytest_cache .ruff_cache .mypy_cache build site *.egg-info
