"""Huang et al. §4.4, drop-in relative embeddings: absolute encoder → + method 4.

An encoder pre-trained with absolute positions keeps them and gains method-4
relative tables (`(q·k + q·a + k·a) / sqrt(d_h)`), zero-initialized so that
its first outputs equal the original model's; then it is fine-tuned like any
other. Sources: a keras_tupe backbone with absolute positions (`bert_a`), or
keras-hub's `BertBackbone`.
"""

import keras_hub

from keras_tupe.models.tupe_backbone import TupeBackbone

# keras-hub BertBackbone weights that TupeBackbone names the same.
_KERAS_HUB_BERT = (
    "token_embedding/embeddings", "position_embedding/embeddings",
    "segment_embedding/embeddings", "embeddings_layer_norm/gamma", "embeddings_layer_norm/beta",
    "pooled_dense/kernel", "pooled_dense/bias",
)
# keras-hub BertBackbone layer weight path → TupeBackbone's (under transformer_layer_{i}/).
_KERAS_HUB_BERT_LAYER = {
    "self_attention_layer/query": "self_attention/query",
    "self_attention_layer/key": "self_attention/key",
    "self_attention_layer/value": "self_attention/value",
    "self_attention_layer/attention_output": "self_attention/attention_output",
    "self_attention_layer_norm": "attention_layer_norm",
    "feedforward_intermediate_dense": "intermediate_dense",
    "feedforward_output_dense": "output_dense",
    "feedforward_layer_norm": "output_layer_norm",
}


def _copy(source_values, target, allowed_missing=("relative_embeddings",)):
    """Assigns `source_values` ({path: array}) to the weights of `target` by path."""
    missing = []
    for weight in target.weights:
        if weight.path in source_values:
            value = source_values.pop(weight.path)
            if tuple(value.shape) != tuple(weight.shape):
                raise ValueError(f"Shape mismatch for {weight.path}: {value.shape} vs {weight.shape}")
            weight.assign(value)
        elif not weight.path.endswith(allowed_missing) and "seed_generator" not in weight.path:
            missing.append(weight.path)
    if missing or source_values:
        raise ValueError(
            f"Could not map every weight. Target weights without a source: {missing}; "
            f"source weights without a target: {sorted(source_values)}"
        )
    return target


def add_relative_method4(backbone, max_relative_distance=None):
    """A copy of an absolute keras_tupe backbone with zero-initialized method-4 tables.

    Args:
        backbone: a `TupeBackbone` with `absolute_position="added"` and no
            relative term (e.g. a pre-trained `bert_a`).
        max_relative_distance: the clipping distance `k`; defaults to the
            backbone's `max_sequence_length`.
    """
    if backbone.absolute_position != "added" or backbone.relative_position != "none" or (
        backbone.absolute_correlation != "none"
    ):
        raise ValueError(
            "The drop-in adds method-4 tables to an encoder pre-trained with absolute positions "
            "only (absolute_position='added', no relative term, no untied correlation). "
            f"Received: absolute_position={backbone.absolute_position!r}, "
            f"absolute_correlation={backbone.absolute_correlation!r}, "
            f"relative_position={backbone.relative_position!r}"
        )
    config = backbone.get_config()
    config.update(
        name=f"{backbone.name}_method4",
        relative_position="method4",
        zero_init_relative_tables=True,
        max_relative_distance=max_relative_distance or backbone.max_sequence_length,
        # Method 4 multiplies positions into the logits: no fused kernel applies.
        attention_implementation="auto",
    )
    target = TupeBackbone.from_config(config)
    values = {w.path: w.numpy()
              for w in backbone.weights if "seed_generator" not in w.path}
    return _copy(values, target)


def from_keras_hub_bert(bert, relative_method4=True, max_relative_distance=None, dropout=None):
    """A `TupeBackbone` with the weights of a `keras_hub.models.BertBackbone`.

    With `relative_method4=True` (the default) it also gets zero-initialized
    method-4 tables (Huang's drop-in); either way its outputs before any
    training equal the keras-hub model's.
    """
    if not isinstance(bert, keras_hub.models.BertBackbone):
        raise TypeError(f"Expected a keras_hub.models.BertBackbone. Received: {type(bert).__name__}")
    target = TupeBackbone(
        vocabulary_size=bert.vocabulary_size,
        num_layers=bert.num_layers,
        num_heads=bert.num_heads,
        hidden_dim=bert.hidden_dim,
        intermediate_dim=bert.intermediate_dim,
        dropout=bert.dropout if dropout is None else dropout,
        max_sequence_length=bert.max_sequence_length,
        num_segments=bert.num_segments,
        absolute_position="added",
        relative_position="method4" if relative_method4 else "none",
        zero_init_relative_tables=True,
        max_relative_distance=max_relative_distance,
        layer_norm_epsilon=1e-12,
        activation="gelu_approximate",  # keras-hub's BERT uses the tanh GELU
        dtype=bert.dtype_policy,
    )
    values = {}
    for weight in bert.weights:
        path = weight.path
        if path in _KERAS_HUB_BERT:
            values[path] = weight.numpy()
            continue
        layer, rest = path.split("/", 1)
        for source, destination in _KERAS_HUB_BERT_LAYER.items():
            if rest.startswith(source + "/"):
                values[f"{layer}/{destination}/{rest[len(source) + 1:]}"] = weight.numpy()
                break
        else:
            if "seed_generator" not in path:
                raise ValueError(f"Unexpected keras-hub BERT weight {path}")
    return _copy(values, target)


def keras_hub_inputs(inputs):
    """Only the inputs keras-hub BERT takes: `token_ids`, `padding_mask`, `segment_ids`."""
    # BertBackbone's own names, not TupeBackbone's: should the TUPE backbone take another
    # input, BERT must still be given only these.
    return {name: inputs[name] for name in ("token_ids", "padding_mask", "segment_ids")}


__all__ = ["add_relative_method4", "from_keras_hub_bert", "keras_hub_inputs"]
