"""Rotary, ALiBi and disentangled (DeBERTa) positions: formulas, keras-hub, errors.

Issue 37: three more values of `relative_position`. Each is checked against an
independent NumPy float64 reference written from its paper
(`tests/numpy_reference.py`), against keras-hub where keras-hub has the same
thing, and with a negative control showing that the check fails when the
formula is wrong (a flipped sign, another scale, other slopes, the paper's
instead of the code's p2c distance).
"""

import math

import keras
import keras_hub
import numpy as np
import pytest
from keras import ops

from keras_tupe import TupeBackbone, layers
from keras_tupe.layers.disentangled_attention import disentangled_index
from keras_tupe_base.presets import PRESETS
from tests.backends import backends
from tests import numpy_reference as ref
from tests.layer_test_case import run_layer_test
from tests.reference_params import (
    assert_close,
    attention_params,
    backbone_params,
    randomize_weights,
)

pytestmark = backends  # make test-jax runs the whole module again under JAX

B, N, D, H = 3, 11, 32, 4
D_H = D // H
RNG = np.random.default_rng(37)
X = RNG.normal(size=(B, N, D)).astype("float32")
MASK = np.array([[1] * N, [1] * 7 + [0] * 4, [1] * 2 + [0] * 9], "int32")


def to_numpy(x):
    return np.asarray(ops.convert_to_numpy(x), np.float64)


def not_close(actual, expected, rtol=1e-3):
    """The negative control: the wrong formula must be clearly off."""
    actual, expected = to_numpy(actual), np.asarray(expected, np.float64)
    return np.max(np.abs(actual - expected)) > rtol * np.max(np.abs(expected))


def reference_attention(layer, method="bert", **logit_kwargs):
    """The NumPy reference's multi-head attention of every example of X."""
    p = attention_params(layer, D)
    return np.stack([
        ref.multi_head_attention(X[b], p["wq"], p["bq"], p["wk"], p["bk"], p["wv"], p["bv"],
                                 p["wo"], p["bo"], H, MASK[b], method, **logit_kwargs)
        for b in range(B)
    ])


def built(layer, **call_kwargs):
    layer(X, padding_mask=MASK, **call_kwargs)
    randomize_weights(layer, seed=3)
    return layer


def inputs(batch, length, real=None, vocabulary_size=1024, seed=0):
    rng = np.random.default_rng(seed)
    mask = np.zeros((batch, length), "int32")
    mask[:, : length if real is None else real] = 1
    return {
        "token_ids": rng.integers(1, vocabulary_size, (batch, length)).astype("int32"),
        "padding_mask": mask,
        "segment_ids": np.zeros((batch, length), "int32"),
    }


# ---------------------------------------------------------------------------
# ALiBi
# ---------------------------------------------------------------------------


def test_alibi_slopes_are_the_papers():
    # Press et al. §3: for 8 heads 1/2, 1/4, ..., 1/256.
    np.testing.assert_allclose(layers.alibi_slopes(8), [2.0 ** -k for k in range(1, 9)])
    # 16 heads: 1/sqrt(2), 1/2, ..., 1/256.
    np.testing.assert_allclose(layers.alibi_slopes(16), [2.0 ** (-k / 2) for k in range(1, 17)])
    # Other counts interpolate: 12 = the 8 slopes of 8 heads + slopes 1, 3, 5, 7 of 16.
    twelve = layers.alibi_slopes(12)
    np.testing.assert_allclose(twelve[:8], layers.alibi_slopes(8))
    np.testing.assert_allclose(twelve[8:], [2.0 ** (-k / 2) for k in (1, 3, 5, 7)])
    for n in (1, 2, 3, 4, 5, 6, 7, 12, 20, 24):
        np.testing.assert_allclose(layers.alibi_slopes(n), ref.alibi_slopes(n), rtol=1e-12)
        # keras-hub's AlibiBias takes its slopes from the same paper code.
        hub = keras_hub.layers.AlibiBias()._get_slopes(n)
        np.testing.assert_allclose(layers.alibi_slopes(n), hub, rtol=1e-12)
    # Negative control: the naive 2^(-8/n) geometric sequence for n = 12.
    naive = [2.0 ** (-8.0 * (i + 1) / 12) for i in range(12)]
    assert not np.allclose(layers.alibi_slopes(12), naive)


@pytest.mark.parametrize("num_heads, q_len, k_len", [(4, 7, 7), (6, 5, 9), (12, 10, 3)])
def test_alibi_bias_matches_reference(num_heads, q_len, k_len):
    layer = layers.BidirectionalAlibiBias(num_heads)
    got = layer(np.zeros((2, q_len, 8), "float32"), np.zeros((2, k_len, 8), "float32"))
    assert tuple(got.shape) == (1, num_heads, q_len, k_len)
    assert keras.backend.standardize_dtype(got.dtype) == "float32"
    want = ref.alibi_bias(num_heads, q_len, k_len)
    assert_close(got[0], want)
    # Negative controls: a flipped sign; the first slopes of twice the heads
    # (2^(-4/n) ... instead of 2^(-8/n) ...).
    assert not_close(got[0], -want)
    assert not_close(got[0], ref.alibi_bias(2 * num_heads, q_len, k_len)[:num_heads])


def test_alibi_layer_config_and_symbolic():
    layer = layers.BidirectionalAlibiBias(6, name="alibi")
    config = layer.get_config()
    revived = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(layer))
    assert type(revived) is layers.BidirectionalAlibiBias and revived.get_config() == config
    symbolic = layer(keras.KerasTensor((None, None, 16)))
    assert tuple(symbolic.shape) == (1, 6, None, None)
    # Mixed precision: tests/layers/test_layers.py, at 12 heads (at 6 every slope is a power of 2,
    # so float16 would be exact and could not tell).


def test_keras_hub_alibi_bias_is_not_the_bidirectional_form():
    """keras-hub's AlibiBias: `m (j - (n - 1))`, key position only, for causal decoders."""
    n = 6
    hub = to_numpy(keras_hub.layers.AlibiBias()(np.zeros((1, H, n, n), "float32")))[0]
    ours = ref.alibi_bias(H, n, n)
    # The same in every row: it does not depend on the query.
    np.testing.assert_allclose(hub, np.broadcast_to(hub[:, :1], hub.shape))
    # So it is not -m |i - j| ...
    assert not np.allclose(hub, ours)
    # ... and after the softmax every query prefers the last key, not itself.
    assert np.all(hub.argmax(-1) == n - 1)
    assert np.all(ours.argmax(-1) == np.arange(n))
    # Under a causal mask (j <= i) the two differ by a constant per row, which
    # the softmax cancels: AlibiBias is the paper's causal form.
    causal = np.tril(np.ones((n, n), bool))
    difference = np.where(causal, ours - hub, np.nan)  # (h, n, n)
    np.testing.assert_allclose(
        difference, np.where(causal, np.nanmax(difference, -1, keepdims=True), np.nan)
    )


def test_alibi_attention_fused_and_einsum_match_reference():
    bias = layers.BidirectionalAlibiBias(H)(X)
    for implementation in ("einsum", "fused"):
        layer = built(
            layers.UntiedPositionalAttention(
                H, untied_scaling=False, attention_implementation=implementation
            ),
            attention_bias=bias,
        )
        got = layer(X, padding_mask=MASK, attention_bias=bias)
        want = reference_attention(layer, positional_bias=ref.alibi_bias(H, N, N))
        assert_close(got, want)
        assert not_close(got, reference_attention(layer, positional_bias=-ref.alibi_bias(H, N, N)))


def test_alibi_backbone_computes_the_bias_once_and_exposes_it():
    backbone = TupeBackbone.from_preset("alibi_tiny")
    assert backbone.alibi_bias is not None and backbone.position_embedding is None
    assert_close(backbone.positional_bias(9), ref.alibi_bias(backbone.num_heads, 9, 9))
    # One bias layer in the graph, shared by every transformer layer.
    alibi_layers = [l for l in backbone.layers if isinstance(l, layers.BidirectionalAlibiBias)]
    assert len(alibi_layers) == 1
    # No absolute table: any length.
    length = backbone.max_sequence_length + 40
    out = backbone(inputs(1, length))["sequence_output"]
    assert out.shape == (1, length, backbone.hidden_dim)


def test_alibi_composes_with_tupe_untied_correlation_and_cls_reset():
    config = {**PRESETS["tupe_r_tiny"], "relative_position": "alibi"}
    backbone = TupeBackbone(**config)
    randomize_weights(backbone, seed=4)
    n = 8
    untied = backbone.untied_correlation(np.zeros((1, n, backbone.hidden_dim), "float32"))
    expected = to_numpy(untied)[0] + ref.alibi_bias(backbone.num_heads, n, n)
    theta1 = to_numpy(backbone.cls_reset_layer.cls_to_others)
    theta2 = to_numpy(backbone.cls_reset_layer.others_to_cls)
    assert_close(backbone.positional_bias(n), ref.cls_reset(expected, theta1, theta2))


# ---------------------------------------------------------------------------
# Rotary
# ---------------------------------------------------------------------------


def test_rotary_reference_is_relative_and_layouts_agree():
    """The NumPy RoFormer rotation itself: q_m.k_n depends on m - n only."""
    q, k = RNG.normal(size=(2, 8))
    rows = np.stack([q] * 6), np.stack([k] * 6)  # the same vectors at positions 0..5
    rq, rk = ref.roformer_rotate(rows[0]), ref.roformer_rotate(rows[1])
    logits = rq @ rk.T  # (6, 6)
    for shift in range(-5, 6):
        assert np.allclose(np.diagonal(logits, shift), np.diagonal(logits, shift)[0])
    # The half layout is the interleaved one up to a permutation of the dimensions.
    x = RNG.normal(size=(5, 8))
    perm = ref.half_to_interleaved(8)
    np.testing.assert_allclose(ref.rotate_half_layout(x)[:, perm], ref.roformer_rotate(x[:, perm]))


def test_keras_hub_rotary_is_roformer_on_the_half_layout():
    x = RNG.normal(size=(2, 9, H, D_H)).astype("float32")  # (B, n, h, d_h)
    hub = to_numpy(keras_hub.layers.RotaryEmbedding()(x))
    want = np.moveaxis(ref.rotate_half_layout(np.moveaxis(x, 2, 1)), 1, 2)  # over (B, h, n, d_h)
    assert_close(hub, want)
    # Negative control: keras-hub is not RoFormer's interleaved pairing as such.
    interleaved = np.moveaxis(ref.roformer_rotate(np.moveaxis(x, 2, 1)), 1, 2)
    assert not_close(hub, interleaved)


@pytest.mark.parametrize("implementation", ["einsum", "fused"])
def test_rotary_attention_matches_keras_hub_by_hand(implementation):
    layer = built(layers.RotaryPositionalAttention(
        H, untied_scaling=False, attention_implementation=implementation
    ))
    got = layer(X, padding_mask=MASK)
    # keras-hub's RotaryEmbedding applied by hand to q and k, then plain attention.
    rotary = keras_hub.layers.RotaryEmbedding()
    query = rotary(layer.query_dense(X))  # (B, n, h, d_h)
    key = rotary(layer.key_dense(X))
    value = layer.value_dense(X)
    logits = ops.einsum("bqhd,bkhd->bhqk", query, key) / math.sqrt(D_H)
    logits = logits + (1.0 - ops.cast(MASK, "float32"))[:, None, None, :] * -1e9
    context = ops.einsum("bhqk,bkhd->bqhd", ops.softmax(logits, axis=-1), value)
    assert_close(got, layer.output_dense(context))


def test_rotary_attention_matches_roformer_reference():
    for untied_scaling, method in ((False, "bert"), (True, "untied")):
        layer = built(layers.RotaryPositionalAttention(H, untied_scaling=untied_scaling))
        got = layer(X, padding_mask=MASK)
        assert_close(got, reference_attention(layer, method, rotary=True))
        # Negative controls: no rotation; the wrong scale.
        assert not_close(got, reference_attention(layer, method))
        other = "untied" if method == "bert" else "bert"
        assert not_close(got, reference_attention(layer, other, rotary=True))


def test_rotary_queries_match_reference_and_not_the_flipped_angle():
    layer = built(layers.RotaryPositionalAttention(H, untied_scaling=False))
    p = attention_params(layer, D)
    q = ref.split_heads(X[0] @ p["wq"] + p["bq"], H)  # (h, n, d_h)
    k = ref.split_heads(X[0] @ p["wk"] + p["bk"], H)
    got_q, got_k = layer.position_query_key(layer.query_dense(X[:1]), layer.key_dense(X[:1]))
    got = np.einsum("qhd,khd->hqk", to_numpy(got_q)[0], to_numpy(got_k)[0])  # (h, n, n)
    want = np.einsum("hid,hjd->hij", ref.rotate_half_layout(q), ref.rotate_half_layout(k))
    assert_close(got, want)
    # Negative control: the sine's sign flipped (rotation by -m θ = S R(m θ) S,
    # S negating the second half) makes the logits depend on j - i instead of i - j.
    s = np.r_[np.ones(D_H // 2), -np.ones(D_H // 2)]
    flipped_q, flipped_k = (ref.rotate_half_layout(x * s) * s for x in (q, k))
    assert not_close(got, np.einsum("hid,hjd->hij", flipped_q, flipped_k))


def test_rotary_layer_harness():
    run_layer_test(
        layers.RotaryPositionalAttention,
        init_kwargs=dict(num_heads=H, untied_scaling=False, max_wavelength=500),
        call_kwargs=dict(inputs=X, padding_mask=MASK),
        expected_output_shape=(B, N, D),
    )


@pytest.mark.parametrize(
    "preset, relative_position",
    [("tupe_a_tiny", "rotary"),  # rotated content / sqrt(2 d_h) + untied + [CLS] reset
     ("bert_a_d_tiny", "alibi"),  # BERT-A^d's four correlations + ALiBi
     ("bert_r_tiny", "alibi")],  # absolute positions added + ALiBi
)
def test_compositions_match_the_reference_encoder(preset, relative_position):
    backbone = TupeBackbone(**{**PRESETS[preset], "relative_position": relative_position})
    if relative_position == "rotary":
        attention = backbone.transformer_layers[0].attention
        assert isinstance(attention, layers.RotaryPositionalAttention) and attention.untied_scaling
    randomize_weights(backbone, seed=6)
    data = inputs(2, 10, real=7, seed=2)
    data["segment_ids"][:, 5:] = 1
    got = backbone(data)["sequence_output"]
    want = ref.encoder_forward(backbone_params(backbone), data["token_ids"],
                               data["padding_mask"], data["segment_ids"])["sequence_output"]
    assert_close(got, want)


# ---------------------------------------------------------------------------
# Disentangled (DeBERTa)
# ---------------------------------------------------------------------------


def test_deberta_log_buckets_match_reference_and_keras_hub():
    from keras_hub.src.models.deberta_v3.disentangled_self_attention import (
        DisentangledSelfAttention,
    )

    delta = np.arange(-700, 701)
    for bucket_size, max_position in ((256, 512), (8, 24), (5, 128), (2, 4)):
        got = to_numpy(layers.deberta_log_bucket_position(delta, bucket_size, max_position))
        np.testing.assert_array_equal(got, ref.deberta_log_bucket(delta, bucket_size, max_position))
        hub = DisentangledSelfAttention(1, 8, max_position, bucket_size)
        np.testing.assert_array_equal(got, to_numpy(hub._make_log_bucket_position(delta)))
        assert np.all(got == -got[::-1])  # odd
    # DeBERTa's defaults: exact up to 128, then log; 511 -> 255.
    got = to_numpy(layers.deberta_log_bucket_position(np.array([128, 129, 200, 511]), 256, 512))
    assert got[0] == 128 and 128 < got[1] <= got[2] < got[3] == 255


def test_disentangled_attention_matches_reference():
    bucket_size, max_position = 6, 16
    positions = RNG.normal(size=(1, 2 * bucket_size, D)).astype("float32")
    layer = built(
        layers.DisentangledAttention(H, bucket_size=bucket_size, max_position=max_position),
        relative_embeddings=positions,
    )
    got = layer(X, relative_embeddings=positions, padding_mask=MASK)
    table = {"relative_embeddings": positions[0], "bucket_size": bucket_size,
             "max_position": max_position}
    assert_close(got, reference_attention(layer, disentangled=table))

    # Negative controls on the logits: the paper's d(j, i) in p2c; scale 1/sqrt(2 d_h).
    p = attention_params(layer, D)
    q = ref.split_heads(X[0] @ p["wq"] + p["bq"], H)
    k = ref.split_heads(X[0] @ p["wk"] + p["bk"], H)
    pq = ref.split_heads(positions[0] @ p["wq"] + p["bq"], H)
    pk = ref.split_heads(positions[0] @ p["wk"] + p["bk"], H)
    got_logits = layer.attention_logits(
        layer.query_dense(X[:1]), layer.key_dense(X[:1]), positions
    )[0]
    want = ref.disentangled_logits(q, k, pq, pk, bucket_size, max_position)
    assert_close(got_logits, want)
    paper = ref.disentangled_logits(q, k, pq, pk, bucket_size, max_position, p2c_delta="paper")
    assert not_close(got_logits, paper)
    assert not_close(got_logits, want * math.sqrt(3 / 2))


def test_disentangled_index_rows():
    index = to_numpy(disentangled_index(12, 12, 6, 16)).astype(int)
    delta = np.arange(12)[:, None] - np.arange(12)[None, :]  # i - j
    np.testing.assert_array_equal(index, np.clip(ref.deberta_log_bucket(delta, 6, 16) + 6, 0, 11))
    # By hand (k = 6, mid = 3, log scale 16): i - j = 0 -> row 6; |i - j| <= 3 exact;
    # 5 -> 3 + ceil(2 log(5/3) / log(5)) = 4 -> row 10; 11 -> 5 -> row 11; -11 -> row 1.
    assert np.all(np.diagonal(index) == 6) and index[3, 0] == 9 and index[0, 3] == 3
    assert index[5, 0] == 10 and index[11, 0] == 11 and index[0, 11] == 1


def test_disentangled_layer_harness():
    positions = RNG.normal(size=(1, 8, D)).astype("float32")
    run_layer_test(
        layers.DisentangledAttention,
        init_kwargs=dict(num_heads=H, bucket_size=4, max_position=16),
        call_kwargs=dict(inputs=X, relative_embeddings=positions, padding_mask=MASK),
        expected_output_shape=(B, N, D),
    )


def _port_deberta(source, target):
    """Copies a keras-hub `DebertaV3Backbone`'s weights into a `deberta` TupeBackbone."""

    def copy(src, dst):
        # The output projection is (d, d) in keras-hub, (h, d_h, d) here.
        assert np.prod(src.shape) == np.prod(dst.shape), (src.path, dst.path)
        dst.assign(ops.reshape(src, dst.shape))

    def copy_layer(src, dst):
        assert len(src.weights) == len(dst.weights), (src.name, dst.name)
        for a, b in zip(src.weights, dst.weights):
            copy(a, b)

    copy(source.token_embedding.embeddings, target.token_embedding.embeddings)
    copy_layer(source.embeddings_layer_norm, target.embeddings_layer_norm)
    copy(source.relative_embeddings.rel_embeddings,
         target.disentangled_embedding.relative_embeddings)
    copy_layer(source.relative_embeddings.layer_norm, target.disentangled_embedding.layer_norm)
    for hub_block, block in zip(source.transformer_layers, target.transformer_layers):
        hub_attention, attention = hub_block._self_attention_layer, block.attention
        for name in ("query", "key", "value", "output"):
            src = getattr(hub_attention, f"_{name}_dense" if name != "output" else "_output_dense")
            dst = getattr(attention, f"{name}_dense")
            copy_layer(src, dst)
        copy_layer(hub_block._self_attention_layer_norm, block.attention_layer_norm)
        copy_layer(hub_block._feedforward_intermediate_dense, block.intermediate_dense)
        copy_layer(hub_block._feedforward_output_dense, block.output_dense)
        copy_layer(hub_block._feedforward_layer_norm, block.output_layer_norm)


def test_deberta_preset_matches_keras_hub_deberta_v3_on_ported_weights():
    """Same weights, same inputs: the sequence outputs of both agree within 1e-5.

    What corresponds: token embedding, embedding LayerNorm, the relative table
    and its LayerNorm, each layer's q/k/v/output projections, post-LN blocks,
    exact GELU. What differs and is matched by config: no segment embedding
    (`num_segments=0`), LayerNorm epsilon 1e-7 everywhere
    (`layer_norm_epsilon=1e-7`), `bucket_size` the same,
    `max_sequence_length` the same. TupeBackbone has a pooler keras-hub's
    DeBERTa lacks (not compared).
    """
    sizes = dict(vocabulary_size=97, num_layers=2, num_heads=H, hidden_dim=D,
                 intermediate_dim=48, max_sequence_length=24)
    # n > bucket_size // 2: log buckets; n > max_sequence_length: clipped rows.
    bucket_size, n = 8, 30
    source = keras_hub.models.DebertaV3Backbone(**sizes, bucket_size=bucket_size, dropout=0.0)
    randomize_weights(source, seed=9)
    target = TupeBackbone(
        **{**PRESETS["deberta_tiny"], **sizes}, bucket_size=bucket_size,
        num_segments=0, layer_norm_epsilon=1e-7, dropout=0.0,
    )
    _port_deberta(source, target)
    data = inputs(2, n, real=None, vocabulary_size=97, seed=3)
    data["padding_mask"][1, 17:] = 0
    want = to_numpy(source({"token_ids": data["token_ids"],
                            "padding_mask": data["padding_mask"]}))
    got = to_numpy(target(data)["sequence_output"])
    np.testing.assert_allclose(got, want, atol=1e-5, rtol=1e-5)
    # Negative control: flip the sign of the relative table's LayerNorm scale:
    # only the c2p / p2c terms change, and the outputs must show it.
    gamma = target.disentangled_embedding.layer_norm.gamma
    gamma.assign(-gamma)
    assert not_close(target(data)["sequence_output"], want)


def test_deberta_backbone_shares_one_table_and_takes_any_length():
    backbone = TupeBackbone.from_preset("deberta_tiny")
    assert backbone.bucket_size == backbone.max_sequence_length // 2  # DeBERTa's 256/512
    tables = [w for w in backbone.weights if w.path.endswith("relative_embeddings")]
    assert len(tables) == 1 and tuple(tables[0].shape) == (backbone.max_sequence_length, 64)
    length = backbone.max_sequence_length + 40
    out = backbone(inputs(1, length))["sequence_output"]
    assert np.all(np.isfinite(to_numpy(out)))


# ---------------------------------------------------------------------------
# Bad input
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "overrides, message",
    [
        (dict(relative_position="rope"),
         r"`relative_position` must be one of \(.*'alibi', 'rotary', 'disentangled'\). "
         r"Received: relative_position='rope'"),
        (dict(relative_position="rotary", absolute_correlation="untied_cross"),
         r"relative_position='rotary' does not compose with absolute_correlation='untied_cross'"
         r".*`absolute_correlation` must be one of \('none', 'untied'\)"),
        (dict(relative_position="disentangled", absolute_correlation="untied"),
         r"relative_position='disentangled' does not compose with absolute_correlation='untied'"
         r".*`absolute_correlation` must be one of \('none',\)"),
        (dict(relative_position="disentangled", attention_implementation="fused"),
         r"attention_implementation='fused'.*relative_position='disentangled'"),
        (dict(relative_position="rotary", cls_reset=True),
         r"cls_reset=True.*relative_position in \('t5_bias', 'alibi'\).*"
         r"relative_position='rotary'"),
        (dict(relative_position="alibi", absolute_correlation="untied", cls_reset=True,
              cls_reset_style="fairseq"),
         r"cls_reset_style='fairseq'.*no 'alibi'.*must be 'paper'"),
        (dict(relative_position="rotary", hidden_dim=60, num_heads=12),
         r"relative_position='rotary' rotates pairs.*must be even\. Received: head size 5 "
         r"\(hidden_dim=60, num_heads=12\)"),
        (dict(relative_position="disentangled", bucket_size=1),
         r"relative_position='disentangled'.*bucket_size.*"
         r"Received: bucket_size=1, max_sequence_length=128"),
    ],
)
def test_bad_config_is_refused_clearly(overrides, message):
    with pytest.raises(ValueError, match=message):
        TupeBackbone(**{**PRESETS["bert_a_tiny"], "absolute_position": "none", **overrides})


def test_bad_layer_arguments_are_refused_clearly():
    with pytest.raises(ValueError, match=r"head size .* must be even\. Received: head size 3"):
        layers.RotaryPositionalAttention(2, untied_scaling=False)(np.ones((1, 4, 6), "float32"))
    with pytest.raises(ValueError, match=r"`bucket_size` k, an int >= 2 .* Received: "
                                         r"bucket_size=1"):
        layers.DisentangledAttention(2, bucket_size=1)
    with pytest.raises(ValueError, match=r"`max_position`, an int above k // 2 \+ 1 .* "
                                         r"Received: bucket_size=8, max_position=5"):
        layers.DisentangledAttention(2, bucket_size=8, max_position=5)
    with pytest.raises(ValueError, match="needs `relative_embeddings`"):
        layers.DisentangledAttention(2, bucket_size=4, max_position=16)(
            np.ones((1, 4, 8), "float32")
        )
    with pytest.raises(ValueError, match=r"relative_position='disentangled' needs "
                                         r"`relative_embeddings`"):
        block = layers.TransformerEncoderBlock(2, 8, relative_position="disentangled",
                                               bucket_size=4, max_sequence_length=16)
        block(np.ones((1, 4, 8), "float32"))
    with pytest.raises(ValueError, match=r"`num_heads` must be a positive int\. Received: "
                                         r"num_heads=0"):
        layers.BidirectionalAlibiBias(0)


# ---------------------------------------------------------------------------
# The presets end to end
# ---------------------------------------------------------------------------


# Slow (about 60 s on 2 CPU cores: XLA compiles the model twice). Only deberta:
# its gathers are the new dynamic-shape code; rope's rotation is keras-hub's
# layer and alibi's bias takes the T5 bias's path (tupe_r's XLA test), and
# both attentions pass the layer harness's jit-compiled step.
@pytest.mark.slow
@pytest.mark.parametrize("variant", ["deberta"])
def test_preset_trains_under_xla_with_dynamic_batch_and_length(variant):
    backbone = TupeBackbone.from_preset(f"{variant}_tiny")
    symbolic = {name: keras.Input((None,), dtype="int32", name=name) for name in inputs(1, 1)}
    model = keras.Model(symbolic, keras.layers.Dense(2)(backbone(symbolic)["pooled_output"]))
    model.compile(
        optimizer=keras.optimizers.AdamW(1e-3),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        jit_compile=True,
    )
    before = [to_numpy(w).copy() for w in backbone.trainable_weights]
    for batch, length in ((4, 16), (3, 24)):  # a new shape: XLA recompiles
        data = inputs(batch, length, real=length - 3)
        assert np.isfinite(model.train_on_batch(data, np.arange(batch) % 2))
    after = [to_numpy(w) for w in backbone.trainable_weights]
    assert all(not np.array_equal(b, a) for b, a in zip(before, after))
