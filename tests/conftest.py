import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import keras_tupe_cli  # noqa: E402,F401  (first: TensorFlow starts quietly, no cuInit line in `make test`)
import keras  # noqa: E402
import pytest  # noqa: E402

try:
    import tensorflow as tf
except ImportError:  # the lent GPU machine, where stage S0 runs test_fused_gradients
    pass
else:
    # Two logical CPU devices, so MirroredStrategy tests have two replicas. This
    # must happen before TensorFlow initializes its devices, hence at import.
    tf.config.set_logical_device_configuration(
        tf.config.list_physical_devices("CPU")[0], [tf.config.LogicalDeviceConfiguration()] * 2
    )


@pytest.fixture(autouse=True)
def _reset_keras_state():
    """Each test starts with float32 and a fixed seed, whatever the last one set."""
    keras.config.set_dtype_policy("float32")
    keras.utils.set_random_seed(1234)
    yield
    keras.config.set_dtype_policy("float32")
