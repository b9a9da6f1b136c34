"""`attention_implementation`: keras.ops.dot_product_attention against the einsum path.

The fused path must give the einsum path's numbers and the NumPy float64
reference's (`tests/numpy_reference.py`) within test_numerics' tolerances, take
the einsum path wherever it cannot compute the same (attention dropout in
training, BERT-A^d, a float16 bias under "auto"), and refuse "fused" where the
logits are no scaled dot product plus a bias.
"""

import keras
import numpy as np
import pytest

from keras_tupe import TupeBackbone, layers
from tests import numpy_reference as ref
from tests.layer_test_case import run_layer_test
from tests.reference_params import assert_close, backbone_params, randomize_weights

FUSED_VARIANTS = ("bert_a", "bert_r", "tupe_a", "tupe_a_tie_cls", "tupe_r")
B, N, D, H = 3, 12, 16, 4
RNG = np.random.default_rng(5)
X = RNG.normal(size=(B, N, D)).astype("float32")
MASK = np.array([[1] * N, [1] * 8 + [0] * 4, [1] * 3 + [0] * 9], "int32")
BIAS = RNG.normal(size=(1, H, N, N)).astype("float32")


@pytest.fixture
def fused_calls(monkeypatch):
    """Counts the calls of `keras.ops.dot_product_attention` (the fused path)."""
    calls = []
    original = keras.ops.dot_product_attention

    def spy(*args, **kwargs):
        calls.append(kwargs)
        return original(*args, **kwargs)

    monkeypatch.setattr(keras.ops, "dot_product_attention", spy)
    return calls


def _inputs(vocabulary_size):
    rng = np.random.default_rng(11)
    return {
        "token_ids": rng.integers(0, vocabulary_size, (B, N)).astype("int32"),
        "padding_mask": MASK,
        "segment_ids": rng.integers(0, 2, (B, N)).astype("int32"),
    }


def _twins(variant, dtype=None):
    """A fused backbone with random weights, and an einsum one with the same weights."""
    fused = TupeBackbone.from_preset(
        f"{variant}_tiny", attention_implementation="fused", dtype=dtype
    )
    randomize_weights(fused, seed=3)
    einsum = TupeBackbone.from_preset(
        f"{variant}_tiny", attention_implementation="einsum", dtype=dtype
    )
    einsum.set_weights(fused.get_weights())
    return fused, einsum


@pytest.mark.parametrize("variant", FUSED_VARIANTS)
def test_fused_backbone_matches_einsum_and_reference(variant, fused_calls):
    fused, einsum = _twins(variant)
    inputs = _inputs(fused.vocabulary_size)
    got = fused(inputs)
    assert len(fused_calls) == fused.num_layers  # every layer took the fused path
    del fused_calls[:]
    want_einsum = einsum(inputs)
    assert not fused_calls
    want = ref.encoder_forward(backbone_params(fused), inputs["token_ids"],
                               inputs["padding_mask"], inputs["segment_ids"])
    for key in ("sequence_output", "pooled_output"):
        assert_close(got[key], want[key])
        assert_close(got[key], keras.ops.convert_to_numpy(want_einsum[key]))


@pytest.mark.parametrize("variant", ["bert_a", "bert_r", "tupe_r"])
def test_fused_backbone_under_mixed_bfloat16(variant, fused_calls):
    """bfloat16 keeps 8 bits and the backend rounds the bias to it: fused is no worse."""
    fused, einsum = _twins(variant, dtype="mixed_bfloat16")
    inputs = _inputs(fused.vocabulary_size)
    got = fused(inputs)["sequence_output"]
    assert len(fused_calls) == fused.num_layers
    assert keras.backend.standardize_dtype(got.dtype) == "bfloat16"
    want = ref.encoder_forward(backbone_params(fused), inputs["token_ids"],
                               inputs["padding_mask"], inputs["segment_ids"])["sequence_output"]

    def error(outputs):
        return np.abs(keras.ops.convert_to_numpy(keras.ops.cast(outputs, "float32")) - want)

    fused_error, einsum_error = error(got), error(einsum(inputs)["sequence_output"])
    assert np.all(np.isfinite(fused_error))
    assert fused_error.max() < 0.15 and einsum_error.max() < 0.15  # outputs of scale ~4
    assert fused_error.mean() < 1.5 * einsum_error.mean()


def test_auto_keeps_a_float16_bias_on_the_einsum_path(fused_calls):
    """Under float16 a fused backend would round the bias into float16's range."""
    with_bias = layers.UntiedPositionalAttention(H, dtype="mixed_float16")
    with_bias(X, padding_mask=MASK, attention_bias=BIAS)
    assert not fused_calls
    without_bias = layers.UntiedPositionalAttention(H, untied_scaling=False, dtype="mixed_float16")
    output = without_bias(X, padding_mask=MASK)
    assert len(fused_calls) == 1  # BERT-A: the padding goes in as a boolean mask
    assert np.all(np.isfinite(keras.ops.convert_to_numpy(keras.ops.cast(output, "float32"))))


def test_attention_dropout_in_training_takes_the_einsum_path(fused_calls):
    layer = layers.UntiedPositionalAttention(H, dropout=0.5, attention_implementation="fused")
    reference = layers.UntiedPositionalAttention(H, dropout=0.5, attention_implementation="einsum")
    layer(X)
    reference(X)
    reference.set_weights(layer.get_weights())
    del fused_calls[:]

    first = layer(X, padding_mask=MASK, attention_bias=BIAS, training=True)
    second = layer(X, padding_mask=MASK, attention_bias=BIAS, training=True)
    assert not fused_calls
    assert not np.allclose(first, second)  # dropout was applied

    inference = layer(X, padding_mask=MASK, attention_bias=BIAS, training=False)
    assert len(fused_calls) == 1
    assert_close(inference, reference(X, padding_mask=MASK, attention_bias=BIAS))

    no_dropout = layers.UntiedPositionalAttention(H, attention_implementation="fused")
    no_dropout(X, padding_mask=MASK, attention_bias=BIAS, training=True)
    assert len(fused_calls) == 2


@pytest.mark.parametrize("untied_scaling", [True, False])
def test_fused_attention_layer_harness(untied_scaling):
    """Config, symbolic call, jit training step and mixed precision through the fused op."""
    run_layer_test(
        layers.UntiedPositionalAttention,
        dict(num_heads=H, untied_scaling=untied_scaling, attention_implementation="fused"),
        dict(inputs=X, padding_mask=MASK, attention_bias=BIAS),
        expected_output_shape=(B, N, D),
        symbolic_output_shapes=[(None, None, D)],
    )


def test_config_keeps_the_implementation():
    assert TupeBackbone.from_preset("tupe_r_tiny").attention_implementation == "auto"
    backbone = TupeBackbone.from_preset("tupe_r_tiny", attention_implementation="fused")
    config = backbone.get_config()
    assert config["attention_implementation"] == "fused"
    revived = TupeBackbone.from_config(config)
    assert revived.get_config() == config
    assert revived.transformer_layers[0].attention_implementation == "fused"
    block = layers.TransformerEncoderBlock(H, 32, attention_implementation="einsum")
    assert layers.TransformerEncoderBlock.from_config(block.get_config()).get_config()[
        "attention_implementation"] == "einsum"


@pytest.mark.parametrize(
    "variant", ["shaw", "huang_m1", "huang_m2", "huang_m3", "huang_m4", "bert_a_d"]
)
def test_fused_is_refused_where_it_does_not_apply(variant):
    with pytest.raises(ValueError, match="attention_implementation='fused' applies to"):
        TupeBackbone.from_preset(f"{variant}_tiny", attention_implementation="fused")
    TupeBackbone.from_preset(f"{variant}_tiny", attention_implementation="auto")


def test_layer_level_errors():
    choices = r"\('auto', 'einsum', 'fused'\).*Received: attention_implementation='flash'"
    with pytest.raises(ValueError, match=choices):
        TupeBackbone.from_preset("bert_a_tiny", attention_implementation="flash")
    with pytest.raises(ValueError, match=choices):
        layers.UntiedPositionalAttention(H, attention_implementation="flash")
    with pytest.raises(ValueError, match="relative_position='shaw'"):
        layers.TransformerEncoderBlock(H, 32, relative_position="shaw",
                                       attention_implementation="fused")
    pq = RNG.normal(size=(1, N, H, D // H)).astype("float32")
    attention = layers.UntiedPositionalAttention(H, attention_implementation="fused")
    with pytest.raises(ValueError, match="BERT-A\\^d"):
        attention(X, position_query=pq, position_key=pq)
