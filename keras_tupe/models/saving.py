"""Saving and loading keras_tupe models without their training state."""

import contextlib
import io
import os
import warnings
import zipfile

import keras
import numpy as np
# Private: Keras writes weights to memory only inside `.keras` archives (`write_weights`).
from keras.src.saving import saving_lib

from keras_tupe_base.staging import write_bytes

# Room HDF5 and zip need around the arrays themselves (headers, one entry per variable).
_OVERHEAD_BYTES = 1 << 20
_PER_ARRAY_BYTES = 4096


def arrays_bytes(variables):
    """What a weights file of `variables` (Keras variables or arrays) needs on disk."""
    variables = list(variables)
    total = sum(int(getattr(v, "nbytes", 0) or np.prod(v.shape, dtype=np.int64)
                    * np.dtype(getattr(v.dtype, "name", v.dtype)).itemsize)
                for v in variables)
    return total + _OVERHEAD_BYTES + _PER_ARRAY_BYTES * len(variables)


def write_weights(model, path, objects_to_skip=()):
    """`model.save_weights(path)` (Keras's `.weights.h5` file), written as a whole.

    HDF5 reports a full disk or a file-size limit met half-way through its writes, then
    again from h5py's destructors, and can crash the process (a segmentation fault): so
    the file is made in memory, where its writes cannot fail, and then written by
    `write_bytes`. Keras saves to memory only inside `.keras` archives; its `H5IOStore`
    (which takes an `io.BytesIO`) and `_save_state` are what `save_weights` itself calls.

    Args:
        model: a built Keras model or layer.
        path: str. The file to write; its name ends in `.weights.h5`.
        objects_to_skip: layers whose weights are left out (keras-hub's task weights
            leave out the backbone's).
    """
    path = os.fspath(path)
    if not path.endswith(".weights.h5"):
        raise ValueError(f"The filename must end in `.weights.h5`. Received: filepath={path}")
    if not model.built:
        raise ValueError(f"{model.name} is not built: it has no weights to save yet. Build it "
                         "first (call it on some data, or `build()`).")
    image = io.BytesIO()
    store = saving_lib.H5IOStore(image, mode="w")
    try:
        saving_lib._save_state(model, weights_store=store, assets_store=None, inner_path="",
                               visited_saveables={id(o) for o in objects_to_skip})
    finally:
        store.close()
    return write_bytes(path, image.getbuffer())


@contextlib.contextmanager
def without_training_state(model):
    """Meanwhile, saving `model` writes its architecture and weights only.

    The optimizer's state (Adam's moments) and the compile settings are left
    out, as keras-hub presets leave them out: a saved model is loaded to be
    fine-tuned, evaluated or served, and compiled anew for that (a keras-hub
    task compiles itself with a default optimizer when built, so a loaded one
    never had a use for the saved moments: Keras warned it skipped them, issue
    23; `load_saved_model` and `TupeTask.load_task_weights` leave out the
    warning that the absent state now gives). Resuming an interrupted run reads
    the run's `backup/`, which keeps the full state.
    """
    optimizer = getattr(model, "optimizer", None)
    compiled = getattr(model, "compiled", False)
    model.optimizer, model.compiled = None, False
    try:
        yield model
    finally:
        model.optimizer, model.compiled = optimizer, compiled


def load_saved_model(path):
    """`keras.saving.load_model(path, compile=False)` of a saved keras_tupe model or task.

    A keras-hub task compiles itself with a default optimizer when it is built, so
    loading one always meets an optimizer of 2 variables (iterations, learning rate)
    that the file, saved `without_training_state`, does not hold: Keras then warns
    "Skipping variable loading for optimizer ...", about a state that is meant to be
    absent. That one warning is not shown; every other one is.
    """
    path = os.fspath(path)
    # Keras says "File not found" for a `.keras` file that exists but is no whole zip.
    if os.path.isfile(path) and path.endswith(".keras") and not zipfile.is_zipfile(path):
        raise ValueError(f"{path} is not a readable .keras file: it is not a complete zip "
                         "archive (truncated or corrupt). Save the model again.")
    try:
        with absent_optimizer_state_expected():
            return keras.saving.load_model(path, compile=False)
    except (zipfile.BadZipFile, EOFError) as error:
        raise ValueError(f"{path} is not a readable .keras file (corrupt: {error}). Save "
                         "the model again.") from error


@contextlib.contextmanager
def absent_optimizer_state_expected():
    """Meanwhile, Keras's "Skipping variable loading for optimizer" warning is not shown."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Skipping variable loading for optimizer")
        yield


class WholeWeightsFiles:
    """Mixed in before a Keras model class: `save_weights` writes through `write_weights`.

    The file is made in memory and written whole, so a full disk or a file-size limit
    is one `keras_tupe_base.staging.WriteError` instead of HDF5's half-way failure (h5py's
    destructors, then a crash). keras-hub's preset saver calls this method for a
    backbone's `model.weights.h5`; a task's `task.weights.h5` is `TupeTask`'s.
    """

    def save_weights(self, filepath, overwrite=True, max_shard_size=None):
        """Keras's `save_weights`; sharded files (`max_shard_size`, which keras-hub
        passes for a backbone over 10 GB) and the question before overwriting
        (`overwrite=False`) stay Keras's own."""
        if max_shard_size is not None or not overwrite:
            return super().save_weights(filepath, overwrite, max_shard_size)
        write_weights(self, filepath)
