"""Every layer through the shared harness, plus layer-level behaviour."""

import keras
import numpy as np
import pytest

from keras_tupe import layers
from tests.layer_test_case import run_layer_test
from tests.backends import backends

pytestmark = backends  # make test-jax runs the whole module again under JAX

B, N, D, H = 2, 7, 16, 4
RNG = np.random.default_rng(0)
X = RNG.normal(size=(B, N, D)).astype("float32")
MASK = np.array([[1] * N, [1] * 4 + [0] * (N - 4)], "int32")
BIAS = RNG.normal(size=(1, H, N, N)).astype("float32")
PQ = RNG.normal(size=(1, N, H, D // H)).astype("float32")


def test_relative_bucket_bias():
    run_layer_test(
        layers.RelativeBucketBias,
        dict(num_heads=H, num_buckets=8, max_distance=16),
        dict(query=X),
        expected_output_shape=(1, H, N, N),
        mixed_output_dtype="float32",
        symbolic_output_shapes=[(1, H, None, None)],
    )


@pytest.mark.parametrize("output_mode", ["correlation", "projections"])
def test_untied_positional_correlation(output_mode):
    shapes = {"correlation": (1, H, N, N), "projections": ((1, N, H, D // H),) * 2}
    run_layer_test(
        layers.UntiedPositionalCorrelation,
        dict(num_heads=H, max_sequence_length=10, output_mode=output_mode),
        dict(inputs=X),
        expected_output_shape=shapes[output_mode],
        mixed_output_dtype="float32",
    )


def test_cls_reset():
    run_layer_test(
        layers.ClsReset,
        dict(num_heads=H, theta_initializer="random_normal"),
        dict(inputs=BIAS),
        expected_output_shape=(1, H, N, N),
        mixed_output_dtype="float32",
    )


@pytest.mark.parametrize(
    "extra",
    [{}, {"attention_bias": BIAS}, {"position_query": PQ, "position_key": PQ}],
    ids=["plain", "bias", "projections"],
)
@pytest.mark.parametrize("untied_scaling", [True, False])
def test_untied_positional_attention(extra, untied_scaling):
    run_layer_test(
        layers.UntiedPositionalAttention,
        dict(num_heads=H, untied_scaling=untied_scaling, dropout=0.1),
        dict(inputs=X, padding_mask=MASK, **extra),
        expected_output_shape=(B, N, D),
        symbolic_output_shapes=[(None, None, D)],
    )


@pytest.mark.parametrize("method", ["shaw", "method1", "method2", "method3", "method4"])
def test_qkr_multiplicative_attention(method):
    run_layer_test(
        layers.QKRMultiplicativeAttention,
        dict(num_heads=H, method=method, max_relative_distance=3, dropout=0.1),
        dict(inputs=X, padding_mask=MASK),
        expected_output_shape=(B, N, D),
        symbolic_output_shapes=[(None, None, D)],
    )


@pytest.mark.parametrize("relative_position", ["none", "method3"])
def test_transformer_encoder_block(relative_position):
    extra = {"attention_bias": BIAS} if relative_position == "none" else {}
    run_layer_test(
        layers.TransformerEncoderBlock,
        dict(num_heads=H, intermediate_dim=32, relative_position=relative_position,
             max_relative_distance=4),
        dict(inputs=X, padding_mask=MASK, **extra),
        expected_output_shape=(B, N, D),
        symbolic_output_shapes=[(None, None, D)],
    )


def test_positional_bias_stays_float32_under_mixed_precision():
    """The float32 bias must reach the float32 logits uncast.

    7e4 exceeds float16's range: rounded to float16 it becomes inf and the
    softmax NaN. Kept in float32, it only makes every query attend to key 2,
    exactly like a bias of 1e3 does.
    """
    attention = layers.UntiedPositionalAttention(num_heads=H, dtype="mixed_float16")
    attention(X)
    outputs = []
    for value in (7e4, 1e3):
        bias = np.zeros((1, H, N, N), "float32")
        bias[..., 2] = value
        outputs.append(keras.ops.convert_to_numpy(attention(X, attention_bias=bias)))
    assert np.all(np.isfinite(outputs[0]))
    np.testing.assert_array_equal(outputs[0], outputs[1])


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: layers.QKRMultiplicativeAttention(4, method="method5"), "method"),
        (lambda: layers.UntiedPositionalCorrelation(4, 8, output_mode="bias"), "output_mode"),
        (lambda: layers.RelativeBucketBias(4, num_buckets=3), "num_buckets"),
        (lambda: layers.TransformerEncoderBlock(4, 8, relative_position="t5"),
         r"`relative_position` must be one of \('none', 't5_bias', .*'disentangled'\)\. "
         r"Received: relative_position='t5'"),
    ],
)
def test_bad_constructor_arguments_name_the_choice(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def test_heads_must_divide_hidden_size():
    with pytest.raises(ValueError, match="divisible by `num_heads`.*hidden size 16, num_heads=3"):
        layers.UntiedPositionalAttention(num_heads=3)(X)


def test_untied_correlation_refuses_longer_sequence():
    layer = layers.UntiedPositionalCorrelation(num_heads=H, max_sequence_length=5)
    with pytest.raises(ValueError, match="max_sequence_length=5.*Received: sequence length 7"):
        layer(X)


def test_alibi_bias_stays_float32_under_float16():
    """At 12 heads half the slopes are not powers of 2 (2^-0.5, 2^-1.5, ...).

    So float16 would round `-m |i - j|` (at 6 heads every slope is a power of 2
    and float16 is exact up to length 2048, so a check there cannot fail).
    """
    from tests.numpy_reference import alibi_bias

    want = alibi_bias(12, 300, 300)  # float64 (h, q, k)
    # The control: in float16 the bias is off by far more than the tolerance below.
    assert np.max(np.abs(want.astype("float16") - want)) > 1e-2
    for policy in ("mixed_float16", "float16"):
        got = layers.BidirectionalAlibiBias(12, dtype=policy)(np.zeros((1, 300, 4), "float16"))
        assert keras.backend.standardize_dtype(got.dtype) == "float32"
        np.testing.assert_allclose(keras.ops.convert_to_numpy(got)[0], want, rtol=0, atol=1e-4)
