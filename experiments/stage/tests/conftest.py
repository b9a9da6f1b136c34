"""The suite's set-up for the window's tests: tests/conftest.py's (each pytest worker's
share of the cores, TensorFlow's quiet start and two logical CPUs, Keras's backend by
default TensorFlow), and its fixture that starts each test at float32 with a fixed seed."""

from tests.conftest import _reset_keras_state  # noqa: F401  (an autouse fixture)
