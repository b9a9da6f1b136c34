"""TupeBackbone: invariances, limits, errors, serialization, XLA and mixed precision."""

import keras
import numpy as np
import pytest
from keras import ops

from keras_tupe import TupeBackbone
from keras_tupe_base.presets import PRESETS
from keras_tupe_base.presets import VARIANTS
from tests.backends import backends, on_every_backend
from tests.reference_params import assert_close, randomize_weights

ALL_VARIANTS = sorted(VARIANTS)
RELATIVE_ONLY = [
    "alibi", "deberta", "huang_m1", "huang_m2", "huang_m3", "huang_m4", "rope", "shaw",
]
ABSOLUTE = sorted(set(ALL_VARIANTS) - set(RELATIVE_ONLY))
RNG = np.random.default_rng(11)
requires_tensorflow = pytest.mark.skipif(
    keras.backend.backend() != "tensorflow",
    reason="needs a TensorFlow graph (tf.function with a dynamic input signature)",
)


def to_numpy(x):
    return ops.convert_to_numpy(x)


def make_inputs(batch, length, real=None, vocabulary_size=1024, seed=0):
    """Random inputs; the first `real` tokens of each row are real, the rest padding."""
    rng = np.random.default_rng(seed)
    real = length if real is None else real
    mask = np.zeros((batch, length), "int32")
    mask[:, :real] = 1
    return {
        "token_ids": rng.integers(1, vocabulary_size, (batch, length)).astype("int32"),
        "padding_mask": mask,
        "segment_ids": rng.integers(0, 2, (batch, length)).astype("int32"),
    }


def random_backbone(preset, **kwargs):
    backbone = TupeBackbone.from_preset(preset, **kwargs)
    randomize_weights(backbone, seed=5)
    return backbone


@pytest.mark.parametrize("variant", on_every_backend(ALL_VARIANTS))
def test_padding_does_not_change_real_tokens(variant):
    backbone = random_backbone(f"{variant}_tiny", max_relative_distance=6, bucket_size=6)
    short = make_inputs(2, 10)
    long = make_inputs(2, 16, real=10, seed=99)  # other ids in the padding
    for name in short:
        long[name][:, :10] = short[name]
    want, got = backbone(short), backbone(long)
    assert_close(got["sequence_output"][:, :10], want["sequence_output"])
    assert_close(got["pooled_output"], want["pooled_output"])


def _permute(inputs, order):
    return {name: value[:, order] for name, value in inputs.items()}


@backends
def test_no_positional_term_is_permutation_equivariant():
    config = {**PRESETS["bert_a_tiny"], "absolute_position": "none"}
    backbone = TupeBackbone(**config)
    randomize_weights(backbone)
    inputs = make_inputs(2, 12, real=9)
    order = np.concatenate([RNG.permutation(9), np.arange(9, 12)])
    want = to_numpy(backbone(inputs)["sequence_output"])[:, order]
    assert_close(backbone(_permute(inputs, order))["sequence_output"], want)


@pytest.mark.parametrize("variant", on_every_backend(ALL_VARIANTS))
def test_every_positional_encoding_breaks_permutation_equivariance(variant):
    """The control for the test above: each variant does see positions."""
    backbone = random_backbone(f"{variant}_tiny")
    inputs = make_inputs(1, 12)
    order = np.concatenate([[0], RNG.permutation(np.arange(1, 12))])
    want = to_numpy(backbone(inputs)["sequence_output"])[:, order]
    got = to_numpy(backbone(_permute(inputs, order))["sequence_output"])
    assert np.max(np.abs(got - want)) > 1e-3


@backends
@pytest.mark.parametrize("variant", ["tupe_a", "tupe_r"])
def test_cls_reset_gives_cls_one_positional_logit(variant):
    backbone = random_backbone(f"{variant}_tiny")
    bias = to_numpy(backbone.positional_bias(20))  # (h, n, n)
    theta1 = to_numpy(backbone.cls_reset_layer.cls_to_others)
    theta2 = to_numpy(backbone.cls_reset_layer.others_to_cls)
    np.testing.assert_array_equal(bias[:, 0, :], np.repeat(theta1[:, None], 20, axis=1))
    np.testing.assert_array_equal(bias[:, 1:, 0], np.repeat(theta2[:, None], 19, axis=1))
    assert np.ptp(bias[:, 1:, 1:], axis=-1).min() > 0  # the rest still varies


def test_tie_cls_keeps_cls_positional_logits():
    bias = to_numpy(random_backbone("tupe_a_tie_cls_tiny").positional_bias(20))
    assert np.ptp(bias[:, 0, :], axis=-1).min() > 1e-3


def test_positional_bias_is_computed_once_for_all_layers():
    """One correlation layer and one bias layer feed every Transformer layer."""
    backbone = TupeBackbone.from_preset("tupe_r_tiny")
    names = [layer.name for layer in backbone.layers]
    assert names.count("untied_positional_correlation") == 1
    assert names.count("relative_bucket_bias") == 1
    correlation = backbone.get_layer("untied_positional_correlation")
    assert len(correlation._inbound_nodes) == 1


def test_positional_bias_refused_without_content_free_term():
    with pytest.raises(ValueError, match="no content-free positional term"):
        TupeBackbone.from_preset("bert_a_tiny").positional_bias(8)


@pytest.mark.parametrize("variant", on_every_backend(RELATIVE_ONLY))
def test_relative_only_encoders_accept_longer_sequences(variant):
    backbone = TupeBackbone.from_preset(f"{variant}_tiny")
    length = backbone.max_sequence_length + 72
    outputs = backbone(make_inputs(1, length))
    assert outputs["sequence_output"].shape == (1, length, backbone.hidden_dim)
    assert np.all(np.isfinite(to_numpy(outputs["sequence_output"])))


@pytest.mark.parametrize("variant", on_every_backend(ABSOLUTE))
def test_absolute_encoders_refuse_longer_sequences(variant):
    backbone = TupeBackbone.from_preset(f"{variant}_tiny")
    backbone(make_inputs(1, 128))  # the limit itself is fine
    with pytest.raises(ValueError, match="max_sequence_length=128.*Received: sequence length 129"):
        backbone(make_inputs(1, 129))


def test_preset_length_limit_matches_the_built_encoder():
    """The CLI checks --seq-len from the preset; the encoder checks its inputs: one rule."""
    from keras_tupe_base.presets import absolute_length_limit

    for name, config in PRESETS.items():
        if name.endswith("_tiny"):
            built = TupeBackbone.from_preset(name).absolute_length_limit
            assert absolute_length_limit(**config) == built, name
        relative_only = name.rsplit("_", 1)[0] in RELATIVE_ONLY
        expected = None if relative_only else config["max_sequence_length"]
        assert absolute_length_limit(**config) == expected, name


@requires_tensorflow
def test_absolute_limit_checked_in_graph_with_dynamic_length():
    import tensorflow as tf

    backbone = TupeBackbone.from_preset("tupe_r_tiny")
    spec = {name: tf.TensorSpec((None, None), tf.int32) for name in make_inputs(1, 4)}
    run = tf.function(lambda x: backbone(x)["sequence_output"], input_signature=[spec])
    assert run(make_inputs(1, 20)).shape == (1, 20, 64)
    with pytest.raises(tf.errors.InvalidArgumentError, match="max_sequence_length=128"):
        run(make_inputs(1, 130))


def test_mask_shape_must_match_word_ids():
    inputs = make_inputs(2, 8)
    inputs["padding_mask"] = inputs["padding_mask"][:, :6]
    with pytest.raises(ValueError, match="same shape.*padding_mask.*\\(2, 6\\)"):
        TupeBackbone.from_preset("bert_a_tiny")(inputs)


def test_token_ids_must_be_integers():
    inputs = make_inputs(2, 8)
    inputs["token_ids"] = inputs["token_ids"].astype("float32")
    with pytest.raises(TypeError, match="token_ids.*integers.*float32"):
        TupeBackbone.from_preset("bert_a_tiny")(inputs)


def test_inputs_must_be_the_tf_hub_dict():
    inputs = make_inputs(2, 8)
    del inputs["segment_ids"]
    with pytest.raises(ValueError, match="segment_ids"):
        TupeBackbone.from_preset("bert_a_tiny")(inputs)


def test_unknown_preset_lists_the_valid_ones():
    with pytest.raises(ValueError, match="Unknown preset tupe_r_huge. The nearest: tupe_r_base, "
                                         "tupe_r_tiny, tupe_r_mini. .*variants bert_a, .*huang_m4, "
                                         ".*sizes tiny, mini, small, base"):
        TupeBackbone.from_preset("tupe_r_huge")


@pytest.mark.parametrize(
    "overrides, message",
    [
        (dict(num_heads=5), "divisible by `num_heads`.*hidden_dim=64, num_heads=5"),
        # A preset config.json edited by hand: 0 heads was a ZeroDivisionError.
        (dict(num_heads=0), r"`num_heads` must be a positive int. Received: num_heads=0"),
        (dict(num_layers=-1), r"`num_layers` must be a positive int. Received: num_layers=-1"),
        (dict(hidden_dim=64.0), r"`hidden_dim` must be a positive int. Received: hidden_dim=64.0"),
        (dict(num_segments=-2), r"`num_segments` must be an int >= 0"),
        (dict(relative_position="t5"), "relative_position.*'t5_bias'"),
        (dict(absolute_correlation="tied"), "absolute_correlation.*'untied_cross'"),
        (dict(absolute_position="sinusoid"), "absolute_position.*'added'"),
        (dict(cls_reset=True), "cls_reset=True.*needs"),
        (dict(absolute_correlation="untied", relative_position="method4"), "choose one"),
    ],
)
def test_bad_config_is_refused_clearly(overrides, message):
    with pytest.raises(ValueError, match=message):
        TupeBackbone(**{**PRESETS["bert_a_tiny"], **overrides})


def test_tupe_a_base_adds_about_1_2m_parameters():
    bert = TupeBackbone.from_preset("bert_a_base").count_params()
    tupe = TupeBackbone.from_preset("tupe_a_base").count_params()
    assert 1.1e6 < tupe - bert < 1.3e6, tupe - bert
    assert 0.009 < (tupe - bert) / bert < 0.012  # ~1% (TUPE §3.3)


def test_bert_a_base_has_bert_base_size():
    # BERT-Base without the NSP head: 109.48 M parameters.
    assert TupeBackbone.from_preset("bert_a_base").count_params() == 109_482_240


@pytest.mark.parametrize("variant", on_every_backend(ALL_VARIANTS))
def test_keras_save_load_round_trip(variant, tmp_path):
    backbone = random_backbone(f"{variant}_tiny")
    inputs = make_inputs(2, 16, real=12)
    path = tmp_path / f"{variant}.keras"
    backbone.save(path)
    restored = keras.saving.load_model(path)
    assert type(restored) is TupeBackbone
    assert restored.get_config() == backbone.get_config()
    want, got = backbone(inputs), restored(inputs)
    for name in ("sequence_output", "pooled_output"):
        np.testing.assert_array_equal(to_numpy(got[name]), to_numpy(want[name]))


# Each XLA compilation takes most of a minute on CPU: `make test` compiles the richest
# variant, `make test-slow` the two other attention paths.
@backends
@pytest.mark.parametrize("variant", ["tupe_r", pytest.param("huang_m3", marks=pytest.mark.slow),
                                     pytest.param("bert_a_d", marks=pytest.mark.slow)])
def test_trains_under_xla_with_dynamic_batch_and_length(variant):
    backbone = TupeBackbone.from_preset(f"{variant}_tiny")
    inputs = {name: keras.Input((None,), dtype="int32", name=name) for name in make_inputs(1, 1)}
    logits = keras.layers.Dense(2)(backbone(inputs)["pooled_output"])
    model = keras.Model(inputs, logits)
    model.compile(
        optimizer=keras.optimizers.AdamW(1e-3),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        jit_compile=True,
    )
    before = [to_numpy(w).copy() for w in backbone.trainable_weights]
    for batch, length in ((4, 16), (3, 24)):  # a new shape: XLA recompiles
        loss = model.train_on_batch(make_inputs(batch, length, real=length - 3),
                                    np.arange(batch) % 2)
        assert np.isfinite(loss)
    after = [to_numpy(w) for w in backbone.trainable_weights]
    assert all(not np.array_equal(b, a) for b, a in zip(before, after))


# Mean |mixed - float32| of the sequence output allowed for each policy: about 3x what
# the random weights below give (float16 ~0.0015, bfloat16 ~0.012).
MIXED_TOLERANCE = {"mixed_float16": 0.005, "mixed_bfloat16": 0.03}
NO_POSITIONS = dict(absolute_position="none", absolute_correlation="none",
                    relative_position="none", cls_reset=False)


def _sequence_output(backbone, inputs, dtype="float32"):
    output = backbone(inputs)["sequence_output"]
    assert keras.backend.standardize_dtype(output.dtype) == dtype
    return np.asarray(to_numpy(ops.cast(output, "float32")), "float64")


@backends
@pytest.mark.parametrize("variant", ["tupe_r", "rope", "alibi", "deberta"])
def test_mixed_precision_backbone_keeps_the_positional_term(variant):
    # Random weights of a sensible scale (at the initial 0.02 the positional term
    # moves the outputs by ~1e-3, so no tolerance could tell it was lost).
    float32 = random_backbone(f"{variant}_tiny")
    inputs = make_inputs(2, 16, real=10)
    want = _sequence_output(float32, inputs)
    # The control: the same weights without positions differ by 3x the tolerance or more.
    unplaced = TupeBackbone(**{**float32.get_config(), **NO_POSITIONS})
    values = {weight.path: weight for weight in float32.weights}
    for weight in unplaced.weights:
        weight.assign(values[weight.path])
    lost = np.mean(np.abs(_sequence_output(unplaced, inputs) - want))
    for policy, tolerance in MIXED_TOLERANCE.items():
        mixed = TupeBackbone.from_preset(f"{variant}_tiny", dtype=policy)
        mixed.set_weights(float32.get_weights())
        got = _sequence_output(mixed, inputs, dtype=policy[6:])
        assert np.all(np.isfinite(got))
        assert np.mean(np.abs(got - want)) < tolerance < lost / 2, (policy, lost)


def _random_weights(backbone):
    """{path: float64 values} of the weights that start random (not constant)."""
    weights = {}
    for weight in backbone.weights:
        values = np.asarray(to_numpy(weight), "float64").ravel()
        if values.size > 1 and values.std() > 0:
            weights[weight.path] = values
    return weights


@pytest.mark.parametrize("variant", on_every_backend(ALL_VARIANTS))
def test_no_two_random_weights_start_with_the_same_values(variant):
    # One unseeded initializer object handed to several weights fills them with
    # the same stream (Keras 3 fixes its seed when it is made): BERT-A's position
    # table was a copy of token rows 0-511, TUPE's U^Q equal to U^K.
    weights = _random_weights(TupeBackbone.from_preset(f"{variant}_tiny"))
    # Every variant has at least the token embedding, q/k/v, FFN and pooler kernels.
    assert len(weights) >= 2 + 6 * PRESETS[f"{variant}_tiny"]["num_layers"]
    paths = sorted(weights)
    for i, first in enumerate(paths):
        for second in paths[i + 1 :]:
            a, b = weights[first], weights[second]
            shared = np.isin(a, b).sum() / min(a.size, b.size)
            # Independent draws share a value only by chance (a few per cent at most:
            # JAX's truncated normal repeats float32 values more often than
            # TensorFlow's); a repeated stream shares all of the smaller tensor.
            assert shared < 0.1, f"{first} and {second} share {shared:.0%} of their values"


@backends
def test_the_global_seed_decides_the_initialization():
    def initial_weights(seed):
        keras.utils.set_random_seed(seed)
        return _random_weights(TupeBackbone.from_preset("tupe_r_tiny"))

    first, again, other = initial_weights(7), initial_weights(7), initial_weights(8)
    assert sorted(first) == sorted(again) == sorted(other)
    for path in first:
        np.testing.assert_array_equal(first[path], again[path], err_msg=path)
        assert not np.isin(first[path], other[path]).mean() > 0.01, path


def test_get_config_lists_every_constructor_argument_with_its_value():
    import inspect

    from keras_tupe.models.tupe_backbone import CONFIG_KEYS

    arguments = [name for name in inspect.signature(TupeBackbone.__init__).parameters
                 if name not in ("self", "dtype", "kwargs")]
    assert list(CONFIG_KEYS) == arguments
    # Every argument away from its default: each must come back as given.
    given = dict(vocabulary_size=50, num_layers=1, num_heads=2, hidden_dim=8,
                 intermediate_dim=12, dropout=0.2, max_sequence_length=24, num_segments=3,
                 absolute_position="none", absolute_correlation="untied",
                 relative_position="t5_bias", cls_reset=True, cls_reset_style="fairseq",
                 mask_padding_embeddings=True, num_buckets=16, max_distance=64,
                 max_relative_distance=7, bucket_size=9, zero_init_relative_tables=True,
                 layer_norm_epsilon=1e-6, activation="relu", attention_implementation="einsum",
                 layer_norm_position="pre")
    assert sorted(given) == sorted(CONFIG_KEYS)
    config = TupeBackbone(**given).get_config()
    assert {key: config[key] for key in CONFIG_KEYS} == given
