# keras_tupe: `make test` and `make demo` set everything up on a fresh machine.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
JAX_STAMP := $(VENV)/.installed-jax
# Real data for the demo and experiments: ../shared/data when it is there.
DATA_DIR ?= $(if $(wildcard ../shared/data),../shared/data,)
PYTEST_WORKERS ?= 2
# More pytest options for every suite, e.g. PYTEST_ARGS="--cov=keras_tupe --cov-append".
PYTEST_ARGS ?=

.PHONY: install install-jax test test-slow test-all test-jax test-window test-stage demo clean

# constraints.txt: the exact tested set (pyproject.toml declares ranges).
$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -c constraints.txt -e ".[tensorflow,test]"
	touch $(STAMP)

install: $(STAMP)

# jax[cpu] beside TensorFlow: the JAX backend (KERAS_BACKEND=jax) for .venv/bin/python.
install-jax: $(JAX_STAMP)

# jax[cpu] beside TensorFlow, once (the `jax` extra of pyproject.toml).
$(JAX_STAMP): $(STAMP) pyproject.toml constraints.txt
	$(PY) -m pip install --quiet -c constraints.txt -e ".[tensorflow,test,jax]"
	touch $(JAX_STAMP)

# The default suite: unit, numerical and component tests (-rs: why any test skipped;
# --durations: the slowest, for the CI log). --dist loadgroup: the tests of a module marked
# `xdist_group` (one whose module fixtures train or export) run on one worker, which builds
# those fixtures once; the other tests go to whichever worker is free.
test: $(STAMP)
	TF_CPP_MIN_LOG_LEVEL=2 $(PY) -m pytest -q -rs -n $(PYTEST_WORKERS) --durations=15 \
		--dist loadgroup $(PYTEST_ARGS) -m "not slow and not jax" tests

# Integration tests (training, export of every variant and size, reload, fresh processes, whole
# studies, distribution, benchmark runs).
test-slow: $(STAMP)
	TF_CPP_MIN_LOG_LEVEL=2 $(PY) -m pytest -q -n $(PYTEST_WORKERS) --durations=15 \
		--dist loadgroup $(PYTEST_ARGS) -m "slow and not jax" tests

test-all: $(STAMP)
	TF_CPP_MIN_LOG_LEVEL=2 $(PY) -m pytest -q -n $(PYTEST_WORKERS) --dist loadgroup $(PYTEST_ARGS) \
		-m "not jax" tests experiments/stage/tests

# Under the JAX backend (CPU), in one session: the tests whose result depends on the backend
# (marked `backends`: the layers' and encoders' numbers, initializers, saving, keras-hub's
# harness on one variant per attention path; tests/backends.py), then every test marked
# `jax` (training under JAX, DataParallel on two virtual devices, one step equal to
# TensorFlow's, fused gradients, the grid, the commands and stages in processes without
# TensorFlow). The rest does not depend on the backend and runs once, in test or test-slow.
test-jax: $(JAX_STAMP)
	TF_CPP_MIN_LOG_LEVEL=2 KERAS_BACKEND=jax $(PY) -m pytest -q -n $(PYTEST_WORKERS) --durations=15 \
		--dist loadgroup $(PYTEST_ARGS) -m "(backends and not slow) or jax" tests

# The GPU window tool (experiments/stage/): its tests (planning, budget, packing, collecting),
# in CI.
test-window: $(JAX_STAMP)
	TF_CPP_MIN_LOG_LEVEL=2 $(PY) -m pytest -q -rs -n $(PYTEST_WORKERS) --durations=5 \
		--dist loadgroup $(PYTEST_ARGS) -m "not slow and not jax" experiments/stage/tests

# The window's rehearsals, before a window and after a change to what a window runs (not in
# CI: about 400 s of its clock): the stages marked `jax` at the tiny size under JAX without
# TensorFlow (S2a, S5a, S6), then window W1 at the tiny size on a stand-in of the lent GPU
# machine (experiments/stage/standin.py): CPython 3.12 with only the image's packages
# (experiments/stage/gpu_image.txt), a fresh HOME, no KERAS_BACKEND, no TensorFlow; the
# command the stage prints, run as it is.
test-stage: $(JAX_STAMP)
	TF_CPP_MIN_LOG_LEVEL=2 KERAS_BACKEND=jax $(PY) -m pytest -q -n $(PYTEST_WORKERS) --durations=5 \
		--dist loadgroup $(PYTEST_ARGS) -m jax experiments/stage/tests
	$(PY) -m experiments.stage.standin --stage W1

demo: $(STAMP)
	TF_CPP_MIN_LOG_LEVEL=2 KERAS_TUPE_DATA_DIR=$(DATA_DIR) $(PY) -m training.demo

clean:
	rm -rf $(VENV)
