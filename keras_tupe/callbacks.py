"""Training callbacks: exact resume, checkpoints by step, a CSV of losses by step."""

import os
import time
import warnings

import keras
import numpy as np


class BackupAndRestoreWithSeeds(keras.callbacks.BackupAndRestore):
    """`BackupAndRestore` that also restores the dropout random state.

    Keras's backup saves the weights and the optimizer but not the state of
    the layers' `SeedGenerator`s, so a resumed run draws other dropout masks
    than an uninterrupted one. This subclass saves those states after each
    backup, tagged with the optimizer step, and restores them when the tag
    matches the restored weights (it warns otherwise: a kill between the two
    writes). With them, a killed and resumed run ends with the same weights as
    an uninterrupted run.
    """

    def _seed_path(self):
        return os.path.join(self.backup_dir, "seed_states.npz")

    def _seed_states(self):
        return [
            generator.state
            for layer in self.model._flatten_layers(include_self=True, recursive=True)
            for generator in layer._seed_generators
        ]

    def _save_model(self):
        super()._save_model()
        states = {f"state_{i}": keras.ops.convert_to_numpy(v) for i, v in enumerate(self._seed_states())}
        temporary = self._seed_path() + ".tmp.npz"
        np.savez(temporary, step=int(self.model.optimizer.iterations.numpy()), **states)
        os.replace(temporary, self._seed_path())

    def _load_model(self):
        super()._load_model()
        if not os.path.exists(self._seed_path()):
            return
        saved = np.load(self._seed_path())
        states = self._seed_states()
        step = int(self.model.optimizer.iterations.numpy())
        if int(saved["step"]) != step or len(saved.files) - 1 != len(states):
            warnings.warn(
                f"The dropout random state in {self._seed_path()} belongs to step "
                f"{int(saved['step'])}, not to the restored step {step}; training resumes "
                "with other dropout masks than an uninterrupted run would draw."
            )
            return
        for i, variable in enumerate(states):
            variable.assign(saved[f"state_{i}"])


class StepLogger(keras.callbacks.Callback):
    """Appends one CSV row per epoch: the step, losses, learning rate and speed."""

    COLUMNS = ("step", "loss", "accuracy", "val_loss", "val_accuracy", "learning_rate",
               "tokens_per_second", "elapsed_seconds")

    def __init__(self, path, tokens_per_step, steps_per_epoch):
        super().__init__()
        self.path = path
        self.tokens_per_step = tokens_per_step
        self.steps_per_epoch = steps_per_epoch

    def on_train_begin(self, logs=None):
        self._start = time.perf_counter()
        if not os.path.exists(self.path):
            with open(self.path, "w") as f:
                f.write(",".join(self.COLUMNS) + "\n")

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch_start = time.perf_counter()

    def on_epoch_end(self, epoch, logs=None):
        logs = logs or {}
        seconds = time.perf_counter() - self._epoch_start
        step = int(self.model.optimizer.iterations.numpy())
        learning_rate = self.model.optimizer.learning_rate
        row = {
            **logs,
            "step": step,
            "learning_rate": float(keras.ops.convert_to_numpy(learning_rate)),
            "tokens_per_second": self.tokens_per_step * self.steps_per_epoch / seconds,
            "elapsed_seconds": time.perf_counter() - self._start,
        }
        with open(self.path, "a") as f:
            f.write(",".join(_csv_value(row.get(c)) for c in self.COLUMNS) + "\n")


def _csv_value(value):
    if value is None:
        return ""
    return f"{value:.6g}" if isinstance(value, float) else str(value)


class StepCheckpoint(keras.callbacks.Callback):
    """Saves the masked-LM model as `.keras` after the chosen optimizer steps."""

    def __init__(self, directory, steps):
        super().__init__()
        self.directory = directory
        self.steps = set(steps)

    def on_train_batch_end(self, batch, logs=None):
        step = int(self.model.optimizer.iterations.numpy())
        if step in self.steps:
            path = os.path.join(self.directory, f"step_{step:07d}.keras")
            if not os.path.exists(path):  # a resumed run keeps the first one
                os.makedirs(self.directory, exist_ok=True)
                self.model.save(path)
