# keras_tupe: `make test` and `make demo` set everything up on a fresh machine.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
JAX_STAMP := $(VENV)/.installed-jax
# Real data for the demo and experiments: ../shared/data when it is there.
DATA_DIR ?= $(if $(wildcard ../shared/data),../shared/data,)
PYTEST_WORKERS ?= 2

.PHONY: install install-jax test test-slow test-all test-jax test-stage demo clean

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

# The default suite: unit, numerical and component tests (-rs: why any test skipped).
test: $(STAMP)
	TF_CPP_MIN_LOG_LEVEL=2 $(PY) -m pytest -q -rs -n $(PYTEST_WORKERS) -m "not slow and not jax" tests

# Integration tests (training, export of every preset, reload, fresh processes, whole
# studies, distribution, benchmark runs).
test-slow: $(STAMP)
	TF_CPP_MIN_LOG_LEVEL=2 $(PY) -m pytest -q -n $(PYTEST_WORKERS) -m "slow and not jax" tests

test-all: $(STAMP)
	TF_CPP_MIN_LOG_LEVEL=2 $(PY) -m pytest -q -n $(PYTEST_WORKERS) -m "not jax" tests

# The layer, encoder and keras-hub family tests again under the JAX backend (CPU),
# and training under JAX (pre-training, fine-tuning, DataParallel on two virtual
# devices, one step equal to TensorFlow's), and the shard input path without TensorFlow.
JAX_TESTS := tests/test_layers.py tests/test_numerics.py tests/test_backbone.py \
	tests/test_method3.py tests/test_method4_speed_path.py tests/test_numpy_reference.py \
	tests/test_position_encodings_beyond.py tests/test_pre_layer_norm.py \
	tests/test_keras_hub_family.py \
	tests/test_optimization.py tests/test_jax_training.py tests/test_shards.py tests/test_benchmarks_jax.py \
	tests/test_task_finetuning.py tests/test_stages.py tests/test_squad_without_tensorflow.py \
	tests/test_tupe_bpe_tokenizer.py tests/test_packaging.py tests/test_fused_gradients.py
test-jax: $(JAX_STAMP)
	TF_CPP_MIN_LOG_LEVEL=2 KERAS_BACKEND=jax $(PY) -m pytest -q -n $(PYTEST_WORKERS) $(JAX_TESTS)

# Stage S1 at the tiny size on a stand-in of the lent GPU machine (tests/gpu_standin.py):
# CPython 3.12 with only the image's packages (experiments/gpu_image.txt), a fresh HOME, no
# KERAS_BACKEND, no TensorFlow; the command the stage prints, run as it is.
test-stage: $(STAMP)
	$(PY) -m tests.gpu_standin --stage S1

demo: $(STAMP)
	TF_CPP_MIN_LOG_LEVEL=2 KERAS_TUPE_DATA_DIR=$(DATA_DIR) $(PY) -m training.demo

clean:
	rm -rf $(VENV)
