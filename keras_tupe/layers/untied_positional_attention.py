"""Self-attention with a precomputed positional term (TUPE, BERT-A/R, BERT-A^d)."""

import math

import keras
from keras import ops

from keras_tupe.layers.positional_attention_base import PositionalAttentionBase


@keras.saving.register_keras_serializable(package="keras_tupe")
class UntiedPositionalAttention(PositionalAttentionBase):
    """Multi-head self-attention: content logits plus a precomputed positional term.

    TUPE (Ke et al., ICLR 2021, Eq. 7/8) gives each layer the logits

        α_ij = q_i·k_j / sqrt(2 d_h) + A^h_ij

    where `A` (the untied correlation, plus the T5 bias for TUPE-R, after the
    [CLS] reset) is computed once by the encoder and passed as
    `attention_bias`. With `untied_scaling=False` the content term is scaled by
    `1/sqrt(d_h)` as in BERT, which makes this layer BERT-A (no bias) and BERT-R
    (T5 bias). Given `position_query`/`position_key` (`(1, n, h, d_h)`, from
    `UntiedPositionalCorrelation(output_mode="projections")`), the logits are
    BERT-A^d's `(q_i + PQ_i)·(k_j + PK_j) / sqrt(2 d_h)`.

    Bias and padding mask are added, and the softmax taken, in float32.

    Args:
        num_heads: int. Number of attention heads; must divide the hidden size.
        untied_scaling: bool. Scale the content term by `1/sqrt(2 d_h)` (TUPE)
            instead of `1/sqrt(d_h)` (BERT). Defaults to `True`.
        dropout: float. Dropout on the attention probabilities. Defaults to `0.`.
        kernel_initializer, bias_initializer: of the projections.

    Call arguments:
        inputs: `(B, n, d)`.
        padding_mask: optional `(B, n)`, 1 for tokens, 0 for padding.
        attention_bias: optional float `(1 or B, h, n, n)`, added unscaled.
        position_query, position_key: optional float `(1, n, h, d_h)`.
        training: bool, for dropout.

    Returns:
        `(B, n, d)` in the compute dtype.

    Example:
    >>> attention = UntiedPositionalAttention(num_heads=4)
    >>> attention(keras.ops.ones((2, 10, 64))).shape
    (2, 10, 64)
    """

    def __init__(self, num_heads, untied_scaling=True, **kwargs):
        super().__init__(num_heads, **kwargs)
        self.untied_scaling = untied_scaling

    def attention_logits(self, query, key, position_query=None, position_key=None):
        if (position_query is None) != (position_key is None):
            raise ValueError(
                "Pass both `position_query` and `position_key`, or neither. Received: "
                f"position_query={position_query is not None}, "
                f"position_key={position_key is not None}"
            )
        if position_query is not None:
            query = query + ops.cast(position_query, self.compute_dtype)
            key = key + ops.cast(position_key, self.compute_dtype)
        scale = 1.0 / math.sqrt((2 if self.untied_scaling else 1) * self.head_dim)
        # Scale the queries, not the logits: it keeps float16 products in range.
        logits = ops.einsum("bqhd,bkhd->bhqk", query * scale, key)  # (B, h, q, k)
        return ops.cast(logits, "float32")

    def get_config(self):
        config = super().get_config()
        config["untied_scaling"] = self.untied_scaling
        return config
