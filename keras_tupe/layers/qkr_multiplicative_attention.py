"""Relative position embeddings in the attention logits (Shaw; Huang methods 1-4)."""

import math

import keras
from keras import ops

from keras_tupe.layers.positional_attention_base import PositionalAttentionBase
from keras_tupe.layers.utils import relative_positions

METHODS = ("shaw", "method1", "method2", "method3", "method4")


def clipped_relative_positions(query_length, key_length, max_distance):
    """`clip(j - i, -k, k)`, shape `(query_length, key_length)`."""
    return ops.clip(relative_positions(query_length, key_length), -max_distance, max_distance)


@keras.saving.register_keras_serializable(package="keras_tupe")
class QKRMultiplicativeAttention(PositionalAttentionBase):
    """Self-attention with per-layer relative position embeddings.

    With `r = clip(j - i, k)`, the table `w` shared by the heads of this layer,
    and `a_ij = w[r]` (Shaw et al. 2018; Huang et al., Findings of EMNLP 2020):

        shaw:    α_ij = (q_i·k_j + q_i·a_ij) / sqrt(d_h)          a ∈ R^{d_h}
        method1: α_ij = (q_i·k_j) · w[|r|] / sqrt(d_h)             w scalar
        method2: α_ij = (q_i·k_j) · w[r] / sqrt(d_h)               w scalar, signed
        method3: α_ij = Σ_c q_ic k_jc a_ijc / sqrt(d_h)            a ∈ R^{d_h}
        method4: α_ij = (q_i·k_j + q_i·a_ij + k_j·a_ij) / sqrt(d_h)

    Tables: `(2k + 1, d_h)` for shaw/method3/method4 (row `r + k` holds distance
    `r`), `(k + 1,)` for method1 (row `|r|`), `(2k + 1,)` for method2. Scalar
    tables start at 1 (plain attention), vector tables at N(0, 0.02), or zeros
    with `zero_init_tables=True` (the drop-in of Huang §4.4 for method 4).

    Relative methods accept any sequence length; distances beyond `k` share the
    table's last rows.

    Args:
        num_heads: int. Number of attention heads; must divide the hidden size.
        method: one of `"shaw"`, `"method1"`, `"method2"`, `"method3"`,
            `"method4"`. Defaults to `"method4"`.
        max_relative_distance: int `k`, the clipping distance. Defaults to `512`.
        zero_init_tables: bool. Start vector tables at zero. Defaults to `False`.
        dropout, kernel_initializer, bias_initializer: as in
            `UntiedPositionalAttention`.

    Call arguments:
        inputs: `(B, n, d)`.
        padding_mask: optional `(B, n)`, 1 for tokens, 0 for padding.
        attention_bias: optional float `(1 or B, h, n, n)`, added unscaled.
        training: bool, for dropout.

    Returns:
        `(B, n, d)` in the compute dtype.

    Example:
    >>> attention = QKRMultiplicativeAttention(num_heads=4, method="shaw",
    ...                                        max_relative_distance=16)
    >>> attention(keras.ops.ones((2, 10, 64))).shape
    (2, 10, 64)
    """

    def __init__(
        self,
        num_heads,
        method="method4",
        max_relative_distance=512,
        zero_init_tables=False,
        **kwargs,
    ):
        super().__init__(num_heads, **kwargs)
        if method not in METHODS:
            raise ValueError(f"`method` must be one of {METHODS}. Received: method={method!r}")
        if not isinstance(max_relative_distance, int) or max_relative_distance < 1:
            raise ValueError(
                "`max_relative_distance` must be a positive int. "
                f"Received: max_relative_distance={max_relative_distance}"
            )
        self.method = method
        self.max_relative_distance = max_relative_distance
        self.zero_init_tables = zero_init_tables

    def build_positional(self, hidden_dim):
        k = self.max_relative_distance
        if self.method == "method1":
            shape, initializer = (k + 1,), "ones"
        elif self.method == "method2":
            shape, initializer = (2 * k + 1,), "ones"
        else:
            shape = (2 * k + 1, self.head_dim)
            initializer = (
                "zeros"
                if self.zero_init_tables
                else keras.initializers.TruncatedNormal(stddev=0.02)
            )
        self.relative_embeddings = self.add_weight(
            name="relative_embeddings", shape=shape, initializer=initializer
        )

    def attention_logits(self, query, key):
        k = self.max_relative_distance
        relative = clipped_relative_positions(ops.shape(query)[1], ops.shape(key)[1], k)
        query = query * (1.0 / math.sqrt(self.head_dim))
        table = self.relative_embeddings
        if self.method == "method3":
            embeddings = ops.take(table, relative + k, axis=0)  # (q, k, d_h)
            logits = ops.einsum("bqhd,bkhd,qkd->bhqk", query, key, embeddings)
            return ops.cast(logits, "float32")
        logits = ops.einsum("bqhd,bkhd->bhqk", query, key)  # (B, h, q, k)
        if self.method in ("method1", "method2"):
            index = ops.abs(relative) if self.method == "method1" else relative + k
            return ops.cast(logits, "float32") * ops.cast(ops.take(table, index), "float32")
        embeddings = ops.take(table, relative + k, axis=0)  # (q, k, d_h)
        logits = logits + ops.einsum("bqhd,qkd->bhqk", query, embeddings)
        if self.method == "method4":
            # The key term carries no query: undo the query scaling by scaling here.
            key = key * (1.0 / math.sqrt(self.head_dim))
            logits = logits + ops.einsum("bkhd,qkd->bhqk", key, embeddings)
        return ops.cast(logits, "float32")

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "method": self.method,
                "max_relative_distance": self.max_relative_distance,
                "zero_init_tables": self.zero_init_tables,
            }
        )
        return config
