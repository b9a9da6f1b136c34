"""Huang's method 4 by blocks (`relative_products`): values and gradients against references.

The layer computes method 4's relative terms block by block, with a skew in
place of the `(n, n, d_h)` gather, whenever the lengths are static. These tests
use small blocks, so the inputs span several blocks, end in a partial one (the
padding path), and are longer than `k + 1` (clipped distances) or shorter. The
values are checked against the NumPy float64 reference written from the spec,
the gradients against float64 formulas derived by hand and against the gather
formula the layer keeps for dynamic lengths.
"""

import keras
import numpy as np
import pytest
from keras import ops

from keras_tupe import layers
from keras_tupe.layers import qkr_multiplicative_attention as qkr
from tests.backends import backends
from tests import numpy_reference as ref
from tests.reference_params import assert_close, attention_params, randomize_weights
from tests.layers.test_method3 import backend_vjp  # gradients from TensorFlow or JAX autodiff
from tests.layers.test_method3 import layer_weight_gradients

pytestmark = backends  # make test-jax runs the whole module again under JAX

BACKEND = keras.backend.backend()
B, H, D = 2, 2, 32  # d_h = 16
D_H = D // H
BLOCK = 4
LENGTHS = [1, 2, 7, 33]  # 7 and 33 are not multiples of BLOCK


def relative_products_by_hand(x, table, k, other_length, keys, cotangent):
    """Float64 `relative_products` `(B, h, n_q, n_k)` and its gradients, by hand."""
    x, table, cotangent = (np.asarray(a, np.float64) for a in (x, table, cotangent))
    lengths = (other_length, x.shape[1]) if keys else (x.shape[1], other_length)
    rows = ref.relative_index(*lengths, k) + k  # (n_q, n_k)
    embeddings = table[rows]  # (n_q, n_k, d_h)
    x_index = "j" if keys else "i"  # x holds the keys j, or the queries i
    values = np.einsum(f"b{x_index}hd,ijd->bhij", x, embeddings)
    d_x = np.einsum(f"bhij,ijd->b{x_index}hd", cotangent, embeddings)
    d_table = np.zeros_like(table)
    d_embeddings = np.einsum(f"bhij,b{x_index}hd->ijd", cotangent, x)  # (n_q, n_k, d_h)
    np.add.at(d_table, rows, d_embeddings)  # the gather's gradient
    return values, d_x, d_table


@pytest.mark.parametrize("length, other_length", [(2, 2), (7, 7), (33, 33), (7, 12), (12, 7)])
@pytest.mark.parametrize("k", [3, 200])  # clipped, and not clipped
@pytest.mark.parametrize("keys", [False, True], ids=["queries", "keys"])
@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "xla"])
def test_relative_products_and_gradients(length, other_length, k, keys, compiled):
    rng = np.random.default_rng(length + 100 * other_length)
    x = rng.normal(size=(B, length, H, D_H)).astype("float32")
    table = rng.normal(size=(2 * k + 1, D_H)).astype("float32")
    logits_shape = (other_length, length) if keys else (length, other_length)
    cotangent = rng.normal(size=(B, H, *logits_shape)).astype("float32")
    block_size = min(BLOCK, length)
    values, d_x, d_table = relative_products_by_hand(x, table, k, other_length, keys, cotangent)

    def products(x, table):
        return qkr.relative_products(x, table, k, other_length, block_size, keys=keys)

    assert_close(products(x, table), values)
    got_x, got_table = backend_vjp(products, (x, table), cotangent, compiled)
    assert_close(got_x, d_x, rtol=1e-4)
    assert_close(got_table, d_table, rtol=1e-4)


def _reference_attention(layer, inputs, mask):
    p = attention_params(layer, D)
    table = np.asarray(ops.convert_to_numpy(layer.relative_embeddings), np.float64)
    return np.stack([
        ref.multi_head_attention(
            inputs[b], p["wq"], p["bq"], p["wk"], p["bk"], p["wv"], p["bv"], p["wo"], p["bo"],
            H, mask[b], "method4", table=table, max_relative_distance=layer.max_relative_distance,
        )
        for b in range(len(inputs))
    ])


def _inputs(length, seed):
    rng = np.random.default_rng(seed)
    inputs = rng.normal(size=(B, length, D)).astype("float32")
    mask = np.ones((B, length), "int32")
    mask[1, max(1, length - length // 3):] = 0  # the second row ends in padding
    return inputs, mask


@pytest.mark.parametrize("length", LENGTHS)
@pytest.mark.parametrize("k", [5, 40])  # 33 > k + 1, and 33 < k
@pytest.mark.filterwarnings("ignore:You are using a softmax over axis -1")  # length 1
def test_layer_matches_reference_with_padding(length, k, monkeypatch):
    monkeypatch.setattr(qkr, "METHOD4_BLOCK_SIZE", BLOCK)
    inputs, mask = _inputs(length, seed=length)
    layer = layers.QKRMultiplicativeAttention(H, method="method4", max_relative_distance=k)
    layer(inputs, padding_mask=mask)
    randomize_weights(layer, seed=7)
    assert_close(layer(inputs, padding_mask=mask), _reference_attention(layer, inputs, mask))


class GatherMethod4(layers.QKRMultiplicativeAttention):
    """The layer on the `(n, n, d_h)` gather path it takes for dynamic lengths."""

    @staticmethod
    def _blocked_method4(query, key):
        return False


def test_layer_weight_gradients_match_the_gather_path(monkeypatch):
    monkeypatch.setattr(qkr, "METHOD4_BLOCK_SIZE", BLOCK)
    length = 33
    inputs, mask = _inputs(length, seed=3)
    cotangent = np.random.default_rng(4).normal(size=(B, length, D)).astype("float32")
    blocked_layer = layers.QKRMultiplicativeAttention(H, method="method4", max_relative_distance=6)
    gather_layer = GatherMethod4(H, method="method4", max_relative_distance=6)
    for layer in (blocked_layer, gather_layer):
        layer(inputs, padding_mask=mask)
    randomize_weights(blocked_layer, seed=11)
    gather_layer.set_weights(blocked_layer.get_weights())
    got = layer_weight_gradients(blocked_layer, inputs, mask, cotangent)
    want = layer_weight_gradients(gather_layer, inputs, mask, cotangent)
    names = [v.path for v in blocked_layer.trainable_variables]
    assert any(name.endswith("relative_embeddings") for name in names)
    for name, got_grad, want_grad in zip(names, got, want):
        assert np.max(np.abs(want_grad)) > 0, name
        assert_close(got_grad, want_grad, rtol=1e-4)


@pytest.mark.skipif(BACKEND != "tensorflow", reason="dynamic lengths: a TensorFlow graph")
def test_dynamic_length_takes_the_gather_path_with_the_same_values(monkeypatch):
    import tensorflow as tf

    monkeypatch.setattr(qkr, "METHOD4_BLOCK_SIZE", BLOCK)
    inputs, mask = _inputs(33, seed=5)
    layer = layers.QKRMultiplicativeAttention(H, method="method4", max_relative_distance=6)
    layer(inputs, padding_mask=mask)
    randomize_weights(layer, seed=7)
    dynamic = tf.function(
        lambda x, m: layer(x, padding_mask=m),
        input_signature=[tf.TensorSpec((None, None, D)), tf.TensorSpec((None, None), "int32")],
    )
    want = _reference_attention(layer, inputs, mask)
    assert_close(dynamic(inputs, mask), want)
    assert_close(layer(inputs, padding_mask=mask), want)

