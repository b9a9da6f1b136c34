"""The encoder backbone for every positional encoding of TUPE and Huang et al."""

import numbers

import keras
import keras_hub
from keras import ops

from keras_tupe.layers.bidirectional_alibi_bias import BidirectionalAlibiBias
from keras_tupe.layers.cls_reset import CLS_RESET_STYLES, ClsReset
from keras_tupe.layers.disentangled_relative_embedding import DisentangledRelativeEmbedding
from keras_tupe.layers.qkr_multiplicative_attention import METHODS
from keras_tupe.layers.relative_bucket_bias import RelativeBucketBias
from keras_tupe.layers.rotary_positional_attention import check_rotary_head_dim
from keras_tupe.layers.transformer_encoder_block import (
    LAYER_NORM_POSITIONS,
    TransformerEncoderBlock,
)
from keras_tupe.layers.untied_positional_attention import ATTENTION_IMPLEMENTATIONS
from keras_tupe.layers.untied_positional_correlation import UntiedPositionalCorrelation
from keras_tupe.layers.utils import check_sequence_length, clone_initializer
from keras_tupe.models.preset_folders import (
    check_preset_folder,
    classproperty,
    refuse_overwrite,
)
from keras_tupe.models.presets import PRESETS, preset_description

ABSOLUTE_POSITIONS = ("none", "added")
ABSOLUTE_CORRELATIONS = ("none", "untied", "untied_cross")
# Beyond the papers (issue 37): ALiBi (bidirectional), RoFormer's rotary
# embeddings, DeBERTa's disentangled attention.
BEYOND_RELATIVE_POSITIONS = ("alibi", "rotary", "disentangled")
RELATIVE_POSITIONS = ("none", "t5_bias") + METHODS + BEYOND_RELATIVE_POSITIONS
# The `absolute_correlation` values each of them composes with, and why not the others.
BEYOND_CORRELATIONS = {
    # Both are additive position-only terms (untied) or added to q/k (untied_cross).
    "alibi": (("none", "untied", "untied_cross"), ""),
    # The rotated content term plus an additive untied correlation is well defined;
    # positions added to q/k before or after the rotation is not.
    "rotary": (
        ("none", "untied"),
        "BERT-A^d adds position projections to the rotated queries and keys, and "
        "neither paper says whether before or after the rotation",
    ),
    # DeBERTa's logits have their own position terms and scale 1/sqrt(3 d_h).
    "disentangled": (
        ("none",),
        "DeBERTa's logits have position terms of their own and the scale "
        "1/sqrt(3 d_h), which leave no place for TUPE's 1/sqrt(2 d_h) terms",
    ),
}
INPUT_NAMES = ("token_ids", "padding_mask", "segment_ids")


def absolute_length_limit(
    absolute_position="added", absolute_correlation="none", max_sequence_length=512, **_
):
    """The longest input of an encoder config (or preset), or `None` for any length.

    An absolute table (positions added at the input, or the untied correlation)
    bounds the length; relative terms do not. Defaults are the constructor's.
    """
    if absolute_position == "added" or absolute_correlation != "none":
        return max_sequence_length
    return None


def _positive_ints(**values):
    for name, value in values.items():
        if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value < 1:
            raise ValueError(f"`{name}` must be a positive int. Received: {name}={value!r}")


def _choice(name, value, choices):
    if value not in choices:
        raise ValueError(f"`{name}` must be one of {choices}. Received: {name}={value!r}")


def _check_beyond_relative_position(
    relative_position, absolute_correlation, cls_reset_style, cls_reset,
    hidden_dim, num_heads, max_sequence_length, max_relative_distance,
):
    """Refuses the combinations of "alibi" / "rotary" / "disentangled" that do not compose.

    Each message names the field, the value received and the valid choices.
    """
    if relative_position not in BEYOND_RELATIVE_POSITIONS:
        return
    valid, reason = BEYOND_CORRELATIONS[relative_position]
    if absolute_correlation not in valid:
        raise ValueError(
            f"relative_position={relative_position!r} does not compose with "
            f"absolute_correlation={absolute_correlation!r}: {reason}. With "
            f"relative_position={relative_position!r}, `absolute_correlation` must be one "
            f"of {valid}. Received: absolute_correlation={absolute_correlation!r}"
        )
    if cls_reset and cls_reset_style == "fairseq":
        raise ValueError(
            "cls_reset_style='fairseq' reproduces the TUPE authors' code, whose reset "
            f"lives in the untied table and the T5 buckets; it has no {relative_position!r}. "
            "`cls_reset_style` must be 'paper' here. Received: "
            f"cls_reset_style={cls_reset_style!r}, relative_position={relative_position!r}"
        )
    if relative_position == "rotary":
        check_rotary_head_dim(hidden_dim // num_heads, hidden_dim, num_heads)
    if relative_position == "disentangled":
        if max_relative_distance < 2 or max_sequence_length <= max_relative_distance // 2 + 1:
            raise ValueError(
                "relative_position='disentangled' uses `max_relative_distance` as DeBERTa's "
                "bucket_size k (>= 2; exact distances up to k // 2) and "
                "`max_sequence_length` as the scale of its log buckets, which must exceed "
                f"k // 2 + 1. Received: max_relative_distance={max_relative_distance}, "
                f"max_sequence_length={max_sequence_length}"
            )


@keras.saving.register_keras_serializable(package="keras_tupe")
class TupeBackbone(keras_hub.models.Backbone):
    """A BERT-style encoder whose positional encoding is a set of choices.

    The positional encoding is four orthogonal fields, so every variant of the
    TUPE paper (Ke et al., ICLR 2021) and of Huang et al. (Findings of EMNLP
    2020) is a configuration (see `keras_tupe.models.presets`):

    - `absolute_position`: `"added"` adds a learned position embedding to the
      words at the input (BERT); `"none"` does not.
    - `absolute_correlation`: `"untied"` adds TUPE's untied positional
      correlation `LN(p)U^Q (LN(p)U^K)^T / sqrt(2 d_h)` to every layer's
      logits and scales the content term by `1/sqrt(2 d_h)` (Eq. 7);
      `"untied_cross"` (BERT-A^d) uses `(q_i + PQ_i)·(k_j + PK_j) / sqrt(2 d_h)`;
      `"none"` neither.
    - `relative_position`: `"t5_bias"` adds the T5 bucketed bias (BERT-R,
      TUPE-R, Eq. 8); `"shaw"`, `"method1"` ... `"method4"` use per-layer
      relative embeddings in the logits; `"none"` nothing. Beyond the two
      papers: `"alibi"` adds ALiBi's fixed `-m_h |i - j|`
      (`BidirectionalAlibiBias`, a position-only term like the T5 bias);
      `"rotary"` rotates queries and keys by position (RoFormer,
      `RotaryPositionalAttention`, even head size); `"disentangled"` is
      DeBERTa's content-to-position and position-to-content attention with
      log buckets and one relative table for all layers
      (`DisentangledAttention`). ALiBi composes with every
      `absolute_correlation` and with `cls_reset`; rotary with `"untied"`
      (its content term then scaled by `1/sqrt(2 d_h)`); disentangled with
      neither.
    - `cls_reset`: replace the [CLS] row and column of the position-only term
      by learned `θ1, θ2` (Eq. 9). Needs a position-only term (`"untied"` or
      `"t5_bias"`). `cls_reset_style="fairseq"` resets as the TUPE authors'
      code does instead (below).

    The authors' code (github.com/guolinke/TUPE at 4c64ff7, a fairseq fork)
    differs from the paper in ways that two more fields reproduce (the
    `tupe_a_fairseq_*` / `tupe_r_fairseq_*` presets and
    `keras_tupe.convert.convert_fairseq` use them):

    - `cls_reset_style="fairseq"`: no learned θ. The untied table has
      `max_sequence_length + 1` rows, position `t` uses row `t + 1`, and the
      [CLS] row / column of the correlation become `A_00` / `A_11` of the
      first two rows; the T5 bias gets [CLS] buckets of its own (column 0:
      an extra bucket `num_buckets`, then row 0: `num_buckets // 2`), added
      after the untied reset. The [CLS] logits are thus `θ + b`, not `θ`.
    - `mask_padding_embeddings=True`: the embeddings are multiplied by 0 at
      padded positions after the input LayerNorm (fairseq's
      `x *= 1 - padding_mask`), which changes the outputs at padded
      positions (never those at real tokens).

    With `layer_norm_epsilon=1e-5`, `num_segments=0` and
    `absolute_position="none"` this is the authors' model exactly.

    The position-only term (untied correlation, T5 bias, reset) is computed once
    per forward pass, `(1, h, n, n)`, and shared by all layers;
    `positional_bias(n)` returns it for inspection.

    Inputs and outputs are keras-hub's (`keras_hub.models.BertBackbone`): a
    dict of int32 `token_ids`, `padding_mask` (1 or True = token) and
    `segment_ids`, each `(batch, seq)`; out comes a dict of `sequence_output`
    `(batch, seq, d)` and `pooled_output` `(batch, d)` (tanh dense on [CLS]).
    The TF-Hub names (`token_ids`, ..., `encoder_outputs`) exist only in
    the exported SavedModels (`keras_tupe.export`).

    `from_preset` takes a preset folder written by `save_to_preset` (config,
    weights and, from a task or `training.pretrain`, the tokenizer), or the
    name of a built-in architecture (`TupeBackbone.presets`), which has no
    published weights and is freshly initialized.

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
        absolute_correlation: `"none"`, `"untied"` or `"untied_cross"`.
            Defaults to `"none"`.
        relative_position: `"none"`, `"t5_bias"`, `"shaw"`, `"method1"`,
            `"method2"`, `"method3"`, `"method4"`, `"alibi"`, `"rotary"` or
            `"disentangled"`. Defaults to `"none"`.
        cls_reset: bool. Defaults to `False`.
        cls_reset_style: `"paper"` (learned θ, Eq. 9) or `"fairseq"` (the
            authors' code, see above); needs `cls_reset=True`. Defaults to
            `"paper"`.
        mask_padding_embeddings: bool. Zero the embeddings at padded positions
            after the input LayerNorm (the authors' code). Defaults to `False`.
        num_buckets: int. T5 buckets. Defaults to `32`.
        max_distance: int. T5 distance from which buckets are shared.
            Defaults to `128`.
        max_relative_distance: int `k`, clipping distance of the Shaw / Huang
            tables. Defaults to `max_sequence_length` (no clipping). For
            `"disentangled"` it is DeBERTa's `bucket_size` (a table of `2k`
            rows shared by all layers, distances exact up to `k // 2`, log
            buckets up to `max_sequence_length`) and defaults to
            `max_sequence_length // 2` (DeBERTa's 256 for 512).
        zero_init_relative_tables: bool. Start the relative vector tables at
            zero (Huang's drop-in). Defaults to `False`.
        layer_norm_epsilon: float. Defaults to `1e-12`.
        layer_norm_position: `"post"` (BERT: a LayerNorm after each residual
            sum) or `"pre"` (Xiong et al. 2020: a LayerNorm before attention
            and before the feed-forward block, the input LayerNorm kept, one
            final LayerNorm after the last layer, before the pooler and any
            head). The positional terms are the same either way. Defaults to
            `"post"`.
        activation: feed-forward activation. Defaults to `"gelu"`.
        attention_implementation: `"auto"`, `"einsum"` or `"fused"`. `"fused"`
            runs the attention through `keras.ops.dot_product_attention` (fused
            or flash kernels on a GPU) with the position-only term as its bias;
            it applies to BERT-A, BERT-R, TUPE-A, TUPE-R, ALiBi and rotary
            and is refused for BERT-A^d, Shaw / methods 1-4 and
            disentangled. `"einsum"` is the reference path;
            `"auto"` is fused where it applies. A training call with
            `dropout > 0` always takes the einsum path (the fused op has no
            attention dropout). See `UntiedPositionalAttention`.
            Defaults to `"auto"`.
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
        num_buckets=32,
        max_distance=128,
        max_relative_distance=None,
        zero_init_relative_tables=False,
        layer_norm_epsilon=1e-12,
        activation="gelu",
        attention_implementation="auto",
        layer_norm_position="post",
        dtype=None,
        **kwargs,
    ):
        _choice("absolute_position", absolute_position, ABSOLUTE_POSITIONS)
        _choice("absolute_correlation", absolute_correlation, ABSOLUTE_CORRELATIONS)
        _choice("relative_position", relative_position, RELATIVE_POSITIONS)
        _choice("attention_implementation", attention_implementation, ATTENTION_IMPLEMENTATIONS)
        _choice("cls_reset_style", cls_reset_style, CLS_RESET_STYLES)
        _choice("layer_norm_position", layer_norm_position, LAYER_NORM_POSITIONS)
        _positive_ints(
            vocabulary_size=vocabulary_size, num_layers=num_layers, num_heads=num_heads,
            hidden_dim=hidden_dim, intermediate_dim=intermediate_dim,
            max_sequence_length=max_sequence_length,
        )
        if (not isinstance(num_segments, numbers.Integral) or isinstance(num_segments, bool)
                or num_segments < 0):
            raise ValueError(
                "`num_segments` must be an int >= 0 (0: no segment embedding). "
                f"Received: num_segments={num_segments!r}"
            )
        if cls_reset_style != "paper" and not cls_reset:
            raise ValueError(
                "`cls_reset_style` chooses how the [CLS] reset is done; "
                f"cls_reset_style={cls_reset_style!r} needs cls_reset=True. Received: "
                f"cls_reset={cls_reset!r}"
            )
        if attention_implementation == "fused" and (
            absolute_correlation == "untied_cross"
            or relative_position in METHODS + ("disentangled",)
        ):
            raise ValueError(
                "attention_implementation='fused' applies to logits that are a scaled "
                "dot product plus an additive positional bias (BERT-A, BERT-R, TUPE-A, "
                "TUPE-R, ALiBi, rotary); use 'auto' or 'einsum'. Received: "
                f"absolute_correlation={absolute_correlation!r}, "
                f"relative_position={relative_position!r}"
            )
        if hidden_dim % num_heads:
            raise ValueError(
                "`hidden_dim` must be divisible by `num_heads`. Received: "
                f"hidden_dim={hidden_dim}, num_heads={num_heads}"
            )
        has_position_only_term = (
            absolute_correlation == "untied" or relative_position in ("t5_bias", "alibi")
        )
        if cls_reset and not has_position_only_term:
            raise ValueError(
                "`cls_reset=True` resets the position-only correlation, which needs "
                "absolute_correlation='untied' or relative_position in ('t5_bias', "
                "'alibi'). Received: "
                f"absolute_correlation={absolute_correlation!r}, "
                f"relative_position={relative_position!r}"
            )
        relative_method = relative_position if relative_position in METHODS else None
        if absolute_correlation != "none" and relative_method is not None:
            raise ValueError(
                "The untied correlation and the Shaw / Huang relative embeddings are "
                "not combined by either paper; choose one. Received: "
                f"absolute_correlation={absolute_correlation!r}, "
                f"relative_position={relative_position!r}"
            )
        fairseq_reset = cls_reset and cls_reset_style == "fairseq"
        if max_relative_distance is None:
            max_relative_distance = (
                max_sequence_length // 2
                if relative_position == "disentangled"
                else max_sequence_length
            )
        _check_beyond_relative_position(
            relative_position, absolute_correlation, cls_reset_style, cls_reset,
            hidden_dim, num_heads, max_sequence_length, max_relative_distance,
        )
        if relative_position in ("rotary", "disentangled"):
            relative_method = relative_position
        # Every weight gets its own clone (`clone_initializer`): one shared
        # unseeded initializer would give them all the same numbers.
        initializer = keras.initializers.TruncatedNormal(stddev=0.02)

        # === Layers ===
        self.token_embedding = keras_hub.layers.ReversibleEmbedding(
            vocabulary_size,
            hidden_dim,
            embeddings_initializer=clone_initializer(initializer),
            dtype=dtype,
            name="token_embedding",
        )
        self.position_embedding = None
        if absolute_position == "added":
            self.position_embedding = keras_hub.layers.PositionEmbedding(
                max_sequence_length,
                initializer=clone_initializer(initializer),
                dtype=dtype,
                name="position_embedding",
            )
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
        self.embeddings_dropout = keras.layers.Dropout(
            dropout, dtype=dtype, name="embeddings_dropout"
        )
        self.untied_correlation = None
        if absolute_correlation != "none":
            self.untied_correlation = UntiedPositionalCorrelation(
                num_heads,
                max_sequence_length,
                output_mode="correlation" if absolute_correlation == "untied" else "projections",
                layer_norm_epsilon=layer_norm_epsilon,
                reserved_cls_rows=fairseq_reset and absolute_correlation == "untied",
                dtype=dtype,
                name="untied_positional_correlation",
            )
        self.relative_bias = None
        if relative_position == "t5_bias":
            self.relative_bias = RelativeBucketBias(
                num_heads,
                num_buckets=num_buckets,
                max_distance=max_distance,
                reserved_cls_buckets=fairseq_reset,
                dtype=dtype,
                name="relative_bucket_bias",
            )
        self.alibi_bias = None
        if relative_position == "alibi":
            self.alibi_bias = BidirectionalAlibiBias(num_heads, dtype=dtype, name="alibi_bias")
        self.disentangled_embedding = None
        if relative_position == "disentangled":
            self.disentangled_embedding = DisentangledRelativeEmbedding(
                max_relative_distance,
                layer_norm_epsilon=layer_norm_epsilon,
                embeddings_initializer=clone_initializer(initializer),
                dtype=dtype,
                name="disentangled_relative_embedding",
            )
        # The fairseq-style reset happens inside the two layers above.
        self.cls_reset_layer = None
        if cls_reset and not fairseq_reset:
            self.cls_reset_layer = ClsReset(num_heads, dtype=dtype, name="cls_reset")
        self.transformer_layers = [
            TransformerEncoderBlock(
                num_heads,
                intermediate_dim,
                dropout=dropout,
                activation=activation,
                layer_norm_epsilon=layer_norm_epsilon,
                untied_scaling=absolute_correlation != "none",
                relative_method=relative_method,
                max_relative_distance=max_relative_distance,
                zero_init_tables=zero_init_relative_tables,
                attention_implementation=attention_implementation,
                kernel_initializer=clone_initializer(initializer),
                max_sequence_length=max_sequence_length,
                layer_norm_position=layer_norm_position,
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
        token_ids = keras.Input(shape=(None,), dtype="int32", name="token_ids")
        padding_mask = keras.Input(shape=(None,), dtype="int32", name="padding_mask")
        segment_ids = keras.Input(shape=(None,), dtype="int32", name="segment_ids")
        x = self.token_embedding(token_ids)
        if self.position_embedding is not None:
            x = x + self.position_embedding(x)
        if self.segment_embedding is not None:
            x = x + self.segment_embedding(segment_ids)
        x = self.embeddings_dropout(self.embeddings_layer_norm(x))
        if mask_padding_embeddings:
            x = x * ops.cast(padding_mask, x.dtype)[:, :, None]  # (B, n, d)
        bias, position_query, position_key = self._positional_terms(x)
        # DeBERTa's relative table, LayerNorm-ed once and shared by all layers.
        relative_embeddings = (
            None if self.disentangled_embedding is None else self.disentangled_embedding(x)
        )  # (1, 2k, d)
        for layer in self.transformer_layers:
            x = layer(
                x,
                padding_mask=padding_mask,
                attention_bias=bias,
                position_query=position_query,
                position_key=position_key,
                relative_embeddings=relative_embeddings,
            )
        if self.final_layer_norm is not None:
            x = self.final_layer_norm(x)
        pooled = self.pooled_dense(x[:, 0, :])
        super().__init__(
            inputs={
                "token_ids": token_ids,
                "padding_mask": padding_mask,
                "segment_ids": segment_ids,
            },
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
        self.absolute_position = absolute_position
        self.absolute_correlation = absolute_correlation
        self.relative_position = relative_position
        self.cls_reset = cls_reset
        self.cls_reset_style = cls_reset_style
        self.mask_padding_embeddings = mask_padding_embeddings
        self.num_buckets = num_buckets
        self.max_distance = max_distance
        self.max_relative_distance = max_relative_distance
        self.zero_init_relative_tables = zero_init_relative_tables
        self.layer_norm_epsilon = layer_norm_epsilon
        self.activation = activation
        self.attention_implementation = attention_implementation
        self.layer_norm_position = layer_norm_position

    def _positional_terms(self, x):
        """The position-only term `(1, h, n, n)` and BERT-A^d's projections.

        Computed once from the embedded sequence `x` (only its length is used)
        and shared by every layer.
        """
        bias = position_query = position_key = None
        if self.untied_correlation is not None:
            if self.untied_correlation.output_mode == "projections":
                position_query, position_key = self.untied_correlation(x)
            else:
                bias = self.untied_correlation(x)
        for layer in (self.relative_bias, self.alibi_bias):
            if layer is not None:
                relative = layer(x)  # (1, h, n, n)
                bias = relative if bias is None else bias + relative
        if self.cls_reset_layer is not None:
            bias = self.cls_reset_layer(bias)
        return bias, position_query, position_key

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
        if self.untied_correlation is None and self.relative_bias is None and (
            self.alibi_bias is None
        ):
            raise ValueError(
                "This encoder has no content-free positional term: it needs "
                "absolute_correlation='untied' or relative_position in ('t5_bias', "
                "'alibi'). Received: "
                f"absolute_correlation={self.absolute_correlation!r}, "
                f"relative_position={self.relative_position!r}"
            )
        if self.absolute_correlation == "untied_cross":
            raise ValueError(
                "BERT-A^d (absolute_correlation='untied_cross') adds positions to the "
                "queries and keys; its positional term mixes with the content."
            )
        x = ops.zeros((1, sequence_length, self.hidden_dim), self.compute_dtype)
        bias, _, _ = self._positional_terms(x)
        return bias[0]

    def call(self, inputs, training=None, mask=None):
        self._validate_inputs(inputs)
        return super().call(inputs, training=training, mask=mask)

    def _validate_inputs(self, inputs):
        if not isinstance(inputs, dict) or set(inputs) != set(INPUT_NAMES):
            received = sorted(inputs) if isinstance(inputs, dict) else type(inputs).__name__
            raise ValueError(
                f"TupeBackbone takes a dict with exactly the keys {list(INPUT_NAMES)}. "
                f"Received: {received}"
            )
        shapes = {}
        for name in INPUT_NAMES:
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
                "`token_ids`, `padding_mask` and `segment_ids` must all have the "
                f"same shape (batch, seq). Received: {shapes}"
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
        return keras.Model(self.input, outputs, name=f"{self.name}_layer_outputs")

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

    def save_to_preset(self, preset_dir, max_shard_size=10, overwrite=False):
        """Writes `config.json`, the weights and `metadata.json` into `preset_dir`.

        An existing config or weights file there is refused unless `overwrite`.
        """
        refuse_overwrite(
            preset_dir, ["config.json", "model.weights.h5", "model.weights.json"], overwrite
        )
        super().save_to_preset(preset_dir, max_shard_size=max_shard_size)

    def get_config(self):
        config = super().get_config()
        for key in (
            "vocabulary_size", "num_layers", "num_heads", "hidden_dim", "intermediate_dim",
            "dropout", "max_sequence_length", "num_segments", "absolute_position",
            "absolute_correlation", "relative_position", "cls_reset", "cls_reset_style",
            "mask_padding_embeddings", "num_buckets",
            "max_distance", "max_relative_distance", "zero_init_relative_tables",
            "layer_norm_epsilon", "activation", "attention_implementation",
            "layer_norm_position",
        ):
            config[key] = getattr(self, key)
        return config
