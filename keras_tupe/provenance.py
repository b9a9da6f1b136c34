"""The versions and the machine a run records (`run_config.json`, a shard folder's manifest)."""

import os
import platform

import keras
import keras_hub
import numpy


def versions():
    """The versions and the machine, as `run_config.json` records them."""
    try:  # TensorFlow is optional: a JAX machine trains from shards without it
        import tensorflow as tf
    except ImportError:
        tf = None
    return {
        "python": platform.python_version(),
        "tensorflow": tf.__version__ if tf else None,
        "keras": keras.__version__,
        "keras_hub": keras_hub.__version__,
        "numpy": numpy.__version__,
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, {platform.platform()}",
    }
