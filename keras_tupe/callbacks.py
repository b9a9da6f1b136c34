"""Training callbacks: exact resume, checkpoints by step, a CSV of losses by step, progress."""

import json
import os
import shutil
import time
import warnings

import keras
import numpy as np

from keras_tupe.models.preset_folders import checkpoint_name, write_preset_folder
from keras_tupe.models.saving import arrays_bytes, write_weights
from keras_tupe.processes import writing_alone
from keras_tupe_base.files import read_json
from keras_tupe_base.progress import Heartbeat
from keras_tupe_base.staging import staged, write_text

WEIGHTS = "model.weights.h5"
SEEDS = "seed_states.npz"
METADATA = "training_metadata.json"  # Keras's name, and what commits a backup


def backup_metadata(backup_dir):
    """The committed backup's `training_metadata.json` (`epoch`, `step`, `backup`, ...),
    or {} before the first."""
    return read_json(os.path.join(backup_dir, METADATA))


class AtomicBackupAndRestore(keras.callbacks.BackupAndRestore):
    """`BackupAndRestore` whose backup is all or nothing, with the dropout random state.

    Keras's own backup overwrites the weights file, then the epoch file, in place, and
    does not save the layers' `SeedGenerator` states: a kill between its writes resumes a
    run that silently leaves the path of an uninterrupted one. This one writes each
    backup (weights with the optimizer, the seed states) into a new folder `step_<N>` and
    commits it by atomically replacing `training_metadata.json`, which names that folder
    and its epoch; a killed and resumed run ends with the weights of one never killed.
    Backups in Keras's own layout are still restored.

    Private Keras API, for lack of a public route to change how a backup is written or
    where `fit` resumes: the `_save_model` / `_load_model` hooks, their paths,
    `_current_epoch`, `_last_batch_seen`, the model's `_initial_epoch`, and each layer's
    `_seed_generators` (the dropout state has no public accessor).
    """

    def __init__(self, backup_dir, delete_checkpoint=True, writes=True):
        # delete_checkpoint=False for a run stopped early on purpose (`until_step`):
        # Keras removes the backup at the end of `fit`, and the next call would start over.
        # writes=False: restores only (a process of several that does not write the run).
        super().__init__(backup_dir, save_freq="epoch",
                         delete_checkpoint=delete_checkpoint and writes)
        self.writes = writes

    def _save_model(self):
        if self.writes:
            write_backup(self.model, self.backup_dir, self._current_epoch,
                         self._last_batch_seen)

    def _load_model(self):
        metadata = backup_metadata(self.backup_dir)
        if not metadata:
            return
        if "backup" not in metadata:  # Keras's own layout, written by an earlier version
            super()._load_model()
            _restore_seeds(self.model, os.path.join(self.backup_dir, SEEDS))
            return
        restore_backup(self.model, self.backup_dir)
        self.model._initial_epoch = metadata["epoch"]


def write_backup(model, backup_dir, epoch, batch, keep_older=False):
    """Commits `model`'s weights with its optimizer's state and its layers' dropout random
    state as `backup_dir`'s backup of its optimizer step (`AtomicBackupAndRestore`'s, which
    a grid writes for each member too): written staged into `step_<N>/`, committed by
    replacing `training_metadata.json` (which names it, with `epoch` and `batch`), then the
    older backups removed unless `keep_older` (`remove_backups_but`). Returns its name."""
    step = int(model.optimizer.iterations.numpy())
    name = f"step_{step:09d}"
    if backup_metadata(backup_dir).get("backup") == name:
        return name  # this very state is already committed
    with writing_alone():
        _write_backup_folder(model, os.path.join(backup_dir, name), step)
    _commit_backup(backup_dir, {"epoch": epoch, "batch": batch, "step": step, "backup": name})
    if not keep_older:
        remove_backups_but(backup_dir, name)
    return name


def _write_backup_folder(model, folder, step):
    variables = [*model.weights, *model.optimizer.variables]
    with staged(folder, folder=True, needed=arrays_bytes(variables)) as partial:
        write_weights(model, os.path.join(partial, WEIGHTS))
        np.savez(os.path.join(partial, SEEDS), step=step, **{
            f"state_{i}": keras.ops.convert_to_numpy(v) for i, v in enumerate(_seed_states(model))})


def _commit_backup(backup_dir, metadata):
    write_text(os.path.join(backup_dir, METADATA), json.dumps(metadata))


def remove_backups_but(backup_dir, name):
    """Removes `backup_dir`'s backups but `name`, and the files of Keras's own layout."""
    keras_files = {"latest.weights.h5", "latest.weights.h5.bkp", f"{METADATA}.bkp", SEEDS}
    for entry in os.listdir(backup_dir):
        path = os.path.join(backup_dir, entry)
        if entry.startswith("step_") and entry != name:
            shutil.rmtree(path, ignore_errors=True)
        elif entry in keras_files:
            os.remove(path)


def restore_backup(model, backup_dir, name=None):
    """Loads `backup_dir`'s committed backup (or the one named `name`, e.g. `step_000000100`,
    kept beside it) into `model`: weights, optimizer state and dropout random state.
    Returns the step restored."""
    name = name or backup_metadata(backup_dir)["backup"]
    folder = os.path.join(backup_dir, name)
    if not model.optimizer.built:
        model.optimizer.build(model.trainable_variables)
    model.load_weights(os.path.join(folder, WEIGHTS))
    step = int(model.optimizer.iterations.numpy())
    if name != f"step_{step:09d}":
        raise ValueError(f"The backup {folder} holds step {step}, not the step its name says.")
    _restore_seeds(model, os.path.join(folder, SEEDS))
    return step


def _seed_states(model):
    # `_flatten_layers`: Keras 3 has no public recursive walk over sublayers.
    return [generator.state
            for layer in model._flatten_layers(include_self=True, recursive=True)
            for generator in layer._seed_generators]


def _restore_seeds(model, path):
    saved = np.load(path) if os.path.exists(path) else None
    states = _seed_states(model)
    step = int(model.optimizer.iterations.numpy())
    if saved is None or int(saved["step"]) != step or len(saved.files) - 1 != len(states):
        found = (f"No dropout random state in {path}" if saved is None else
                 f"The dropout random state in {path} belongs to step "
                 f"{int(saved['step'])}, not to the restored step {step}")
        warnings.warn(f"{found}; training resumes with other dropout masks than an "
                      "uninterrupted run would draw.")
        return
    for i, variable in enumerate(states):
        variable.assign(saved[f"state_{i}"])


class StepLogger(keras.callbacks.Callback):
    """Appends one CSV row per epoch: the step, losses, learning rate and speed.

    Put it before the backup callback: its row is then written before the backup commits
    the epoch, and a resumed run first drops the rows of steps after the restored one (an
    epoch that was logged but not committed), so no step is missing or logged twice.
    """

    COLUMNS = ("step", "loss", "accuracy", "val_loss", "val_accuracy", "learning_rate",
               "tokens_per_second", "elapsed_seconds")

    def __init__(self, path, tokens_per_step, steps_per_epoch):
        super().__init__()
        self.path = path
        self.tokens_per_step = tokens_per_step
        self.steps_per_epoch = steps_per_epoch

    def on_train_begin(self, logs=None):
        self._start = time.perf_counter()
        self._trimmed = False

    def on_epoch_begin(self, epoch, logs=None):
        if not self._trimmed:  # after every callback's on_train_begin: the restored step
            self._trimmed = True
            start_metrics(self.path, int(self.model.optimizer.iterations.numpy()))
        self._epoch_start = time.perf_counter()

    def on_epoch_end(self, epoch, logs=None):
        seconds = time.perf_counter() - self._epoch_start
        learning_rate = self.model.optimizer.learning_rate
        append_metrics(self.path, {
            **(logs or {}),
            "step": int(self.model.optimizer.iterations.numpy()),
            "learning_rate": float(keras.ops.convert_to_numpy(learning_rate)),
            "tokens_per_second": self.tokens_per_step * self.steps_per_epoch / seconds,
            "elapsed_seconds": time.perf_counter() - self._start,
        })


def start_metrics(path, step):
    """A run's `metrics.csv` (`StepLogger.COLUMNS`) as training starts or resumes at `step`:
    made with its header, or its rows after `step` dropped (logged, but not committed by
    a backup)."""
    if not os.path.exists(path):
        write_text(path, ",".join(StepLogger.COLUMNS) + "\n")
        return
    with open(path) as f:
        header, *rows = f.read().splitlines()
    kept = [row for row in rows if int(row.split(",")[0]) <= step]
    if len(kept) < len(rows):
        write_text(path, "\n".join([header, *kept]) + "\n")


def append_metrics(path, row):
    """Appends `row` (a dict of `StepLogger.COLUMNS`, a missing one empty) to `path`."""
    # The whole file again (a few kB), staged: a full disk leaves the old one whole.
    with open(path) as f:
        text = f.read()
    write_text(path, text + ",".join(_csv_value(row.get(c)) for c in StepLogger.COLUMNS)
               + "\n")


def _csv_value(value):
    if value is None:
        return ""
    return f"{value:.6g}" if isinstance(value, float) else str(value)


class StepCheckpoint(keras.callbacks.Callback):
    """Saves the masked LM as a preset folder after the chosen optimizer steps.

    `directory/step_NNNNNNN/` (`keras_tupe.models.preset_folders.checkpoint_name`), written
    by `write_preset_folder` like the run's final preset, without the optimizer's state,
    with `preprocessor` as the task's and the step in `metadata.json`
    (`keras_tupe_checkpoint`). Step 0, the initialization, is saved before the first step
    of a run that starts from scratch: the untrained encoder, a control for fine-tuning.

    Args:
        directory: str. The run's `checkpoints/` folder.
        steps: iterable of int. The optimizer steps to save after.
        preprocessor: a masked-LM preprocessor saved with each checkpoint, or None.
    """

    def __init__(self, directory, steps, preprocessor=None):
        super().__init__()
        self.directory = directory
        self.steps = set(steps)
        self.preprocessor = preprocessor
        self._first_batch = True

    def on_train_batch_begin(self, batch, logs=None):
        # After BackupAndRestore's `on_train_begin`: a resumed run is past step 0 here.
        if self._first_batch and 0 in self.steps:
            if int(self.model.optimizer.iterations.numpy()) == 0:
                self._save(0)
        self._first_batch = False

    def on_train_batch_end(self, batch, logs=None):
        step = int(self.model.optimizer.iterations.numpy())
        if step in self.steps:
            self._save(step)

    def _save(self, step):
        write_checkpoint(self.model, self.directory, step, self.preprocessor)


def write_checkpoint(model, directory, step, preprocessor=None):
    """`model` as the preset folder `directory/step_NNNNNNN/` (`StepCheckpoint`'s), with
    `preprocessor` as the task's; one that exists is kept (a resumed run's first)."""
    path = os.path.join(directory, checkpoint_name(step))
    if os.path.exists(path):
        return
    # The task's own preprocessor (training feeds packed batches, so it has none), so
    # `MaskedLM.from_preset` attaches it; one saved beside only would not be.
    preprocessor, model.preprocessor = model.preprocessor, preprocessor
    try:
        with writing_alone():
            write_preset_folder(model, path, "keras_tupe_checkpoint", {"step": step})
    finally:
        model.preprocessor = preprocessor


class StepProgress(keras.callbacks.Callback):
    """Progress counted in optimizer steps, for runs whose length is a number of steps.

    `fit` counts "epochs", which a step-based run uses only as blocks between validations.
    This prints a line at the end of each block (`step 100/300` with the metrics) and at
    least every `every` seconds within one, with steps/s and the time left; waits that end
    no step (compiling the first step, validation) get a `Heartbeat` line. Call `close()`
    when `fit` raises: Keras then skips `on_train_end`, which stops the heartbeat.

    Args:
        total_steps: int. The run's last step.
        steps_per_epoch: int. Steps in one `fit` epoch (a block).
        every: float. Seconds between lines within a block. Defaults to 5.
        print_fn: callable. Defaults to `print` (flushed).
    """

    def __init__(self, total_steps, steps_per_epoch, every=5.0, print_fn=None):
        super().__init__()
        self.total_steps, self.steps_per_epoch, self.every = total_steps, steps_per_epoch, every
        self.print_fn = print_fn or (lambda line: print(line, flush=True))
        self.epoch, self.first_step, self.start, self.last = 0, None, None, None
        self.started = False  # the first block has begun (its line printed)
        # The first step waits for its batches too (tokenizing, filling the shuffle buffer).
        self.heartbeat = Heartbeat(
            "  reading the first batches, building and compiling the training step", every,
            self.print_fn)

    def _print(self, line):
        self.heartbeat.touch()
        self.print_fn(line)

    def on_train_begin(self, logs=None):
        self.started = False
        self.heartbeat.start()

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch
        if not self.started:
            # The first block's start, not the optimizer's step count at on_train_begin:
            # a BackupAndRestore later in the list restores a run only then.
            self.started = True
            self._print(f"starting at step {epoch * self.steps_per_epoch}/{self.total_steps}: "
                        "reading the first batches, building and compiling the training step ...")

    def _line(self, step, logs):
        now = time.perf_counter()
        if self.first_step is None:
            self.first_step, self.start = step, now
        rate = (step - self.first_step) / (now - self.start) if now > self.start else 0.0
        left = f", {(self.total_steps - step) / rate:.0f}s left" if rate else ""
        metrics = ", ".join(f"{key} {float(value):.4g}" for key, value in (logs or {}).items())
        self.last = now
        return f"step {step}/{self.total_steps}: {metrics} ({rate:.2f} steps/s{left})"

    def on_train_batch_end(self, batch, logs=None):
        # `batch` is the last step of the call: with steps_per_execution > 1, `fit`
        # calls the batch hooks once per execution.
        # An execution longer than the block ends with the block (Keras counts past it).
        step = self.epoch * self.steps_per_epoch + min(batch + 1, self.steps_per_epoch)
        self.heartbeat.what = f"  training after step {step}/{self.total_steps}"
        if self.first_step is None or self.last is None:
            self._line(step, None)  # starts the clock at the first finished step
            self.heartbeat.touch()
            return
        # A block's last step is `on_epoch_end`'s line (with validation): printed once.
        block_end = (self.epoch + 1) * self.steps_per_epoch
        if step < block_end and time.perf_counter() - self.last >= self.every:
            self._print(self._line(step, logs))

    def on_test_begin(self, logs=None):
        self.heartbeat.what = "  validating"
        self.heartbeat.touch()

    def on_epoch_end(self, epoch, logs=None):
        self._print(self._line((epoch + 1) * self.steps_per_epoch, logs))

    def on_train_end(self, logs=None):
        self.close()

    def close(self):
        """Stops the heartbeat thread (idempotent)."""
        self.heartbeat.stop()
