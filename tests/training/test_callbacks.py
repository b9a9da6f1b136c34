"""Resume after a kill at any moment of a backup: the same weights, no step lost or logged twice.

A kill is simulated by an exception raised at one point of the backup callback's save;
the resumed run is a new model with the same seed, as a new process would build it.
"""

import json
import os
import warnings
from unittest import mock

import keras
import numpy as np
import pytest

from keras_tupe.callbacks import AtomicBackupAndRestore, StepCheckpoint, StepLogger
from keras_tupe.models.saving import write_weights

STEPS_PER_EPOCH, EPOCHS = 4, 3
X = np.random.default_rng(0).normal(size=(16, 4)).astype("float32")
Y = X @ np.arange(1.0, 5.0, dtype="float32")[:, None]


class Killed(Exception):
    """Stands for SIGKILL: nothing after it runs."""


def _model():
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8),
                              keras.layers.Dropout(0.5), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.Adam(0.05), loss="mse")
    return model


class EpochsRun(keras.callbacks.Callback):
    def on_train_begin(self, logs=None):
        self.epochs = []

    def on_epoch_begin(self, epoch, logs=None):
        self.epochs.append(epoch)


def _fit(model, tmp_path, backup):
    tmp_path.mkdir(exist_ok=True)
    epochs = EpochsRun()
    logger = StepLogger(str(tmp_path / "metrics.csv"), 1, STEPS_PER_EPOCH)
    # The order of the pre-training loop: the logger writes before the backup commits.
    model.fit(X, Y, batch_size=4, epochs=EPOCHS, shuffle=False, verbose=0,
              callbacks=[epochs, logger, backup])
    return epochs.epochs


class KilledAt(AtomicBackupAndRestore):
    """Dies at `point` of the second backup (after epoch 2, step 8)."""

    def __init__(self, backup_dir, point):
        super().__init__(backup_dir)
        self.point = point

    def _save_model(self):
        if int(self.model.optimizer.iterations.numpy()) != 2 * STEPS_PER_EPOCH:
            return super()._save_model()

        def die(*args):
            raise Killed

        def write_then_die(model, path):
            write_weights(model, path)
            raise Killed

        where, how = {"after the weights": ("write_weights", write_then_die),
                      "before the backup": ("_write_backup_folder", die),
                      "before the commit": ("_commit_backup", die),
                      "after the commit": ("remove_backups_but", die)}[self.point]
        with mock.patch(f"keras_tupe.callbacks.{where}", how):
            super()._save_model()


@pytest.mark.parametrize("point, resumed_epochs", [
    ("before the backup", [1, 2]),  # the logger's row of step 8 is written, not committed
    ("after the weights", [1, 2]),
    ("before the commit", [1, 2]),
    ("after the commit", [2]),
])
def test_a_kill_anywhere_in_a_backup_resumes_to_the_same_weights(tmp_path, point, resumed_epochs):
    straight = _model()
    assert _fit(straight, tmp_path / "straight", AtomicBackupAndRestore(str(tmp_path / "a"))) \
        == [0, 1, 2]

    backup = tmp_path / "b"
    with pytest.raises(Killed):
        _fit(_model(), tmp_path / "killed", KilledAt(str(backup), point))
    committed = json.loads((backup / "training_metadata.json").read_text())
    assert committed["step"] == STEPS_PER_EPOCH * (3 - len(resumed_epochs))

    resumed = _model()
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*dropout")  # the state is restored
        assert _fit(resumed, tmp_path / "killed", AtomicBackupAndRestore(str(backup))) \
            == resumed_epochs
    assert int(resumed.optimizer.iterations.numpy()) == STEPS_PER_EPOCH * EPOCHS
    for got, want in zip(resumed.weights, straight.weights):
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6, atol=1e-7)
    steps = [int(row.split(",")[0])
             for row in (tmp_path / "killed" / "metrics.csv").read_text().splitlines()[1:]]
    assert steps == [4, 8, 12]  # none lost, none twice
    assert not backup.exists()  # removed once training finished, as Keras does


def test_without_the_dropout_state_the_resumed_run_differs(tmp_path):
    """The test above can fail: restoring the weights alone does not give the same run."""
    straight = _model()
    _fit(straight, tmp_path / "straight", AtomicBackupAndRestore(str(tmp_path / "a")))

    backup = tmp_path / "b"
    with mock.patch("keras_tupe.callbacks._seed_states", lambda model: []):
        with pytest.raises(Killed):
            _fit(_model(), tmp_path / "killed", KilledAt(str(backup), "after the commit"))
        resumed = _model()
        _fit(resumed, tmp_path / "killed", AtomicBackupAndRestore(str(backup)))
    assert int(resumed.optimizer.iterations.numpy()) == STEPS_PER_EPOCH * EPOCHS
    assert not all(np.allclose(got.numpy(), want.numpy(), rtol=1e-6, atol=1e-7)
                   for got, want in zip(resumed.weights, straight.weights))


def test_a_backup_in_keras_own_layout_is_restored(tmp_path):
    """A run killed under an earlier version (Keras's files, no folder) still resumes."""
    backup = tmp_path / "b"

    class KerasKilled(keras.callbacks.BackupAndRestore):
        def on_epoch_end(self, epoch, logs=None):
            super().on_epoch_end(epoch, logs)
            if epoch == 1:
                raise Killed

    with pytest.raises(Killed):
        _fit(_model(), tmp_path / "killed", KerasKilled(str(backup)))
    assert json.loads((backup / "training_metadata.json").read_text())["epoch"] == 2
    resumed = _model()
    with pytest.warns(UserWarning, match="No dropout random state"):
        assert _fit(resumed, tmp_path / "killed", AtomicBackupAndRestore(str(backup))) == [2]
    assert int(resumed.optimizer.iterations.numpy()) == STEPS_PER_EPOCH * EPOCHS


def _masked_lm():
    """A tiny masked LM and 16 packed, masked batches of 1 (what pre-training fits)."""
    from keras_tupe.models import TupeBackbone, TupeMaskedLM

    keras.utils.set_random_seed(0)
    model = TupeMaskedLM(TupeBackbone.from_preset("tupe_r_tiny", vocabulary_size=12))
    # SGD: what is checked is which weights a checkpoint holds, and Adam's update, traced for
    # every weight, would take most of the test's time.
    model.compile(optimizer=keras.optimizers.SGD(0.05))
    rng = np.random.default_rng(0)
    x = {"token_ids": rng.integers(5, 12, (16, 8)).astype("int32"),
         "padding_mask": np.ones((16, 8), "int32"), "segment_ids": np.zeros((16, 8), "int32"),
         "mask_positions": np.tile(np.array([1, 3], "int32"), (16, 1))}
    return model, x, rng.integers(5, 12, (16, 2)).astype("int32")


def _fit_masked_lm(model, x, y, callbacks):
    # Keras's own fit, as pre-training's (finished batches, no preprocessor).
    keras.Model.fit(model, x, y, batch_size=4, epochs=2, shuffle=False, verbose=0,
                    callbacks=callbacks)


def test_a_checkpoint_killed_mid_save_is_not_kept(tmp_path):
    """The checkpoint of a step appears whole or not at all: a resumed run keeps an existing one."""
    from keras_tupe.models import TupeMaskedLM, TupeMaskedLMPreprocessor, TupeTokenizer

    model, x, y = _masked_lm()

    def half_then_die(path, *args, **kwargs):
        with open(os.path.join(path, "config.json"), "w") as f:
            f.write("half a preset")
        raise Killed
    model.save_to_preset = half_then_die
    checkpoint = tmp_path / "checkpoints" / "step_0000006"
    with pytest.raises(Killed):
        _fit_masked_lm(model, x, y, [StepCheckpoint(str(tmp_path / "checkpoints"), [6])])
    assert not checkpoint.exists()  # so the resumed run writes it
    assert os.listdir(tmp_path / "checkpoints") == []  # nor its staging copy
    at_step_6 = {}

    class Weights(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if int(self.model.optimizer.iterations.numpy()) == 6:
                at_step_6["weights"] = self.model.get_weights()

    tokenizer = TupeTokenizer(vocabulary=["[PAD]", "[CLS]", "[SEP]", "[UNK]", "[MASK]",
                                          *"abcdefg"])
    # The run again from step 0: the same model, its compiled training step reused.
    del model.save_to_preset
    model.optimizer.iterations.assign(0)
    _fit_masked_lm(model, x, y, [
        StepCheckpoint(str(tmp_path / "checkpoints"), [6],
                       TupeMaskedLMPreprocessor(tokenizer, sequence_length=8)), Weights()])
    assert model.preprocessor is None  # lent to the checkpoint only
    # A preset folder holding step 6's weights, with the run's preprocessor.
    saved = TupeMaskedLM.from_preset(str(checkpoint))
    assert isinstance(saved.preprocessor, TupeMaskedLMPreprocessor)
    for got, want in zip(saved.get_weights(), at_step_6["weights"], strict=True):
        np.testing.assert_array_equal(got, want)
