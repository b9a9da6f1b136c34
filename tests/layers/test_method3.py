"""Huang's method 3 in query chunks: values and gradients against independent formulas.

`method3_logits` pads the queries to a multiple of the chunk, loops over the
chunks and has a hand-written backward pass, so every test here uses lengths
that are not multiples of the chunk (the padding path) and several chunks. The
values are checked against the NumPy float64 reference written from the spec;
the gradients against the one-einsum formula the layer used before, both as
float64 NumPy (gradients derived by hand) and differentiated by the backend.
"""

import math

import keras
import numpy as np
import pytest
from keras import ops

from keras_tupe import layers
from keras_tupe.layers import qkr_multiplicative_attention as qkr
from tests.backends import backends
from tests import numpy_reference as ref
from tests.reference_params import assert_close, attention_params, randomize_weights

pytestmark = backends  # make test-jax runs the whole module again under JAX

BACKEND = keras.backend.backend()
B, H, D = 2, 2, 32  # d_h = 16
D_H = D // H
CHUNK = 8
LENGTHS = [1, 7, 33, 130]  # none a multiple of CHUNK


def random_inputs(length, key_length=None, k=5, seed=0):
    """Float32 `(B, n, h, d_h)` queries and keys, a `(2k + 1, d_h)` table, a cotangent."""
    rng = np.random.default_rng(seed)
    key_length = length if key_length is None else key_length
    query = rng.normal(size=(B, length, H, D_H)).astype("float32")
    key = rng.normal(size=(B, key_length, H, D_H)).astype("float32")
    table = rng.normal(size=(2 * k + 1, D_H)).astype("float32")
    cotangent = rng.normal(size=(B, H, length, key_length)).astype("float32")
    return query, key, table, cotangent


def one_einsum_grads(query, key, table, cotangent, k):
    """Float64 gradients of `Σ cotangent · einsum("bqhd,bkhd,qkd->bhqk")`, by hand."""
    query, key, table, cotangent = (
        np.asarray(x, np.float64) for x in (query, key, table, cotangent)
    )
    rows = ref.relative_index(query.shape[1], key.shape[1], k) + k  # (q, k)
    embeddings = table[rows]  # (q, k, d_h)
    d_query = np.einsum("bhij,bjhc,ijc->bihc", cotangent, key, embeddings)
    d_key = np.einsum("bhij,bihc,ijc->bjhc", cotangent, query, embeddings)
    d_embeddings = np.einsum("bhij,bihc,bjhc->ijc", cotangent, query, key)  # (q, k, d_h)
    d_table = np.zeros_like(table)
    np.add.at(d_table, rows, d_embeddings)  # the gather's gradient
    return d_query, d_key, d_table


def one_einsum_logits(query, key, table, k):
    """The formula the layer used before the chunks, in `keras.ops`."""
    rows = qkr.clipped_relative_positions(ops.shape(query)[1], ops.shape(key)[1], k) + k
    embeddings = ops.take(table, rows, axis=0)  # (q, k, d_h)
    return ops.einsum("bqhd,bkhd,qkd->bhqk", query, key, embeddings)  # (B, h, q, k)


def backend_vjp(fn, primals, cotangent, compiled):
    """Gradients of `Σ cotangent · fn(*primals)` from the backend's autodiff, as NumPy."""
    if BACKEND == "tensorflow":
        import tensorflow as tf

        def grads(*primals):
            with tf.GradientTape() as tape:
                tape.watch(primals)
                outputs = fn(*primals)
            return tape.gradient(outputs, primals, output_gradients=tf.constant(cotangent))

        grads = tf.function(grads, jit_compile=True) if compiled else grads
        # A gather's gradient is `tf.IndexedSlices`; make it dense.
        return [tf.convert_to_tensor(g).numpy() for g in grads(*[tf.constant(p) for p in primals])]
    if BACKEND == "jax":
        import jax

        def grads(*primals):
            return jax.vjp(fn, *primals)[1](cotangent)

        grads = jax.jit(grads) if compiled else grads
        return [np.asarray(g) for g in grads(*primals)]
    pytest.skip(f"no gradient helper for the {BACKEND} backend")


def chunked(query, key, table, k, chunk_size=CHUNK):
    return qkr.method3_logits(query, key, table, k, chunk_size)


@pytest.mark.parametrize("length", LENGTHS)
@pytest.mark.parametrize("k", [3, 200])  # clipped, and not clipped
def test_logits_match_reference(length, k):
    query, key, table, _ = random_inputs(length, k=k)
    # The function takes queries already scaled by 1 / sqrt(d_h), as the layer passes them.
    got = ops.convert_to_numpy(chunked(query / math.sqrt(D_H), key, table, k))
    for b in range(B):
        want = ref.attention_logits(
            np.transpose(query[b], (1, 0, 2)), np.transpose(key[b], (1, 0, 2)), "method3",
            table=table, max_relative_distance=k,
        )  # (h, q, k)
        assert_close(got[b], want)


@pytest.mark.parametrize("chunk_size", [1, 3, 8, 64, 200])
def test_logits_do_not_depend_on_the_chunk_size(chunk_size):
    query, key, table, _ = random_inputs(33)
    want = ops.convert_to_numpy(chunked(query, key, table, 5, chunk_size=1))
    got = ops.convert_to_numpy(chunked(query, key, table, 5, chunk_size=chunk_size))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_queries_and_keys_of_different_lengths():
    query, key, table, cotangent = random_inputs(7, key_length=12, k=4)
    got = ops.convert_to_numpy(chunked(query / math.sqrt(D_H), key, table, 4, chunk_size=3))
    want = ref.attention_logits(
        np.transpose(query[1], (1, 0, 2)), np.transpose(key[1], (1, 0, 2)), "method3",
        table=table, max_relative_distance=4,
    )
    assert_close(got[1], want)
    grads = backend_vjp(lambda *x: chunked(*x, 4, chunk_size=3), (query, key, table),
                        cotangent, compiled=False)
    for got_grad, want_grad in zip(grads, one_einsum_grads(query, key, table, cotangent, 4)):
        assert_close(got_grad, want_grad)


@pytest.mark.parametrize("length", LENGTHS)
@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "xla"])
def test_gradients_match_the_one_einsum_formula(length, compiled):
    k = 5
    query, key, table, cotangent = random_inputs(length, k=k, seed=length)
    got = backend_vjp(lambda *x: chunked(*x, k), (query, key, table), cotangent, compiled)
    by_hand = one_einsum_grads(query, key, table, cotangent, k)
    autodiff = backend_vjp(
        lambda *x: one_einsum_logits(*x, k), (query, key, table), cotangent, compiled
    )
    for name, got_grad, hand_grad, auto_grad in zip(("query", "key", "table"), got, by_hand,
                                                     autodiff):
        assert got_grad.shape == hand_grad.shape, name
        assert_close(got_grad, hand_grad, rtol=1e-4)
        assert_close(auto_grad, hand_grad, rtol=1e-4)  # the two independent checks agree


def _reference_attention(layer, inputs, mask):
    p = attention_params(layer, D)
    table = np.asarray(ops.convert_to_numpy(layer.relative_embeddings), np.float64)
    return np.stack([
        ref.multi_head_attention(
            inputs[b], p["wq"], p["bq"], p["wk"], p["bk"], p["wv"], p["bv"], p["wo"], p["bo"],
            H, mask[b], "method3", table=table, max_relative_distance=layer.max_relative_distance,
        )
        for b in range(len(inputs))
    ])


@pytest.mark.parametrize("length", LENGTHS)
@pytest.mark.filterwarnings("ignore:You are using a softmax over axis -1")  # length 1
def test_layer_matches_reference_with_padding(length, monkeypatch):
    # Chunks of CHUNK queries at d_h = 16, so the longer inputs take several.
    monkeypatch.setattr(qkr, "METHOD3_CHUNK_ELEMENTS", CHUNK * D_H)
    assert qkr.method3_chunk_size(D_H) == CHUNK
    rng = np.random.default_rng(length)
    inputs = rng.normal(size=(B, length, D)).astype("float32")
    mask = np.ones((B, length), "int32")
    mask[1, max(1, length - length // 3):] = 0  # the second row ends in padding
    layer = layers.QKRMultiplicativeAttention(H, method="method3", max_relative_distance=20)
    layer(inputs, padding_mask=mask)
    randomize_weights(layer, seed=7)
    got = layer(inputs, padding_mask=mask)
    assert_close(got, _reference_attention(layer, inputs, mask))


class OneEinsumMethod3(layers.QKRMultiplicativeAttention):
    """The layer with the formula it used before the chunks."""

    def attention_logits(self, query, key):
        query = query * (1.0 / math.sqrt(self.head_dim))
        logits = one_einsum_logits(query, key, self.relative_embeddings, self.max_relative_distance)
        return ops.cast(logits, "float32")


def layer_weight_gradients(layer, inputs, mask, cotangent):
    """The gradients of a layer's trainable weights for `cotangent` on its outputs."""
    if BACKEND == "tensorflow":
        import tensorflow as tf

        with tf.GradientTape() as tape:
            outputs = layer(inputs, padding_mask=mask)
        grads = tape.gradient(
            outputs, layer.trainable_variables, output_gradients=tf.constant(cotangent)
        )
        return [tf.convert_to_tensor(g).numpy() for g in grads]
    if BACKEND == "jax":
        import jax

        def outputs(trainable):
            return layer.stateless_call(
                trainable, [v.value for v in layer.non_trainable_variables], inputs,
                padding_mask=mask,
            )[0]

        pullback = jax.vjp(outputs, [v.value for v in layer.trainable_variables])[1]
        return [np.asarray(g) for g in pullback(cotangent)[0]]
    pytest.skip(f"no gradient helper for the {BACKEND} backend")


def test_layer_weight_gradients_match_the_one_einsum_layer(monkeypatch):
    monkeypatch.setattr(qkr, "METHOD3_CHUNK_ELEMENTS", CHUNK * D_H)
    rng = np.random.default_rng(3)
    length = 33
    inputs = rng.normal(size=(B, length, D)).astype("float32")
    mask = np.ones((B, length), "int32")
    mask[0, 20:] = 0
    cotangent = rng.normal(size=(B, length, D)).astype("float32")
    chunked_layer = layers.QKRMultiplicativeAttention(H, method="method3", max_relative_distance=6)
    einsum_layer = OneEinsumMethod3(H, method="method3", max_relative_distance=6)
    for layer in (chunked_layer, einsum_layer):
        layer(inputs, padding_mask=mask)
    randomize_weights(chunked_layer, seed=11)
    einsum_layer.set_weights(chunked_layer.get_weights())
    got = layer_weight_gradients(chunked_layer, inputs, mask, cotangent)
    want = layer_weight_gradients(einsum_layer, inputs, mask, cotangent)
    names = [v.path for v in chunked_layer.trainable_variables]
    assert any(name.endswith("relative_embeddings") for name in names)
    for name, got_grad, want_grad in zip(names, got, want):
        assert np.max(np.abs(want_grad)) > 0, name
        assert_close(got_grad, want_grad, rtol=1e-4)


def _largest_value(jaxpr):
    """Elements of the largest value a jaxpr (with its sub-jaxprs: loops, maps) creates."""
    largest = 0
    for equation in jaxpr.eqns:
        for var in equation.outvars:
            largest = max(largest, math.prod(var.aval.shape))
        for param in equation.params.values():
            for sub in param if isinstance(param, (list, tuple)) else (param,):
                sub = getattr(sub, "jaxpr", sub)  # ClosedJaxpr → Jaxpr
                if hasattr(sub, "eqns"):
                    largest = max(largest, _largest_value(sub))
    return largest


@pytest.mark.jax  # make test-jax runs it; make test leaves it out rather than skip it
@pytest.mark.skipif(BACKEND != "jax", reason="inspects the traced program (jaxpr); JAX only")
def test_no_value_of_n_by_n_by_head_dim_in_forward_or_backward():
    import jax

    length, k = 130, 200
    query, key, table, cotangent = random_inputs(length, k=k)

    def forward_and_backward(fn):
        def run(query, key, table, cotangent):
            logits, pullback = jax.vjp(fn, query, key, table)
            return logits, pullback(cotangent)

        return jax.make_jaxpr(run)(query, key, table, cotangent).jaxpr

    limit = length * length * D_H  # one (n, n, d_h) table gather, without batch or heads
    assert _largest_value(forward_and_backward(lambda *x: one_einsum_logits(*x, k))) >= limit
    largest = _largest_value(forward_and_backward(lambda *x: chunked(*x, k)))
    # The logits themselves (B, h, n, n) and a chunk's (B, C, n, h, d_h) product.
    assert largest <= max(B * H * math.ceil(length / CHUNK) * CHUNK * length,
                          B * CHUNK * length * H * D_H)
    assert largest < limit


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
def test_mixed_precision_stays_close_to_float32(policy):
    rng = np.random.default_rng(5)
    inputs = rng.normal(size=(B, 33, D)).astype("float32")
    float32 = layers.QKRMultiplicativeAttention(H, method="method3", max_relative_distance=6)
    float32(inputs)
    randomize_weights(float32, seed=2)
    mixed = layers.QKRMultiplicativeAttention(H, method="method3", max_relative_distance=6,
                                              dtype=policy)
    mixed(inputs)
    mixed.set_weights(float32.get_weights())
    got = ops.convert_to_numpy(ops.cast(mixed(inputs), "float32"))
    want = ops.convert_to_numpy(float32(inputs))
    assert np.all(np.isfinite(got))
    assert np.max(np.abs(got - want)) < 0.05 * np.max(np.abs(want))
