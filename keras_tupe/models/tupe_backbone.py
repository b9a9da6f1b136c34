"""The encoder backbone for every positional encoding of TUPE and Huang et al."""

import numbers
import os

import keras
import keras_hub
from keras import ops

from keras_tupe.layers.schemes import (
    SHARED_INPUTS,
    BackbonePositions,
    check_content_free,
    with_own_knobs,
)
from keras_tupe.layers.transformer_encoder_block import (
    LAYER_NORM_POSITIONS,
    TransformerEncoderBlock,
)
from keras_tupe.layers.utils import check_sequence_length, clone_initializer
from keras_tupe.models.preset_folders import (
    StagedPresetSaving,
    check_preset_folder,
    check_weights_file,
    classproperty,
)
from keras_tupe.models.saving import WholeWeightsFiles
from keras_tupe_base.checks import check_choice
from keras_tupe_base.presets import PRESETS, absolute_length_limit, preset_description

INPUT_NAMES = ("token_ids", "padding_mask", "segment_ids")
# The constructor arguments `get_config` returns, each stored under its own name.
CONFIG_KEYS = (
    "vocabulary_size", "num_layers", "num_heads", "hidden_dim", "intermediate_dim", "dropout",
    "max_sequence_length", "num_segments", "absolute_position", "absolute_correlation",
    "relative_position", "cls_reset", "cls_reset_style", "mask_padding_embeddings",
    "num_buckets", "max_distance", "max_relative_distance", "bucket_size",
    "zero_init_relative_tables",
    "layer_norm_epsilon", "activation", "attention_implementation", "layer_norm_position",
)


def without_unused_segment_ids(model, inputs):
    """`inputs` less `segment_ids` where `model` takes none (no segment embedding).

    A backbone with `num_segments=0` takes `token_ids` and `padding_mask` only, as
    keras-hub's RoBERTa does; the batches keras_tupe's pipelines make for every preset
    (pre-training, GLUE packing, SQuAD windows) hold `segment_ids`, so a model without
    that input drops them, values ignored. Never pass them on: a functional model given a
    dict with a key it lacks warns, then matches the values by position, not by name
    (`token_ids` would get the segment ids).
    """
    if isinstance(inputs, dict) and "segment_ids" in inputs and "segment_ids" not in model.input:
        return {name: value for name, value in inputs.items() if name != "segment_ids"}
    return inputs


def _check_arguments(layer_norm_position, num_segments, **sizes):
    """Refuses the non-positional arguments the encoder cannot take, naming the problem."""
    check_choice("layer_norm_position", layer_norm_position, LAYER_NORM_POSITIONS)
    for name, value in {**sizes, "num_segments": num_segments}.items():
        minimum = 0 if name == "num_segments" else 1
        if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value < minimum:
            what = "a positive int" if minimum == 1 else "an int >= 0 (0: no segment embedding)"
            raise ValueError(f"`{name}` must be {what}. Received: {name}={value!r}")
    if sizes["hidden_dim"] % sizes["num_heads"]:
        raise ValueError(
            "`hidden_dim` must be divisible by `num_heads`. Received: "
            f"hidden_dim={sizes['hidden_dim']}, num_heads={sizes['num_heads']}"
        )


@keras.saving.register_keras_serializable(package="keras_tupe")
class TupeBackbone(WholeWeightsFiles, StagedPresetSaving, keras_hub.models.Backbone):
    """A BERT-style encoder whose positional encoding is a set of choices.

    Four orthogonal fields make every variant of TUPE (Ke et al., ICLR 2021)
    and of Huang et al. (Findings of EMNLP 2020), plus ALiBi, rotary and
    DeBERTa, a configuration (`keras_tupe_base.presets`): `absolute_position`,
    `absolute_correlation`, `relative_position` and `cls_reset` (TUPE's untied
    [CLS], Eq. 9). Each `absolute_correlation` / `relative_position` value is
    one row of `keras_tupe.layers.schemes`, which says what it builds and what
    it composes with; the constructor refuses what the rows do not allow.
    `docs/formulas.md` gives every formula; `docs/converting-checkpoints.md`
    the TUPE authors' code (`cls_reset_style="fairseq"`, `mask_padding_embeddings`).

    Inputs and outputs are keras-hub's (`keras_hub.models.BertBackbone`): a
    dict of int32 `token_ids`, `padding_mask` (1 or True = token) and
    `segment_ids`, each `(batch, seq)`; out comes a dict of `sequence_output`
    `(batch, seq, d)` and `pooled_output` `(batch, d)` (tanh dense on [CLS]).
    Without a segment embedding (`num_segments=0`: the fairseq-fork presets) the
    inputs are `token_ids` and `padding_mask` only, as keras-hub's
    `RobertaBackbone` (given `segment_ids` too, it ignores them).
    `from_preset` takes a preset folder (`save_to_preset`) or the name of a
    built-in architecture (`TupeBackbone.presets`, freshly initialized).

    Args:
        vocabulary_size: int. Size of the token vocabulary.
        num_layers: int. Number of Transformer layers.
        num_heads: int. Attention heads; must divide `hidden_dim`.
        hidden_dim: int. Hidden size.
        intermediate_dim: int. Feed-forward hidden size.
        dropout: float. Defaults to `0.1`.
        max_sequence_length: int. Rows of the absolute position tables; the
            longest input an absolute encoder accepts. Relative-only encoders
            accept any length. Defaults to `512`.
        num_segments: int. Rows of the segment (type) embedding; `0` for none.
            Defaults to `2`.
        absolute_position: `"added"` or `"none"`. Defaults to `"added"`.
        absolute_correlation: `"none"`, `"untied"` (TUPE's untied correlation,
            Eq. 7, content scaled by `1/sqrt(2 d_h)`) or `"untied_cross"`
            (BERT-A^d). Defaults to `"none"`.
        relative_position: `"none"`, `"t5_bias"` (BERT-R, TUPE-R), `"shaw"`,
            `"method1"` ... `"method4"` (Huang), `"alibi"`, `"rotary"` or
            `"disentangled"` (DeBERTa). Defaults to `"none"`.
        cls_reset: bool. Replace the [CLS] row and column of the
            position-only term by learned `θ1, θ2`; needs a position-only
            term (`"untied"`, `"t5_bias"` or `"alibi"`). Defaults to `False`.
        cls_reset_style: `"paper"` (learned θ, Eq. 9) or `"fairseq"` (the
            authors' code: reserved rows and buckets, no θ); needs
            `cls_reset=True`. Defaults to `"paper"`.
        mask_padding_embeddings: bool. Zero the embeddings at padded positions
            after the input LayerNorm (the authors' code). Defaults to `False`.
        num_buckets: int. T5 buckets (`"t5_bias"`). Defaults to `32`.
        max_distance: int. T5 distance from which buckets are shared
            (`"t5_bias"`). Defaults to `128`.
        max_relative_distance: int `k`, clipping distance of the Shaw / Huang
            tables. Defaults to `max_sequence_length` (no clipping).
        bucket_size: int `k`, DeBERTa's `bucket_size` (`"disentangled"`): a
            table of `2k` rows shared by all layers, distances exact up to
            `k // 2`, log buckets up to `max_sequence_length`. Defaults to
            `max_sequence_length // 2` (DeBERTa's 256 for 512).
        zero_init_relative_tables: bool. Start the Shaw / Huang vector tables
            at zero (Huang's drop-in). Defaults to `False`.

        The last five are the rows' knobs (`PositionalScheme.knobs`): `None`
        takes the row's default, the one given here.
        layer_norm_epsilon: float. Defaults to `1e-12`.
        layer_norm_position: `"post"` (BERT) or `"pre"` (Xiong et al. 2020; see
            `TransformerEncoderBlock`), which adds one final LayerNorm after the
            last layer, before the pooler. Defaults to `"post"`.
        activation: feed-forward activation. Defaults to `"gelu"`.
        attention_implementation: `"auto"`, `"einsum"` or `"fused"`
            (`keras.ops.dot_product_attention`, for the rows that say `fusable`;
            see `UntiedPositionalAttention`). Defaults to `"auto"`.
        dtype: dtype policy of the model. Defaults to the global policy.

    Example:
    >>> backbone = TupeBackbone.from_preset("tupe_r_tiny")
    >>> inputs = {
    ...     "token_ids": np.ones((2, 16), "int32"),
    ...     "padding_mask": np.ones((2, 16), "int32"),
    ...     "segment_ids": np.zeros((2, 16), "int32"),
    ... }
    >>> backbone(inputs)["sequence_output"].shape
    TensorShape([2, 16, 64])
    >>> backbone.save_to_preset("my_tupe_r")          # config + weights
    >>> keras_hub.models.Backbone.from_preset("my_tupe_r")  # the same model
    """

    def __init__(
        self,
        vocabulary_size,
        num_layers,
        num_heads,
        hidden_dim,
        intermediate_dim,
        dropout=0.1,
        max_sequence_length=512,
        num_segments=2,
        absolute_position="added",
        absolute_correlation="none",
        relative_position="none",
        cls_reset=False,
        cls_reset_style="paper",
        mask_padding_embeddings=False,
        num_buckets=None,
        max_distance=None,
        max_relative_distance=None,
        bucket_size=None,
        zero_init_relative_tables=None,
        layer_norm_epsilon=1e-12,
        activation="gelu",
        attention_implementation="auto",
        layer_norm_position="post",
        dtype=None,
        **kwargs,
    ):
        _check_arguments(layer_norm_position, num_segments, vocabulary_size=vocabulary_size,
                         num_layers=num_layers, num_heads=num_heads, hidden_dim=hidden_dim,
                         intermediate_dim=intermediate_dim, max_sequence_length=max_sequence_length)
        # Every weight gets its own clone (`clone_initializer`): one shared
        # unseeded initializer would give them all the same numbers.
        initializer = keras.initializers.TruncatedNormal(stddev=0.02)
        # The table checks the positional arguments and says what they build.
        positions = BackbonePositions.check(
            absolute_position=absolute_position, absolute_correlation=absolute_correlation,
            relative_position=relative_position, cls_reset=cls_reset,
            cls_reset_style=cls_reset_style, attention_implementation=attention_implementation,
            hidden_dim=hidden_dim, num_heads=num_heads, max_sequence_length=max_sequence_length,
            layer_norm_epsilon=layer_norm_epsilon, initializer=initializer,
            num_buckets=num_buckets, max_distance=max_distance,
            max_relative_distance=max_relative_distance, bucket_size=bucket_size,
            zero_init_relative_tables=zero_init_relative_tables,
        )

        # === Layers ===
        self.token_embedding = keras_hub.layers.ReversibleEmbedding(
            vocabulary_size,
            hidden_dim,
            embeddings_initializer=clone_initializer(initializer),
            dtype=dtype,
            name="token_embedding",
        )
        self.position_embedding = positions.position_embedding(dtype)
        self.segment_embedding = None
        if num_segments:
            self.segment_embedding = keras.layers.Embedding(
                num_segments,
                hidden_dim,
                embeddings_initializer=clone_initializer(initializer),
                dtype=dtype,
                name="segment_embedding",
            )
        self.embeddings_layer_norm = keras.layers.LayerNormalization(
            epsilon=layer_norm_epsilon, dtype=dtype, name="embeddings_layer_norm"
        )
        self.embeddings_dropout = keras.layers.Dropout(dropout, dtype=dtype, name="embeddings_dropout")
        # The schemes' terms computed once per pass (`untied_correlation`,
        # `relative_bias`, `alibi_bias`, `disentangled_embedding`; `None` if unused).
        for attribute, layer in positions.shared_terms(dtype).items():
            setattr(self, attribute, layer)
        self.cls_reset_layer = positions.cls_reset_layer(dtype)
        self.transformer_layers = [
            TransformerEncoderBlock(
                num_heads,
                intermediate_dim,
                dropout=dropout,
                activation=activation,
                layer_norm_epsilon=layer_norm_epsilon,
                kernel_initializer=clone_initializer(initializer),
                max_sequence_length=max_sequence_length,
                layer_norm_position=layer_norm_position,
                **positions.block_arguments,
                dtype=dtype,
                name=f"transformer_layer_{i}",
            )
            for i in range(num_layers)
        ]
        # Pre-LN leaves the residual stream unnormalized: one LayerNorm closes it.
        self.final_layer_norm = None
        if layer_norm_position == "pre":
            self.final_layer_norm = keras.layers.LayerNormalization(
                epsilon=layer_norm_epsilon, dtype=dtype, name="final_layer_norm"
            )
        self.pooled_dense = keras.layers.Dense(
            hidden_dim,
            activation="tanh",
            kernel_initializer=clone_initializer(initializer),
            dtype=dtype,
            name="pooled_dense",
        )

        # === Functional Model ===
        inputs = {name: keras.Input(shape=(None,), dtype="int32", name=name)
                  for name in INPUT_NAMES if name != "segment_ids" or num_segments}
        padding_mask = inputs["padding_mask"]
        x = self.token_embedding(inputs["token_ids"])
        if self.position_embedding is not None:
            x = x + self.position_embedding(x)
        if self.segment_embedding is not None:
            x = x + self.segment_embedding(inputs["segment_ids"])
        x = self.embeddings_dropout(self.embeddings_layer_norm(x))
        if mask_padding_embeddings:
            x = x * ops.cast(padding_mask, x.dtype)[:, :, None]  # (B, n, d)
        shared_inputs = self._positional_terms(x, positions.rows)
        for layer in self.transformer_layers:
            x = layer(x, padding_mask=padding_mask, **shared_inputs)
        if self.final_layer_norm is not None:
            x = self.final_layer_norm(x)
        pooled = self.pooled_dense(x[:, 0, :])
        super().__init__(
            inputs=inputs,
            outputs={"sequence_output": x, "pooled_output": pooled},
            dtype=dtype,
            **kwargs,
        )

        # === Config ===
        self.vocabulary_size = vocabulary_size
        self.num_layers = num_layers
        self.num_heads = num_heads
        self.hidden_dim = hidden_dim
        self.intermediate_dim = intermediate_dim
        self.dropout = dropout
        self.max_sequence_length = max_sequence_length
        self.num_segments = num_segments
        self.mask_padding_embeddings = mask_padding_embeddings
        self.layer_norm_epsilon = layer_norm_epsilon
        self.activation = activation
        self.layer_norm_position = layer_norm_position
        # `absolute_position` ... `attention_implementation` and the knobs, resolved.
        for name, value in positions.arguments.items():
            setattr(self, name, value)

    def _positional_terms(self, x, schemes):
        """The block inputs (`SHARED_INPUTS`) the `schemes` compute once per pass.

        From the embedded sequence `x` (only its length is used): the
        position-only `attention_bias` `(1, h, n, n)` after the [CLS] reset,
        BERT-A^d's `position_query`/`position_key` `(1, n, h, d_h)`, DeBERTa's
        LayerNorm-ed `relative_embeddings` `(1, 2k, d)`; `None` where absent.
        """
        terms = dict.fromkeys(SHARED_INPUTS)
        for scheme in schemes:
            term = scheme.shared_term
            if term is None:
                continue
            outputs = getattr(self, term.attribute)(x)
            if len(term.outputs) == 1:
                outputs = (outputs,)
            for name, value in zip(term.outputs, outputs):
                terms[name] = value if terms[name] is None else terms[name] + value
        if self.cls_reset_layer is not None:
            terms["attention_bias"] = self.cls_reset_layer(terms["attention_bias"])
        return terms

    @property
    def absolute_length_limit(self):
        """The longest input the model takes, or `None` when any length works."""
        return absolute_length_limit(
            self.absolute_position, self.absolute_correlation, self.max_sequence_length
        )

    def check_sequence_length(self, length):
        """Raises a clear error when `length` exceeds the absolute table (if any)."""
        limit = self.absolute_length_limit
        if limit is not None:
            check_sequence_length(length, limit, "absolute position table")

    def positional_bias(self, sequence_length):
        """The content-free positional term every layer adds, `(h, n, n)` float32.

        This is the untied correlation and/or the T5 or ALiBi bias after the
        [CLS] reset: what TUPE's Figure 5 draws. Encoders whose positions
        interact with the content (BERT-A, BERT-A^d, Shaw, methods 1-4, rotary,
        disentangled) have no such term.
        """
        schemes = check_content_free(self.absolute_correlation, self.relative_position)
        x = ops.zeros((1, sequence_length, self.hidden_dim), self.compute_dtype)
        return self._positional_terms(x, schemes)["attention_bias"][0]

    def call(self, inputs, training=None, mask=None):
        inputs = without_unused_segment_ids(self, inputs)
        self._validate_inputs(inputs)
        return super().call(inputs, training=training, mask=mask)

    def _validate_inputs(self, inputs):
        names = list(self.input)
        if not isinstance(inputs, dict) or set(inputs) != set(names):
            received = sorted(inputs) if isinstance(inputs, dict) else type(inputs).__name__
            raise ValueError(
                f"TupeBackbone takes a dict with exactly the keys {names}. "
                f"Received: {received}"
            )
        shapes = {}
        for name in names:
            value = inputs[name]
            dtype = keras.backend.standardize_dtype(getattr(value, "dtype", type(value)))
            # keras-hub's preprocessors give a boolean `padding_mask`.
            if "int" not in dtype and not (name == "padding_mask" and dtype == "bool"):
                raise TypeError(
                    f"`{name}` must hold integers (token ids, 0/1 mask, segment ids). "
                    f"Received: dtype {dtype}"
                )
            shapes[name] = tuple(value.shape)
        if len(set(shapes.values())) > 1 or len(shapes["token_ids"]) != 2:
            raise ValueError(
                f"The inputs {names} must all have the same shape (batch, seq). "
                f"Received: {shapes}"
            )
        length = shapes["token_ids"][1]
        self.check_sequence_length(
            ops.shape(inputs["token_ids"])[1] if length is None else length
        )

    def layer_outputs(self):
        """A functional model of the same layers that also returns each layer's output.

        Its outputs are `sequence_output`, `pooled_output` and `encoder_outputs`,
        a list of `(batch, seq, d)`, one per Transformer layer (what TF-Hub's BERT
        encoders return). With `layer_norm_position="pre"` these are the layers'
        residual streams, before the final LayerNorm that `sequence_output` has.
        The weights are this backbone's own, not copies.
        """
        outputs = {key: self.output[key] for key in ("sequence_output", "pooled_output")}
        outputs["encoder_outputs"] = [layer.output for layer in self.transformer_layers]
        return _LayerOutputs(self.input, outputs, name=f"{self.name}_layer_outputs")

    @classproperty
    def presets(cls):
        """The built-in architectures, `{name: {"metadata": ..., "config": ...}}`.

        keras-hub's layout (`BertBackbone.presets`). They are configurations with no
        published weights: `from_preset(name)` initializes them freshly. Pre-trained
        weights travel as preset folders (`save_to_preset`).
        """
        return {
            name: {
                "metadata": {
                    "description": preset_description(name),
                    "official_name": "TUPE",
                    "path": "keras_tupe",
                },
                "config": dict(config),
            }
            for name, config in sorted(PRESETS.items())
        }

    @classmethod
    def from_preset(cls, preset, load_weights=True, **kwargs):
        """A backbone from a preset folder (with its weights) or a built-in name.

        Args:
            preset: a preset folder (`save_to_preset`, `training.pretrain`'s
                `preset/`), or a built-in architecture name such as
                `"tupe_r_base"` (see `TupeBackbone.presets`; freshly initialized).
            load_weights: bool. Load a folder's weights. Defaults to `True`.
            **kwargs: constructor arguments overriding the preset's.
        """
        if isinstance(preset, str) and preset in PRESETS:
            return cls(**{**PRESETS[preset], **kwargs})
        check_preset_folder(preset, cls, load_weights)
        return super().from_preset(preset, load_weights=load_weights, **kwargs)

    def load_weights(self, filepath, *args, **kwargs):
        """Keras's `load_weights` (keras-hub's `from_preset` loads `model.weights.h5` here);
        a truncated or corrupt `.h5` file is named first (`check_weights_file`)."""
        if str(filepath).endswith(".h5") and os.path.isfile(filepath):
            check_weights_file(filepath)
        return super().load_weights(filepath, *args, **kwargs)

    def get_config(self):
        return {**super().get_config(), **{key: getattr(self, key) for key in CONFIG_KEYS}}

    @classmethod
    def from_config(cls, config):
        # Preset folders written before a knob had its own argument still load.
        return super().from_config(with_own_knobs(config))


class _LayerOutputs(keras.Model):
    """`TupeBackbone.layer_outputs()`'s functional model: given `segment_ids` where the
    backbone takes none, it ignores them, as the backbone does (`without_unused_segment_ids`)."""

    def call(self, inputs, training=None, mask=None):
        return super().call(without_unused_segment_ids(self, inputs), training=training,
                            mask=mask)
