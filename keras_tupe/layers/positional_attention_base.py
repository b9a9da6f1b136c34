"""The multi-head self-attention shared by every keras_tupe attention layer."""

import keras
from keras import ops

from keras_tupe.layers.utils import (
    Float32BiasCallMixin, attention_mask_to_bias, clone_initializer, head_dim,
    initializer_or_default,
)


class PositionalAttentionBase(Float32BiasCallMixin, keras.layers.Layer):
    """Multi-head self-attention whose logits a subclass defines.

    Projects the input to per-head queries, keys and values, asks
    `attention_logits(query, key, **kwargs)` for the float32 logits
    `(B, h, q, k)`, adds the optional precomputed `attention_bias` and the
    padding mask in float32, takes the softmax in float32, and mixes the values.
    A subclass may instead compute the same context with a fused kernel by
    overriding `fused_context` (see `UntiedPositionalAttention`).

    The positional bias stays float32 under mixed precision (see
    `Float32BiasCallMixin`).

    Args:
        num_heads: int. Number of attention heads; must divide the hidden size.
        dropout: float. Dropout on the attention probabilities. Defaults to `0.`.
        kernel_initializer: initializer of the projections. Defaults to a
            truncated normal with stddev 0.02.
        bias_initializer: initializer of the projection biases. Defaults to
            `"zeros"`.

    Call arguments:
        inputs: `(B, n, d)`.
        padding_mask: optional `(B, n)`, 1 for tokens, 0 for padding.
        attention_bias: optional float `(1 or B, h, n, n)`, added unscaled.
        training: bool, for dropout.
        **logit_kwargs: a subclass's own inputs, passed to `attention_logits`.

    Returns:
        `(B, n, d)` in the compute dtype.
    """

    def __init__(
        self,
        num_heads,
        dropout=0.0,
        kernel_initializer=None,
        bias_initializer="zeros",
        **kwargs,
    ):
        super().__init__(**kwargs)
        if not isinstance(num_heads, int) or num_heads < 1:
            raise ValueError(f"`num_heads` must be a positive int. Received: num_heads={num_heads}")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"`dropout` must be in [0, 1). Received: dropout={dropout}")
        self.num_heads = num_heads
        self.dropout = dropout
        self.kernel_initializer = initializer_or_default(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self._keep_float32_arguments()

    def build(self, inputs_shape):
        hidden_dim = inputs_shape[-1]
        self.head_dim = head_dim(hidden_dim, self.num_heads)

        def projection(name, equation, output_shape, bias_axes):
            return keras.layers.EinsumDense(
                equation,
                output_shape=output_shape,
                bias_axes=bias_axes,
                kernel_initializer=clone_initializer(self.kernel_initializer),
                bias_initializer=self.bias_initializer,
                dtype=self.dtype_policy,
                name=name,
            )

        head_shape = (None, self.num_heads, self.head_dim)
        self.query_dense = projection("query", "bnd,dhk->bnhk", head_shape, "hk")
        self.key_dense = projection("key", "bnd,dhk->bnhk", head_shape, "hk")
        self.value_dense = projection("value", "bnd,dhk->bnhk", head_shape, "hk")
        for layer in (self.query_dense, self.key_dense, self.value_dense):
            layer.build(inputs_shape)
        self.output_dense = projection("attention_output", "bnhk,hkd->bnd", (None, hidden_dim), "d")
        self.output_dense.build((None, None, self.num_heads, self.head_dim))
        self.dropout_layer = keras.layers.Dropout(self.dropout, dtype=self.dtype_policy)
        self.build_positional(hidden_dim)
        self.built = True

    def build_positional(self, hidden_dim):
        """Creates the subclass's positional weights (after `head_dim` is set)."""

    def position_query_key(self, query, key):
        """Queries and keys `(B, n, h, d_h)` before the logits; as given by default.

        A subclass that encodes positions in the queries and keys themselves
        (rotary embeddings) transforms them here, before either path.
        """
        return query, key

    def attention_logits(self, query, key, **kwargs):
        """Returns float32 logits `(B, h, q, k)` from `(B, n, h, d_h)` queries/keys."""
        raise NotImplementedError

    def call(self, inputs, padding_mask=None, attention_bias=None, training=None, **logit_kwargs):
        inputs = ops.cast(inputs, self.compute_dtype)
        query = self.query_dense(inputs)  # (B, n, h, d_h)
        key = self.key_dense(inputs)  # (B, n, h, d_h)
        value = self.value_dense(inputs)  # (B, n, h, d_h)
        query, key = self.position_query_key(query, key)
        context = self.fused_context(
            query, key, value, padding_mask, attention_bias, training, **logit_kwargs
        )
        if context is None:
            logits = self.attention_logits(query, key, **logit_kwargs)  # (B, h, n, n) f32
            if attention_bias is not None:
                logits = logits + ops.cast(attention_bias, "float32")
            if padding_mask is not None:
                logits = logits + attention_mask_to_bias(padding_mask)  # (B, 1, 1, n)
            probs = ops.softmax(logits, axis=-1)
            probs = self.dropout_layer(ops.cast(probs, self.compute_dtype), training=training)
            context = ops.einsum("bhqk,bkhd->bqhd", probs, value)  # (B, n, h, d_h)
        return self.output_dense(context)  # (B, n, d)

    def fused_context(
        self, query, key, value, padding_mask, attention_bias, training, **logit_kwargs
    ):
        """The context `(B, n, h, d_h)` from a fused kernel, or `None` for the einsum path.

        The einsum path above (logits, bias, mask, softmax, dropout, values) is
        the reference; a subclass whose logits are a scaled dot product may
        return the same context from `keras.ops.dot_product_attention`.
        """
        return None

    def compute_output_spec(self, inputs, **kwargs):
        return keras.KerasTensor(inputs.shape, self.compute_dtype)

    def get_config(self):
        return {
            **super().get_config(),
            "num_heads": self.num_heads,
            "dropout": self.dropout,
            "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
            "bias_initializer": keras.initializers.serialize(self.bias_initializer),
        }
