"""TUPE's untied absolute positional correlation (Eq. 7)."""

import math

import keras
from keras import ops

from keras_tupe.layers.cls_reset import reset_cls_from_reserved_rows
from keras_tupe.layers.utils import (
    check_sequence_length, clone_initializer, head_dim, initializer_or_default,
)

OUTPUT_MODES = ("correlation", "projections")


@keras.saving.register_keras_serializable(package="keras_tupe")
class UntiedPositionalCorrelation(keras.layers.Layer):
    """The content-free positional term of TUPE, computed once per forward pass.

    TUPE (Ke et al., ICLR 2021, Eq. 7) unties positions from words: positions
    have their own table `p`, LayerNorm and projections, and their correlation
    is added to every layer's attention logits:

        P = LayerNorm(p[:n]);  PQ = P U^Q;  PK = P U^K     (U with bias)
        A^h = PQ^h (PK^h)^T / sqrt(2 d_h)                  # (h, n, n)

    `A` does not depend on the batch or the layer, so it is returned with a
    leading batch axis of 1 to broadcast, and an encoder computes it once.
    With `output_mode="projections"` the layer returns `(PQ, PK)` instead, each
    `(1, n, h, d_h)`, which BERT-A^d adds to every layer's queries and keys.

    With `reserved_cls_rows=True` (the TUPE authors' code) the output is
    already [CLS]-reset, from two reserved table rows
    (`reset_cls_from_reserved_rows`), with no learned θ.

    The LayerNorm and projections follow the layer's dtype policy (so
    `mixed_bfloat16` computes them in bfloat16, and a `DTypePolicyMap` can
    quantize the projections); the correlation itself is taken in float32
    from them, as keras-hub takes its softmax, because it is added to float32
    logits. Under `float32` every number is as before.

    Args:
        num_heads: int. Number of attention heads; must divide the hidden size.
        max_sequence_length: int. The longest input; rows of the position
            table `p` (one more with `reserved_cls_rows`).
        output_mode: `"correlation"` (TUPE) or `"projections"` (BERT-A^d).
            Defaults to `"correlation"`.
        layer_norm_epsilon: float. Defaults to `1e-12`.
        reserved_cls_rows: bool. The authors' [CLS] reset from two reserved
            table rows (see above); only with `output_mode="correlation"`.
            Defaults to `False`.
        embeddings_initializer: initializer of `p`. Defaults to a truncated
            normal with stddev 0.02.
        kernel_initializer: initializer of `U^Q, U^K`. Defaults to a truncated
            normal with stddev 0.02.

    Call arguments:
        inputs: tensor `(B, n, d)`, the embedded sequence; only `n` and `d` are
            used.

    Returns:
        float32 `(1, h, n, n)`, or a tuple of two float32 `(1, n, h, d_h)`.

    Example:
    >>> layer = UntiedPositionalCorrelation(num_heads=4, max_sequence_length=128)
    >>> layer(keras.ops.zeros((2, 10, 64))).shape
    (1, 4, 10, 10)
    """

    def __init__(
        self,
        num_heads,
        max_sequence_length,
        output_mode="correlation",
        layer_norm_epsilon=1e-12,
        reserved_cls_rows=False,
        embeddings_initializer=None,
        kernel_initializer=None,
        **kwargs,
    ):
        kwargs.setdefault("autocast", False)
        super().__init__(**kwargs)
        if output_mode not in OUTPUT_MODES:
            raise ValueError(
                f"`output_mode` must be one of {OUTPUT_MODES}. "
                f"Received: output_mode={output_mode!r}"
            )
        if num_heads < 1 or max_sequence_length < 1:
            raise ValueError(
                "`num_heads` and `max_sequence_length` must be positive. Received: "
                f"num_heads={num_heads}, max_sequence_length={max_sequence_length}"
            )
        if reserved_cls_rows and output_mode != "correlation":
            raise ValueError(
                "`reserved_cls_rows=True` resets the [CLS] row and column of the "
                "correlation; it needs output_mode='correlation'. Received: "
                f"output_mode={output_mode!r}"
            )
        self.num_heads = num_heads
        self.max_sequence_length = max_sequence_length
        self.output_mode = output_mode
        self.layer_norm_epsilon = layer_norm_epsilon
        self.reserved_cls_rows = reserved_cls_rows
        self.embeddings_initializer = initializer_or_default(embeddings_initializer)
        self.kernel_initializer = initializer_or_default(kernel_initializer)

    def build(self, inputs_shape):
        hidden_dim = inputs_shape[-1]
        self.head_dim = head_dim(hidden_dim, self.num_heads)
        self.position_embeddings = self.add_weight(
            name="position_embeddings",
            shape=(self.max_sequence_length + int(self.reserved_cls_rows), hidden_dim),
            initializer=clone_initializer(self.embeddings_initializer),
            dtype=self.variable_dtype,
        )
        self.position_layer_norm = keras.layers.LayerNormalization(
            epsilon=self.layer_norm_epsilon, dtype=self.dtype_policy, name="position_layer_norm"
        )
        self.position_layer_norm.build((None, hidden_dim))
        projection = dict(
            equation="nd,dhk->nhk",
            output_shape=(self.num_heads, self.head_dim),
            bias_axes="hk",
            dtype=self.dtype_policy,
        )
        # U^Q and U^K each get their own draw (one shared initializer object
        # would make them equal, and the initial positional term symmetric).
        self.query_projection = keras.layers.EinsumDense(
            name="query_projection",
            kernel_initializer=clone_initializer(self.kernel_initializer),
            **projection,
        )
        self.query_projection.build((None, hidden_dim))
        self.key_projection = keras.layers.EinsumDense(
            name="key_projection",
            kernel_initializer=clone_initializer(self.kernel_initializer),
            **projection,
        )
        self.key_projection.build((None, hidden_dim))
        self.built = True

    def call(self, inputs):
        length = ops.shape(inputs)[1]
        check_sequence_length(length, self.max_sequence_length, "untied position table")
        # The authors' table: row t + 1 for position t, rows 0 and 1 give [CLS]'s θ.
        rows = length + 1 if self.reserved_cls_rows else length
        table = ops.cast(self.position_embeddings, self.compute_dtype)[:rows]  # (n or n + 1, d)
        positions = self.position_layer_norm(table)
        # In the compute dtype; up to float32 for the correlation and the outputs.
        query = ops.cast(self.query_projection(positions), "float32")  # (n, h, d_h)
        key = ops.cast(self.key_projection(positions), "float32")  # (n, h, d_h)
        if self.output_mode == "projections":
            return query[None], key[None]  # (1, n, h, d_h) each
        query = query * (1.0 / math.sqrt(2 * self.head_dim))
        correlation = ops.einsum("qhd,khd->hqk", query, key)  # (h, rows, rows)
        if self.reserved_cls_rows:
            correlation = reset_cls_from_reserved_rows(correlation)  # (h, n, n)
        return correlation[None]  # (1, h, n, n)

    def compute_output_spec(self, inputs):
        length = inputs.shape[1]
        if self.output_mode == "projections":
            head_dim = inputs.shape[-1] // self.num_heads
            spec = keras.KerasTensor((1, length, self.num_heads, head_dim), "float32")
            return spec, keras.KerasTensor(spec.shape, "float32")
        return keras.KerasTensor((1, self.num_heads, length, length), "float32")

    def get_config(self):
        return {
            **super().get_config(),
            "num_heads": self.num_heads,
            "max_sequence_length": self.max_sequence_length,
            "output_mode": self.output_mode,
            "layer_norm_epsilon": self.layer_norm_epsilon,
            "reserved_cls_rows": self.reserved_cls_rows,
            "embeddings_initializer": keras.initializers.serialize(self.embeddings_initializer),
            "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
        }
