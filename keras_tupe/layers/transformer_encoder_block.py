"""One Transformer encoder layer (post- or pre-LayerNorm) with a pluggable attention."""

import keras
from keras import ops

from keras_tupe.layers.schemes import RELATIVE_POSITION_SCHEMES, check_fused
from keras_tupe.layers.untied_positional_attention import check_attention_implementation
from keras_tupe.layers.utils import (
    Float32BiasCallMixin, clone_initializer, initializer_or_default,
)
from keras_tupe_base.checks import check_choice

# Where the LayerNorms sit: after each residual sum (BERT) or before each
# sublayer (Xiong et al. 2020).
LAYER_NORM_POSITIONS = ("post", "pre")


def _gelu_approximate(x):
    return keras.activations.gelu(x, approximate=True)


@keras.saving.register_keras_serializable(package="keras_tupe")
class TransformerEncoderBlock(Float32BiasCallMixin, keras.layers.Layer):
    """A BERT encoder layer with a positional attention.

    Post-LayerNorm (BERT, `layer_norm_position="post"`):

        x = LayerNorm(x + Dropout(Attention(x)))
        x = LayerNorm(x + Dropout(W2 act(W1 x)))

    Pre-LayerNorm (Xiong et al. 2020, `layer_norm_position="pre"`): queries,
    keys and values all come from the normalized input, and the residual
    stream itself is never normalized here (the backbone adds one final
    LayerNorm after the last layer):

        x = x + Dropout(Attention(LayerNorm(x)))
        x = x + Dropout(W2 act(W1 LayerNorm(x)))

    The attention is the one the row of `relative_position` names in
    `keras_tupe.layers.schemes.RELATIVE_POSITION_SCHEMES` (the backbone's value,
    passed on as it is), built with the block settings the row lists; the rows
    whose positions all come from the encoder-wide terms (`attention_bias`,
    BERT-A^d's `position_query`/`position_key`) name `UntiedPositionalAttention`.
    keras-hub's `TransformerEncoder` hard-codes Keras's standard attention, hence
    this block.

    Args:
        num_heads: int. Number of attention heads.
        intermediate_dim: int. Hidden size of the feed-forward network.
        dropout: float. Dropout rate on attention probabilities and residual
            branches. Defaults to `0.1`.
        activation: activation of the feed-forward network: a Keras
            activation name, or `"gelu_approximate"` (the tanh GELU of
            keras-hub's BERT). Defaults to `"gelu"` (exact, as BERT).
        layer_norm_epsilon: float. Defaults to `1e-12`.
        layer_norm_position: `"post"` or `"pre"` (see above). Defaults to
            `"post"`.
        untied_scaling: bool. Content logits scaled by `1/sqrt(2 d_h)` (TUPE)
            rather than `1/sqrt(d_h)`. Used by the untied and rotary
            attentions only. Defaults to `False`.
        relative_position: `"none"`, `"t5_bias"`, `"shaw"`, `"method1"` ...
            `"method4"`, `"alibi"`, `"rotary"` or `"disentangled"` (see
            `TupeBackbone`). Defaults to `"none"`.
        max_relative_distance: int, the clipping distance of the Shaw / Huang
            tables. Defaults to `512`.
        bucket_size: int, DeBERTa's `bucket_size` (`"disentangled"` only).
            Defaults to `256`.
        max_sequence_length: int, the distance scale of DeBERTa's log buckets
            (`"disentangled"` only). Defaults to `512`.
        zero_init_tables: bool. Start relative vector tables at zero.
            Defaults to `False`.
        attention_implementation: `"auto"`, `"einsum"` or `"fused"` (see
            `UntiedPositionalAttention`); `"fused"` only where the row of
            `relative_position` says `fusable`. Defaults to `"auto"`.
        kernel_initializer: initializer of all kernels. Defaults to a truncated
            normal with stddev 0.02.

    Call arguments:
        inputs: `(B, n, d)`.
        padding_mask: optional `(B, n)`, 1 for tokens.
        attention_bias: optional float `(1 or B, h, n, n)`.
        position_query, position_key: optional float `(1, n, h, d_h)`.
        relative_embeddings: `(1, 2k, d)`, needed by `"disentangled"` only.
        training: bool.

    Returns:
        `(B, n, d)`.
    """

    def __init__(
        self,
        num_heads,
        intermediate_dim,
        dropout=0.1,
        activation="gelu",
        layer_norm_epsilon=1e-12,
        untied_scaling=False,
        relative_position="none",
        max_relative_distance=512,
        bucket_size=256,
        zero_init_tables=False,
        attention_implementation="auto",
        kernel_initializer=None,
        max_sequence_length=512,
        layer_norm_position="post",
        **kwargs,
    ):
        super().__init__(**kwargs)
        if layer_norm_position not in LAYER_NORM_POSITIONS:
            raise ValueError(
                f"`layer_norm_position` must be one of {LAYER_NORM_POSITIONS}. "
                f"Received: layer_norm_position={layer_norm_position!r}"
            )
        # Read at each call: a row added to the table (a test's) is a valid choice.
        check_choice("relative_position", relative_position, tuple(RELATIVE_POSITION_SCHEMES))
        check_attention_implementation(attention_implementation)
        check_fused(
            attention_implementation,
            [RELATIVE_POSITION_SCHEMES[relative_position]],
            f"relative_position={relative_position!r}",
        )
        self.num_heads = num_heads
        self.intermediate_dim = intermediate_dim
        self.dropout = dropout
        # Kept as given (a name) for the config; "gelu_approximate" is the tanh
        # GELU of keras-hub's BERT, so converted checkpoints compute the same.
        self.activation = activation
        self._activation_fn = (
            _gelu_approximate if activation == "gelu_approximate"
            else keras.activations.get(activation)
        )
        self.layer_norm_epsilon = layer_norm_epsilon
        self.layer_norm_position = layer_norm_position
        self.untied_scaling = untied_scaling
        self.relative_position = relative_position
        self.max_relative_distance = max_relative_distance
        self.bucket_size = bucket_size
        self.zero_init_tables = zero_init_tables
        self.attention_implementation = attention_implementation
        self.max_sequence_length = max_sequence_length
        self.kernel_initializer = initializer_or_default(kernel_initializer)
        self._keep_float32_arguments()

    def build(self, inputs_shape):
        hidden_dim = inputs_shape[-1]
        scheme = RELATIVE_POSITION_SCHEMES[self.relative_position]
        arguments = {name: getattr(self, key) for name, key in scheme.attention_arguments.items()}
        self.attention = scheme.attention(
            num_heads=self.num_heads,
            dropout=self.dropout,
            kernel_initializer=clone_initializer(self.kernel_initializer),
            dtype=self.dtype_policy,
            name="self_attention",
            **arguments,
        )
        self.attention.build(inputs_shape)

        def layer_norm(name):
            layer = keras.layers.LayerNormalization(
                epsilon=self.layer_norm_epsilon, dtype=self.dtype_policy, name=name
            )
            layer.build(inputs_shape)
            return layer

        self.attention_layer_norm = layer_norm("attention_layer_norm")
        self.intermediate_dense = keras.layers.Dense(
            self.intermediate_dim,
            activation=self._activation_fn,
            kernel_initializer=clone_initializer(self.kernel_initializer),
            dtype=self.dtype_policy,
            name="intermediate_dense",
        )
        self.intermediate_dense.build(inputs_shape)
        self.output_dense = keras.layers.Dense(
            hidden_dim,
            kernel_initializer=clone_initializer(self.kernel_initializer),
            dtype=self.dtype_policy,
            name="output_dense",
        )
        self.output_dense.build((None, None, self.intermediate_dim))
        self.output_layer_norm = layer_norm("output_layer_norm")
        self.dropout_layer = keras.layers.Dropout(self.dropout, dtype=self.dtype_policy)
        self.built = True

    def call(self, inputs, padding_mask=None, attention_bias=None, position_query=None,
             position_key=None, relative_embeddings=None, training=None):
        inputs = ops.cast(inputs, self.compute_dtype)
        logit_kwargs = self._shared_inputs(
            position_query=position_query,
            position_key=position_key,
            relative_embeddings=relative_embeddings,
        )
        pre = self.layer_norm_position == "pre"
        attended = self.attention(
            self.attention_layer_norm(inputs) if pre else inputs,
            padding_mask=padding_mask,
            attention_bias=attention_bias,
            training=training,
            **logit_kwargs,
        )
        x = inputs + self.dropout_layer(attended, training=training)
        if not pre:
            x = self.attention_layer_norm(x)
        ffn = self.output_dense(self.intermediate_dense(self.output_layer_norm(x) if pre else x))
        x = x + self.dropout_layer(ffn, training=training)
        return x if pre else self.output_layer_norm(x)

    def _shared_inputs(self, **given):
        """The given shared terms, refused where this block's attention does not take them."""
        scheme = RELATIVE_POSITION_SCHEMES[self.relative_position]
        for name, value in given.items():
            if value is None and name in scheme.needed_inputs:
                raise ValueError(
                    f"relative_position={self.relative_position!r} needs `{name}` (the backbone's "
                    f"{scheme.shared_term.layer.__name__}). Received: {name}=None"
                )
            if value is not None and name not in scheme.attention_inputs:
                raise ValueError(
                    f"`{name}` is not taken by this block's {type(self.attention).__name__} "
                    f"(relative_position={self.relative_position!r}); it takes "
                    f"{scheme.attention_inputs + ('attention_bias',)}."
                )
        return {name: value for name, value in given.items() if value is not None}

    def compute_output_spec(self, inputs, **kwargs):
        return keras.KerasTensor(inputs.shape, self.compute_dtype)

    def get_config(self):
        return {
            **super().get_config(),
            "num_heads": self.num_heads,
            "intermediate_dim": self.intermediate_dim,
            "dropout": self.dropout,
            "activation": (
                self.activation if isinstance(self.activation, str)
                else keras.activations.serialize(self.activation)
            ),
            "layer_norm_epsilon": self.layer_norm_epsilon,
            "layer_norm_position": self.layer_norm_position,
            "untied_scaling": self.untied_scaling,
            "relative_position": self.relative_position,
            "max_relative_distance": self.max_relative_distance,
            "bucket_size": self.bucket_size,
            "zero_init_tables": self.zero_init_tables,
            "attention_implementation": self.attention_implementation,
            "max_sequence_length": self.max_sequence_length,
            "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
        }
