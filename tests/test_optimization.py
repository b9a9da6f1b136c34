"""The schedule, aggregated clipping and weight-decay exclusions."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_tupe.models import MaskedLM, TupeBackbone
from keras_tupe.optimization import (
    AdamW,
    AggregatedClippingMixin,
    LinearWarmupLinearDecay,
    create_optimizer,
    decay_exclusions,
)


def test_schedule_values_by_hand():
    schedule = LinearWarmupLinearDecay(1e-4, warmup_steps=4, total_steps=12)
    got = [float(schedule(step)) for step in range(13)]
    # warm-up: (s+1)/4; decay: (12 - s)/8; 0 after the last step.
    want = [2.5e-5, 5e-5, 7.5e-5, 1e-4, 1e-4, 8.75e-5, 7.5e-5, 6.25e-5, 5e-5, 3.75e-5,
            2.5e-5, 1.25e-5, 0.0]
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-12)


def test_schedule_is_serializable():
    schedule = LinearWarmupLinearDecay(3e-5, 6, 100)
    revived = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(schedule))
    assert revived.get_config() == schedule.get_config()
    assert float(revived(50)) == pytest.approx(float(schedule(50)))


def test_schedule_rejects_bad_arguments():
    with pytest.raises(ValueError, match="warmup_steps < total_steps.*warmup_steps=10"):
        LinearWarmupLinearDecay(1e-4, 10, 10)


class ClippedSGD(AggregatedClippingMixin, keras.optimizers.SGD):
    """SGD makes the clipped gradient visible in the update (Adam would normalize it)."""


def _one_distributed_sgd_step(optimizer_factory, clip):
    """A linear model, 2 replicas with different halves of the batch, one SGD step."""
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    x = np.array([[1.0, 0.0], [0.0, 1.0], [3.0, 0.0], [0.0, -2.0]], "float32")
    y = np.zeros((4, 1), "float32")
    with strategy.scope():
        model = keras.Sequential([keras.Input((2,)),
                                  keras.layers.Dense(1, use_bias=False, kernel_initializer="ones")])
        model.compile(optimizer=optimizer_factory(clip), loss="mse")
    model.fit(x, y, batch_size=4, epochs=1, shuffle=False, verbose=0)
    # The aggregated gradient of the mean squared error over the global batch.
    w = np.ones((2, 1))
    gradient = 2 * x.T @ (x @ w - y) / 4
    return model.layers[0].kernel.numpy(), w, gradient


@pytest.mark.parametrize("clip", [0.5, 100.0])
def test_clipping_uses_the_aggregated_gradient_once(clip):
    kernel, w, gradient = _one_distributed_sgd_step(
        lambda c: ClippedSGD(learning_rate=1.0, global_clipnorm=c), clip
    )
    norm = np.linalg.norm(gradient)  # sqrt(2.5^2 + 1^2) / ... = 2.69
    assert norm > 0.5
    expected = w - gradient * min(1.0, clip / norm)
    np.testing.assert_allclose(kernel, expected, rtol=1e-6)


def test_keras_global_clipnorm_would_clip_per_replica():
    """Why the mixin exists: Keras's own clipping gives another (wrong) step."""
    kernel, w, gradient = _one_distributed_sgd_step(
        lambda c: keras.optimizers.SGD(learning_rate=1.0, global_clipnorm=c), 0.5
    )
    correct = w - gradient * 0.5 / np.linalg.norm(gradient)
    assert not np.allclose(kernel, correct, rtol=1e-3)


def test_adamw_config_round_trip_keeps_the_clip():
    optimizer = AdamW(learning_rate=1e-3, global_clipnorm=1.0)
    assert optimizer.aggregated_clipnorm == 1.0 and optimizer.global_clipnorm is None
    revived = AdamW.from_config(optimizer.get_config())
    assert revived.aggregated_clipnorm == 1.0 and revived.global_clipnorm is None


@pytest.mark.parametrize("preset", ["tupe_r_tiny", "bert_r_tiny", "huang_m2_tiny", "shaw_tiny"])
def test_weight_decay_skips_exactly_biases_layernorms_and_positional_scalars(preset):
    model = MaskedLM(TupeBackbone.from_preset(preset))
    excluded = {v.path for v in decay_exclusions(model)}
    for variable in model.trainable_variables:
        name = variable.path.split("/")[-1]
        should_skip = name in ("bias", "gamma", "beta", "output_bias", "relative_attention_bias",
                               "cls_to_others", "others_to_cls") or (
            name == "relative_embeddings" and len(variable.shape) == 1
        )
        assert (variable.path in excluded) == should_skip, variable.path
    # Decay is applied by Keras only where intended: one step with zero
    # gradients leaves the excluded variables untouched and shrinks the others.
    optimizer = create_optimizer(model, learning_rate=0.1, total_steps=10, warmup_steps=0,
                                 weight_decay=0.5, clip_norm=1.0)
    before = {v.path: v.numpy().copy() for v in model.trainable_variables}
    optimizer.apply_gradients([(tf.zeros_like(v), v) for v in model.trainable_variables])
    for variable in model.trainable_variables:
        changed = not np.array_equal(variable.numpy(), before[variable.path])
        if np.any(before[variable.path]):
            assert changed == (variable.path not in excluded), variable.path
