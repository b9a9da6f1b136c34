"""Every formula against the independent NumPy float64 reference, on random inputs.

The reference (`tests/numpy_reference.py`) was written from
`../shared/docs/positional-encodings.md` alone, not from the layer code.
"""

import numpy as np
import pytest

from keras_tupe import TupeBackbone, layers
from keras_tupe_base.presets import VARIANTS
from tests.backends import backends
from tests import numpy_reference as ref
from tests.reference_params import (
    assert_close,
    attention_params,
    backbone_params,
    randomize_weights,
    untied_params,
)

pytestmark = backends  # make test-jax runs the whole module again under JAX

B, N, D, H = 3, 9, 32, 4
RNG = np.random.default_rng(42)
X = RNG.normal(size=(B, N, D)).astype("float32")
MASK = np.array([[1] * N, [1] * 6 + [0] * 3, [1] * 2 + [0] * 7], "int32")


# The bucket table of the spec, written out by hand: |j - i| -> bucket (j < i).
SPEC_BUCKETS = (
    [(d, d) for d in range(8)]
    + [(d, 8) for d in range(8, 12)] + [(d, 9) for d in range(12, 16)]
    + [(d, 10) for d in range(16, 23)] + [(d, 11) for d in range(23, 32)]
    + [(d, 12) for d in range(32, 46)] + [(d, 13) for d in range(46, 64)]
    + [(d, 14) for d in range(64, 91)] + [(d, 15) for d in (91, 128, 500, 10**6)]
)


def test_t5_buckets_match_the_spec_table():
    distance = np.array([d for d, _ in SPEC_BUCKETS])
    expected = np.array([b for _, b in SPEC_BUCKETS])
    got_before = np.asarray(layers.t5_relative_position_bucket(-distance))
    got_after = np.asarray(layers.t5_relative_position_bucket(distance))
    np.testing.assert_array_equal(got_before, expected)
    np.testing.assert_array_equal(got_after[1:], expected[1:] + 16)  # j > i
    assert got_after[0] == 0


@pytest.mark.parametrize(
    "bidirectional, num_buckets, max_distance",
    [(True, 32, 128), (False, 32, 128), (True, 8, 20), (False, 16, 300)],
)
def test_t5_buckets_match_reference(bidirectional, num_buckets, max_distance):
    relative = np.arange(-2000, 2001)
    got = layers.t5_relative_position_bucket(relative, bidirectional, num_buckets, max_distance)
    want = ref.t5_relative_position_bucket(relative, bidirectional, num_buckets, max_distance)
    np.testing.assert_array_equal(np.asarray(got), want)


@pytest.mark.parametrize("q_len, k_len", [(N, N), (300, 300), (5, 12)])
def test_relative_bucket_bias(q_len, k_len):
    layer = layers.RelativeBucketBias(num_heads=H)
    query, key = np.zeros((1, q_len, D)), np.zeros((1, k_len, D))
    layer(query, key)
    randomize_weights(layer)
    table = layer.relative_attention_bias.numpy()
    assert_close(layer(query, key)[0], ref.t5_bias(table, q_len, k_len))


def test_cls_reset():
    layer = layers.ClsReset(num_heads=H)
    bias = RNG.normal(size=(1, H, N, N))
    layer(bias)
    randomize_weights(layer)
    expected = ref.cls_reset(bias[0], layer.cls_to_others.numpy(), layer.others_to_cls.numpy())
    assert_close(layer(bias)[0], expected)


@pytest.mark.parametrize("output_mode", ["correlation", "projections"])
def test_untied_positional_correlation(output_mode):
    layer = layers.UntiedPositionalCorrelation(H, max_sequence_length=16, output_mode=output_mode)
    layer(X)
    randomize_weights(layer)
    p = untied_params(layer, D)
    args = (p["position_embedding"], *p["layer_norm"], p["wq"], p["bq"], p["wk"], p["bk"], H, N,
            layer.layer_norm_epsilon)
    if output_mode == "correlation":
        assert_close(layer(X)[0], ref.untied_correlation(*args))
    else:
        pq, pk = layer(X)
        want_q, want_k = ref.untied_projections(*args)  # (h, n, d_h)
        assert_close(np.transpose(pq[0], (1, 0, 2)), want_q)
        assert_close(np.transpose(pk[0], (1, 0, 2)), want_k)


def _check_attention(layer, method, call_kwargs=None, logit_kwargs=None):
    call_kwargs = call_kwargs or {}
    layer(X, padding_mask=MASK, **call_kwargs)
    randomize_weights(layer, seed=7)
    got = layer(X, padding_mask=MASK, **call_kwargs)
    p = attention_params(layer, D)
    want = [
        ref.multi_head_attention(X[b], p["wq"], p["bq"], p["wk"], p["bk"], p["wv"], p["bv"],
                                 p["wo"], p["bo"], H, MASK[b], method, **(logit_kwargs or {}))
        for b in range(B)
    ]
    assert_close(got, np.stack(want))


def test_bert_a_attention():
    _check_attention(layers.UntiedPositionalAttention(H, untied_scaling=False), "bert")


def test_bert_r_attention():
    bias = RNG.normal(size=(1, H, N, N)).astype("float32")
    _check_attention(
        layers.UntiedPositionalAttention(H, untied_scaling=False),
        "bert",
        dict(attention_bias=bias),
        dict(positional_bias=bias[0]),
    )


def test_tupe_attention():
    bias = RNG.normal(size=(1, H, N, N)).astype("float32")
    _check_attention(
        layers.UntiedPositionalAttention(H),
        "untied",
        dict(attention_bias=bias),
        dict(positional_bias=bias[0]),
    )


def test_bert_a_d_attention():
    pq = RNG.normal(size=(1, N, H, D // H)).astype("float32")
    pk = RNG.normal(size=(1, N, H, D // H)).astype("float32")
    _check_attention(
        layers.UntiedPositionalAttention(H),
        "untied_cross",
        dict(position_query=pq, position_key=pk),
        dict(pq=np.transpose(pq[0], (1, 0, 2)), pk=np.transpose(pk[0], (1, 0, 2))),
    )


@pytest.mark.parametrize("method", ["shaw", "method1", "method2", "method3", "method4"])
@pytest.mark.parametrize("k", [3, 16])  # clipped, and not clipped
def test_relative_attention(method, k):
    layer = layers.QKRMultiplicativeAttention(H, method=method, max_relative_distance=k)
    layer(X, padding_mask=MASK)
    randomize_weights(layer, seed=7)
    table = layer.relative_embeddings.numpy()
    _check_attention(layer, method, logit_kwargs=dict(table=table, max_relative_distance=k))


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_encoder_forward_pass(variant):
    backbone = TupeBackbone.from_preset(f"{variant}_tiny", max_relative_distance=5,
                                       bucket_size=5)
    randomize_weights(backbone, seed=3)
    n = 12
    inputs = {
        "token_ids": RNG.integers(0, backbone.vocabulary_size, (B, n)).astype("int32"),
        "padding_mask": np.array([[1] * n, [1] * 8 + [0] * 4, [1] * 3 + [0] * 9], "int32"),
        "segment_ids": RNG.integers(0, 2, (B, n)).astype("int32"),
    }
    got = backbone.layer_outputs()(inputs)
    want = ref.encoder_forward(backbone_params(backbone), inputs["token_ids"],
                               inputs["padding_mask"], inputs["segment_ids"])
    assert_close(backbone(inputs)["sequence_output"], want["sequence_output"])
    assert_close(got["sequence_output"], want["sequence_output"])
    assert_close(got["pooled_output"], want["pooled_output"])
    assert len(got["encoder_outputs"]) == len(want["encoder_outputs"]) == backbone.num_layers
    for layer_got, layer_want in zip(got["encoder_outputs"], want["encoder_outputs"]):
        assert_close(layer_got, layer_want)
