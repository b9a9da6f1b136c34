"""Saving and loading keras_tupe models without their training state."""

import contextlib
import os
import warnings
import zipfile

import keras

from keras_tupe.staging import write_weights


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
    is one `keras_tupe.staging.WriteError` instead of HDF5's half-way failure (h5py's
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
