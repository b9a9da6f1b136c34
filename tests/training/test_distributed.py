"""MirroredStrategy with XLA on 2 logical CPUs equals a single-device step."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_tupe.models import TupeMaskedLM, TupeBackbone
from keras_tupe.optimization import create_optimizer

B, L, P = 8, 16, 4


def _batches(steps):
    rng = np.random.default_rng(0)
    for _ in range(steps):
        x = {
            "token_ids": rng.integers(5, 1024, (B, L)).astype("int32"),
            "padding_mask": (np.arange(L) < rng.integers(8, L + 1, (B, 1))).astype("int32"),
            "segment_ids": np.zeros((B, L), "int32"),
            "mask_positions": rng.integers(1, 8, (B, P)).astype("int32"),
        }
        yield x, rng.integers(5, 1024, (B, P)).astype("int32"), (rng.random((B, P)) < 0.8).astype("float32")


def _train(strategy, precision, steps=2):
    keras.utils.set_random_seed(0)
    keras.config.set_dtype_policy(precision)
    with strategy.scope():
        model = TupeMaskedLM(TupeBackbone.from_preset("tupe_r_tiny", dropout=0.0))
        optimizer = create_optimizer(model, 1e-2, total_steps=10, warmup_steps=1, clip_norm=0.5)
        model.compile(optimizer=optimizer, jit_compile=True)
    losses = []
    for x, y, w in _batches(steps):
        dataset = tf.data.Dataset.from_tensors((x, y, w))
        history = model.fit(dataset, epochs=1, verbose=0)
        losses.append(history.history["loss"][0])
    return model, losses


@pytest.mark.slow
@pytest.mark.parametrize("precision", ["float32", "mixed_bfloat16"])
def test_mirrored_xla_step_equals_single_device_step(precision):
    single, single_losses = _train(tf.distribute.get_strategy(), precision)
    mirrored, mirrored_losses = _train(tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"]),
                                       precision)
    assert mirrored.distribute_strategy.num_replicas_in_sync == 2
    assert mirrored.xla_per_replica and mirrored._replica_step is not None
    assert not single.xla_per_replica and single.jit_compile  # Keras's own XLA
    np.testing.assert_allclose(mirrored_losses, single_losses, rtol=1e-5)
    updates = [
        (a.numpy().astype("float64") - initial, b.numpy().astype("float64") - initial)
        for a, b, initial in zip(mirrored.weights, single.weights, _initial_weights(precision))
    ]
    if precision == "float32":
        for mirrored_update, single_update in updates:
            scale = max(np.max(np.abs(single_update)), 1e-6)
            assert np.max(np.abs(mirrored_update - single_update)) <= 1e-4 * scale + 1e-8
    else:
        # bfloat16 rounds each replica's half-batch sums differently; Adam turns
        # the noise of the variables whose true gradient is 0 (θ1, key biases:
        # constant shifts of a softmax row) into full-size steps. Compare the
        # update of all parameters together instead.
        difference = np.sqrt(sum(np.sum((a - b) ** 2) for a, b in updates))
        size = np.sqrt(sum(np.sum(b**2) for _, b in updates))
        assert difference / size < 0.02, difference / size
    assert max(np.max(np.abs(b)) for _, b in updates) > 1e-3  # the steps moved weights


def _initial_weights(precision):
    keras.utils.set_random_seed(0)
    keras.config.set_dtype_policy(precision)
    model = TupeMaskedLM(TupeBackbone.from_preset("tupe_r_tiny", dropout=0.0))
    return [w.numpy().astype("float64") for w in model.weights]
