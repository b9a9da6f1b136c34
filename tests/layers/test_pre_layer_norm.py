"""`layer_norm_position="pre"` (Xiong et al. 2020) against the NumPy float64 reference.

Pre-LN: `y = x + Attn(LN_1(x))`, `x' = y + FFN(LN_2(y))`, the input LayerNorm kept and
one final LayerNorm after the last layer (`../shared/docs/positional-encodings.md`, 4).
"""

import numpy as np
import pytest

from keras_tupe import TupeBackbone
from keras_tupe_base.presets import VARIANTS
from tests.backends import backends
from tests import numpy_reference as ref
from tests.reference_params import assert_close, backbone_params, randomize_weights
from tests.test_numpy_reference import TYPES, WORDS, _params

pytestmark = backends  # make test-jax runs the whole module again under JAX

RNG = np.random.default_rng(7)


def _inputs(backbone, batch=3, n=12):
    return {
        "token_ids": RNG.integers(0, backbone.vocabulary_size, (batch, n)).astype("int32"),
        "padding_mask": np.array([[1] * n, [1] * 8 + [0] * 4, [1] * 3 + [0] * 9], "int32"),
        "segment_ids": RNG.integers(0, 2, (batch, n)).astype("int32"),
    }


def test_reference_pre_ln_one_layer_by_hand():
    # The reference's pre-LN wiring against its separately tested pieces, written out.
    params = _params(num_layers=1, layer_norm_position="pre")
    params["final_layer_norm"] = (1.0 + 0.3 * RNG.normal(size=4), RNG.normal(size=4))
    (layer,) = params["layers"]
    eps, mask = params["layer_norm_epsilon"], np.array([1, 1, 1, 1, 0])
    e = params["token_embedding"][WORDS] + params["segment_embedding"][TYPES]
    x = ref.layer_norm(e + params["position_embedding"][: len(WORDS)],
                       *params["embeddings_layer_norm"], eps)
    h = ref.layer_norm(x, *layer["attention_layer_norm"], eps)
    y = x + ref.multi_head_attention(
        h, *(layer[k] for k in ("wq", "bq", "wk", "bk", "wv", "bv", "wo", "bo")),
        params["num_heads"], mask, "bert",
    )
    g = ref.layer_norm(y, *layer["output_layer_norm"], eps)
    z = y + ref.gelu(g @ layer["w1"] + layer["b1"]) @ layer["w2"] + layer["b2"]
    want = ref.layer_norm(z, *params["final_layer_norm"], eps)
    got = ref.encoder_forward(params, WORDS, mask, TYPES)
    np.testing.assert_allclose(got["sequence_output"], want, atol=1e-12)
    np.testing.assert_allclose(got["encoder_outputs"][0], z, atol=1e-12)
    post = ref.encoder_forward({**params, "layer_norm_position": "post"}, WORDS, mask, TYPES)
    assert np.abs(post["sequence_output"] - want).max() > 1e-2


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_pre_ln_backbone_matches_the_reference(variant):
    backbone = TupeBackbone.from_preset(
        f"{variant}_tiny", max_relative_distance=5, bucket_size=5, layer_norm_position="pre"
    )
    randomize_weights(backbone, seed=11)
    inputs = _inputs(backbone)
    params = backbone_params(backbone)
    want = ref.encoder_forward(params, inputs["token_ids"], inputs["padding_mask"],
                               inputs["segment_ids"])
    got = backbone.layer_outputs()(inputs)
    assert_close(backbone(inputs)["sequence_output"], want["sequence_output"])
    assert_close(got["pooled_output"], want["pooled_output"])
    for layer_got, layer_want in zip(got["encoder_outputs"], want["encoder_outputs"]):
        assert_close(layer_got, layer_want)
    # The same weights read as post-LN give other outputs: the test sees the wiring.
    post = ref.encoder_forward({**params, "layer_norm_position": "post"}, inputs["token_ids"],
                               inputs["padding_mask"], inputs["segment_ids"])
    gap = np.abs(post["sequence_output"] - want["sequence_output"]).max()
    assert gap > 1e-2 * np.abs(want["sequence_output"]).max()


def test_pre_ln_has_one_final_layer_norm_and_round_trips(tmp_path):
    post = TupeBackbone.from_preset("tupe_a_tiny")
    pre = TupeBackbone.from_preset("tupe_a_tiny", layer_norm_position="pre")
    assert post.final_layer_norm is None and post.layer_norm_position == "post"
    names = {w.path for w in pre.weights} - {w.path for w in post.weights}
    assert names == {"final_layer_norm/gamma", "final_layer_norm/beta"}
    assert all(layer.layer_norm_position == "pre" for layer in pre.transformer_layers)
    randomize_weights(pre, seed=5)
    pre.save_to_preset(str(tmp_path / "pre"))
    again = TupeBackbone.from_preset(str(tmp_path / "pre"))
    assert again.layer_norm_position == "pre"
    inputs = _inputs(pre)
    np.testing.assert_allclose(
        np.asarray(again(inputs)["sequence_output"]),
        np.asarray(pre(inputs)["sequence_output"]), rtol=1e-6, atol=1e-6,
    )


def test_unknown_layer_norm_position_names_the_choices():
    with pytest.raises(ValueError, match=r"layer_norm_position.*\('post', 'pre'\).*'sandwich'"):
        TupeBackbone.from_preset("bert_a_tiny", layer_norm_position="sandwich")
