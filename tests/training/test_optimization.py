"""The schedule, aggregated clipping and weight-decay exclusions."""

import keras
import keras_hub
import numpy as np
import pytest
import tensorflow as tf
from keras import ops

from keras_tupe.models import TupeBackbone
from keras_tupe.optimization import (
    AdamW,
    AggregatedClippingMixin,
    LinearWarmupLinearDecay,
    create_optimizer,
    decay_exclusions,
)
from keras_tupe_base.presets import SIZES, VARIANTS
from tests.backends import backends, on_every_backend


# tf.distribute and the aggregated clipping exist on the TensorFlow backend only.
tensorflow_only = pytest.mark.skipif(
    keras.backend.backend() != "tensorflow", reason="needs the TensorFlow backend"
)


@backends
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


@tensorflow_only
@pytest.mark.parametrize("clip", [0.5, 100.0])
def test_clipping_uses_the_aggregated_gradient_once(clip):
    kernel, w, gradient = _one_distributed_sgd_step(
        lambda c: ClippedSGD(learning_rate=1.0, global_clipnorm=c), clip
    )
    norm = np.linalg.norm(gradient)  # sqrt(2.5^2 + 1^2) / ... = 2.69
    assert norm > 0.5
    expected = w - gradient * min(1.0, clip / norm)
    np.testing.assert_allclose(kernel, expected, rtol=1e-6)


@tensorflow_only
def test_keras_global_clipnorm_would_clip_per_replica():
    """Why the mixin exists: Keras's own clipping gives another (wrong) step."""
    kernel, w, gradient = _one_distributed_sgd_step(
        lambda c: keras.optimizers.SGD(learning_rate=1.0, global_clipnorm=c), 0.5
    )
    correct = w - gradient * 0.5 / np.linalg.norm(gradient)
    assert not np.allclose(kernel, correct, rtol=1e-3)


@tensorflow_only
def test_adamw_config_round_trip_keeps_the_clip():
    optimizer = AdamW(learning_rate=1e-3, global_clipnorm=1.0)
    assert optimizer.aggregated_clipnorm == 1.0 and optimizer.global_clipnorm is None
    revived = AdamW.from_config(optimizer.get_config())
    assert revived.aggregated_clipnorm == 1.0 and revived.global_clipnorm is None


def _with_masked_lm_head(backbone):
    """The backbone under keras-hub's `MaskedLMHead`, in a plain functional model.

    Built here rather than with keras_tupe's masked-LM task so that the test
    follows keras-hub's head, whatever the task class is called.
    """
    inputs = dict(backbone.input)
    positions = keras.Input(shape=(None,), dtype="int32", name="mask_positions")
    sequence = backbone(inputs)["sequence_output"]
    head = keras_hub.layers.MaskedLMHead(
        vocabulary_size=SIZES["tiny"]["vocabulary_size"], name="mlm_head"
    )
    logits = head(sequence, mask_positions=positions)
    return keras.Model({**inputs, "mask_positions": positions}, logits)


def _zero_gradient_adamw_step(model, excluded, learning_rate=0.1, weight_decay=0.5):
    """One AdamW step with zero gradients (Adam's own step is then 0): the paths
    in `excluded` must not move, every other variable shrinks by `lr * wd * w`."""
    optimizer = create_optimizer(model, learning_rate=learning_rate, total_steps=10,
                                 warmup_steps=0, weight_decay=weight_decay, clip_norm=1.0)
    before = {v.path: np.array(v.numpy()) for v in model.trainable_variables}
    optimizer.apply_gradients(
        [(np.zeros(v.shape, v.dtype), v) for v in model.trainable_variables]
    )
    for variable in model.trainable_variables:
        w = before[variable.path]
        want = w if variable.path in excluded else w - learning_rate * weight_decay * w
        np.testing.assert_allclose(variable.numpy(), want, rtol=1e-6, atol=0,
                                   err_msg=variable.path)


# What the papers leave undecayed, by variable name (the last part of its path).
# BERT/RoBERTa: no decay on biases and LayerNorm scales/offsets (dense `bias`,
# LayerNorm `gamma`/`beta`, the MLM head's `output_bias`). T5/TUPE-R: the
# relative bias table is a bias. TUPE Eq. 9: θ1/θ2 of the [CLS] reset are
# biases of the positional term. Huang et al. methods 1/2: the scalar table
# multiplies the logits and starts at 1, so decay would flatten the attention.
ALWAYS_EXEMPT = {"bias", "gamma", "beta", "output_bias"}
T5_TABLE = "relative_attention_bias"
CLS_THETAS = ("cls_to_others", "others_to_cls")
SCALAR_TABLE_METHODS = ("method1", "method2")


def _has_cls_thetas(variant_config):
    # The authors' reset (cls_reset_style="fairseq") takes [CLS] terms from reserved
    # rows of the position table and T5 buckets: no θ parameters.
    return bool(variant_config.get("cls_reset")) and (
        variant_config.get("cls_reset_style", "paper") == "paper")


def _expected_exclusions(model, variant_config):
    """Paths of the variables to exclude, from names and the variant's config only."""
    exempt = set(ALWAYS_EXEMPT)
    if variant_config.get("relative_position") == "t5_bias":
        exempt.add(T5_TABLE)
    if _has_cls_thetas(variant_config):
        exempt.update(CLS_THETAS)
    if variant_config.get("relative_position") in SCALAR_TABLE_METHODS:
        exempt.add("relative_embeddings")
    return {v.path for v in model.weights if v.path.split("/")[-1] in exempt}


@pytest.mark.parametrize("variant", on_every_backend(sorted(VARIANTS)))
def test_decay_exclusions_are_what_the_papers_exclude(variant):
    config = VARIANTS[variant]
    model = _with_masked_lm_head(TupeBackbone.from_preset(f"{variant}_tiny"))
    paths = [v.path for v in model.weights]
    assert len(set(paths)) == len(paths), "variable paths must identify variables"
    excluded = decay_exclusions(model)
    got = {v.path for v in excluded}
    assert len(got) == len(excluded), "each variable listed once"
    assert {id(v) for v in excluded} <= {id(v) for v in model.weights}
    want = _expected_exclusions(model, config)
    assert got == want, (sorted(got - want), sorted(want - got))

    # The positional weights the variant owns were really found, by name.
    names = [path.split("/")[-1] for path in got]
    relative = config.get("relative_position")
    assert names.count(T5_TABLE) == (relative == "t5_bias")
    assert all(names.count(name) == _has_cls_thetas(config) for name in CLS_THETAS)
    assert names.count("relative_embeddings") == (
        SIZES["tiny"]["num_layers"] if relative in SCALAR_TABLE_METHODS else 0
    )
    assert names.count("output_bias") == 1
    assert all(len(v.shape) == 1 for v in excluded if v.path.endswith("relative_embeddings"))
    # Kernels, embeddings, position tables and vector tables are decayed.
    assert not {"kernel", "embeddings", "position_embeddings", "output_kernel"} & set(names)
    _zero_gradient_adamw_step(model, got)


class _GainDense(keras.layers.Layer):
    """`x W * g`: a kernel (decayed) and a gain starting at 1 that it exempts."""

    def build(self, inputs_shape):
        self.kernel = self.add_weight(name="kernel", shape=(inputs_shape[-1], 3))
        self.gain = self.add_weight(name="gain", shape=(3,), initializer="ones")

    @property
    def decay_exempt_weights(self):
        return [self.gain]

    def call(self, inputs):
        return ops.matmul(inputs, self.kernel) * self.gain


class _PlainKernel(keras.layers.Layer):
    """A kernel and nothing declared: it must be decayed."""

    def build(self, inputs_shape):
        self.kernel = self.add_weight(name="kernel", shape=(inputs_shape[-1], 2))

    def call(self, inputs):
        return ops.matmul(inputs, self.kernel)


class _Wrapper(keras.layers.Layer):
    """Nests a `_GainDense`, so the declaration must be found below the top level."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.inner = _GainDense(name="inner_gain")

    def build(self, inputs_shape):
        self.inner.build(inputs_shape)

    def call(self, inputs):
        return self.inner(inputs)


def _custom_model():
    gain = _GainDense(name="gain_dense")
    wrapper = _Wrapper(name="wrapper")
    plain = _PlainKernel(name="plain")
    inputs = keras.Input((4,))
    outputs = plain(keras.layers.Concatenate()([gain(inputs), wrapper(inputs)]))
    return keras.Model(inputs, outputs), gain, wrapper.inner, plain


@backends
def test_a_layer_declaring_decay_exempt_weights_is_excluded():
    """Any layer's `decay_exempt_weights` is honoured, nested or not, although
    no list in `keras_tupe.optimization` names the layer."""
    model, gain, inner, plain = _custom_model()
    excluded = {id(v) for v in decay_exclusions(model)}
    assert excluded == {id(gain.gain), id(inner.gain)}
    assert id(gain.kernel) not in excluded and id(plain.kernel) not in excluded


@backends
def test_declared_weights_stay_and_undeclared_kernels_decay_by_lr_wd_w():
    model, gain, inner, plain = _custom_model()
    for variable in (gain.gain, inner.gain):
        variable.assign(np.array([1.0, -2.0, 0.5], "float32"))
    learning_rate, weight_decay = 0.1, 0.5
    kernel = np.array(plain.kernel.numpy())
    gains = [np.array(gain.gain.numpy()), np.array(inner.gain.numpy())]
    _zero_gradient_adamw_step(model, {gain.gain.path, inner.gain.path},
                              learning_rate=learning_rate, weight_decay=weight_decay)
    np.testing.assert_array_equal(gain.gain.numpy(), gains[0])
    np.testing.assert_array_equal(inner.gain.numpy(), gains[1])
    assert np.all(np.abs(kernel) > 0)
    np.testing.assert_allclose(plain.kernel.numpy(), kernel * (1 - learning_rate * weight_decay),
                               rtol=1e-6, atol=0)
