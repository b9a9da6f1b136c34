"""Glue between keras_tupe models and the NumPy reference: weights in, params out."""

import numpy as np
from keras import ops


def assert_close(actual, expected, rtol=1e-5):
    """Relative error below `rtol`, measured against the reference's scale."""
    actual = np.asarray(ops.convert_to_numpy(actual), np.float64)
    expected = np.asarray(expected, np.float64)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    scale = np.max(np.abs(expected))
    np.testing.assert_allclose(actual, expected, rtol=rtol, atol=rtol * scale)


def randomize_weights(layer, seed=0):
    """Gives every weight a random value of a sensible scale.

    Default initializations (zeros biases, unit LayerNorm, zero θ, ones for the
    multiplicative tables) would hide wrong formulas; random values do not.
    """
    rng = np.random.default_rng(seed)
    for weight in layer.weights:
        name = weight.path.split("/")[-1]
        shape = tuple(weight.shape)
        if name == "gamma" or (name == "relative_embeddings" and len(shape) == 1):
            value = 1.0 + 0.3 * rng.normal(size=shape)
        elif name in ("kernel",):
            value = 0.2 * rng.normal(size=shape)
        elif name in ("bias", "beta"):
            value = 0.1 * rng.normal(size=shape)
        else:  # embeddings, position tables, T5 bias, θ, vector relative tables
            value = rng.normal(size=shape)
        weight.assign(value.astype("float32"))


def np_value(variable):
    return np.asarray(ops.convert_to_numpy(variable), np.float64)


def dense_params(einsum_dense, hidden_dim):
    """(kernel, bias) of a per-head projection as the reference's [d, d] / [d]."""
    kernel = np_value(einsum_dense.kernel)
    bias = np_value(einsum_dense.bias)
    if kernel.shape[0] == hidden_dim:  # input projection (d, h, d_h)
        return kernel.reshape(hidden_dim, -1), bias.reshape(-1)
    return kernel.reshape(-1, hidden_dim), bias  # output projection (h, d_h, d)


def attention_params(attention, hidden_dim):
    params = {}
    for key, layer in (("q", attention.query_dense), ("k", attention.key_dense),
                       ("v", attention.value_dense), ("o", attention.output_dense)):
        params[f"w{key}"], params[f"b{key}"] = dense_params(layer, hidden_dim)
    return params


def layer_norm_params(layer_norm):
    return np_value(layer_norm.gamma), np_value(layer_norm.beta)


def untied_params(layer, hidden_dim):
    wq, bq = dense_params(layer.query_projection, hidden_dim)
    wk, bk = dense_params(layer.key_projection, hidden_dim)
    gamma, beta = layer_norm_params(layer.position_layer_norm)
    return {
        "position_embedding": np_value(layer.position_embeddings),
        "layer_norm": (gamma, beta),
        "wq": wq, "bq": bq, "wk": wk, "bk": bk,
    }


def backbone_params(backbone):
    """The reference `encoder_forward` params of a `TupeBackbone`."""
    d = backbone.hidden_dim
    layers = []
    for block in backbone.transformer_layers:
        attention = block.attention
        layers.append(
            {
                **attention_params(attention, d),
                "attention_layer_norm": layer_norm_params(block.attention_layer_norm),
                "w1": np_value(block.intermediate_dense.kernel),
                "b1": np_value(block.intermediate_dense.bias),
                "w2": np_value(block.output_dense.kernel),
                "b2": np_value(block.output_dense.bias),
                "output_layer_norm": layer_norm_params(block.output_layer_norm),
                "relative_table": (
                    np_value(attention.relative_embeddings)
                    if hasattr(attention, "relative_embeddings")
                    else None
                ),
            }
        )
    return {
        "num_heads": backbone.num_heads,
        "layer_norm_epsilon": backbone.layer_norm_epsilon,
        "absolute_position": backbone.absolute_position,
        "absolute_correlation": backbone.absolute_correlation,
        "relative_position": backbone.relative_position,
        "cls_reset": backbone.cls_reset,
        "cls_reset_style": backbone.cls_reset_style,
        "mask_padding_embeddings": backbone.mask_padding_embeddings,
        "max_relative_distance": backbone.max_relative_distance,
        "bucket_size": backbone.bucket_size,
        "num_buckets": backbone.num_buckets,
        "max_distance": backbone.max_distance,
        "token_embedding": np_value(backbone.token_embedding.embeddings),
        "segment_embedding": (
            np_value(backbone.segment_embedding.embeddings)
            if backbone.segment_embedding is not None
            else None
        ),
        "position_embedding": (
            np_value(backbone.position_embedding.position_embeddings)
            if backbone.position_embedding is not None
            else None
        ),
        "embeddings_layer_norm": layer_norm_params(backbone.embeddings_layer_norm),
        "layer_norm_position": backbone.layer_norm_position,
        "final_layer_norm": (
            layer_norm_params(backbone.final_layer_norm)
            if backbone.final_layer_norm is not None
            else None
        ),
        "untied": (
            untied_params(backbone.untied_correlation, d)
            if backbone.untied_correlation is not None
            else None
        ),
        "t5_bias_table": (
            np_value(backbone.relative_bias.relative_attention_bias)
            if backbone.relative_bias is not None
            else None
        ),
        "cls_theta": (
            (np_value(backbone.cls_reset_layer.cls_to_others),
             np_value(backbone.cls_reset_layer.others_to_cls))
            if backbone.cls_reset_layer is not None
            else None
        ),
        "max_sequence_length": backbone.max_sequence_length,
        "disentangled": (
            {
                "relative_embeddings": np_value(
                    backbone.disentangled_embedding.relative_embeddings
                ),
                "layer_norm": layer_norm_params(backbone.disentangled_embedding.layer_norm),
            }
            if backbone.disentangled_embedding is not None
            else None
        ),
        "layers": layers,
        "pooler": (np_value(backbone.pooled_dense.kernel), np_value(backbone.pooled_dense.bias)),
    }
