# keras_tupe: `make test` and `make demo` set everything up on a fresh machine.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# Real data for the demo and experiments: ../shared/data when it is there.
DATA_DIR ?= $(if $(wildcard ../shared/data),../shared/data,)
PYTEST_WORKERS ?= 2

.PHONY: install test test-slow test-all demo clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[test]"
	touch $(STAMP)

install: $(STAMP)

# The default suite: unit and numerical tests (fast).
test: $(STAMP)
	TF_CPP_MIN_LOG_LEVEL=2 $(PY) -m pytest -q -n $(PYTEST_WORKERS) -m "not slow" tests

# Integration tests (training, export, reload).
test-slow: $(STAMP)
	TF_CPP_MIN_LOG_LEVEL=2 $(PY) -m pytest -q -n $(PYTEST_WORKERS) -m slow tests

test-all: $(STAMP)
	TF_CPP_MIN_LOG_LEVEL=2 $(PY) -m pytest -q -n $(PYTEST_WORKERS) tests

demo: $(STAMP)
	TF_CPP_MIN_LOG_LEVEL=2 KERAS_TUPE_DATA_DIR=$(DATA_DIR) $(PY) -m training.demo

clean:
	rm -rf $(VENV)
