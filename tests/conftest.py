import os


def _share_the_cores():
    """Caps each pytest worker's thread pools at its share of the cores, before any import.

    With `-n 2` on 2 cores, each worker's TensorFlow, XLA and OpenMP pools otherwise size
    themselves to every core, and the two workers' threads contend (measured in
    docs/design.md's "The test suite"). Subprocesses a test starts inherit the share. Inter-op
    stays at 2 at least: MirroredStrategy's two logical CPU devices run their collectives
    concurrently. `PYTEST_SHARE_CORES=0` turns it off.
    """
    if os.environ.get("PYTEST_SHARE_CORES", "1") == "0":
        return
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    threads = str(max(1, len(os.sched_getaffinity(0)) // workers))
    for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                 "TF_NUM_INTRAOP_THREADS"):
        os.environ.setdefault(name, threads)
    os.environ.setdefault("TF_NUM_INTEROP_THREADS", str(max(2, int(threads))))
    if threads == "1" and "intra_op_parallelism_threads" not in os.environ.get("XLA_FLAGS", ""):
        os.environ["XLA_FLAGS"] = " ".join(filter(None, [
            os.environ.get("XLA_FLAGS"),
            "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"]))


_share_the_cores()
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
