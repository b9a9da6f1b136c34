"""Self-attention with a precomputed positional term (TUPE, BERT-A/R, BERT-A^d)."""

import math

import keras
from keras import ops

from keras_tupe.layers.positional_attention_base import PositionalAttentionBase
from keras_tupe.layers.utils import attention_mask_to_bias, mask_negative

# "einsum": the reference path of `PositionalAttentionBase`; "fused":
# `keras.ops.dot_product_attention`; "auto": fused wherever it computes the same.
ATTENTION_IMPLEMENTATIONS = ("auto", "einsum", "fused")


def check_attention_implementation(attention_implementation):
    """Raises a clear error unless the value is one of `ATTENTION_IMPLEMENTATIONS`."""
    if attention_implementation not in ATTENTION_IMPLEMENTATIONS:
        raise ValueError(
            f"`attention_implementation` must be one of {ATTENTION_IMPLEMENTATIONS}. "
            f"Received: attention_implementation={attention_implementation!r}"
        )


def flash_attention_setting():
    """The `flash_attention` argument of `keras.ops.dot_product_attention`.

    `None` lets the backend use a flash kernel where its conditions are met
    (cuDNN under JAX on a GPU, PyTorch's SDPA; TensorFlow has none). Not on
    TPUs: Keras 3.15's JAX Splash-attention path drops `bias` and keeps only
    the first batch row of `mask`, so it would silently ignore the positional
    term and the padding.
    """
    if keras.backend.backend() == "jax":
        import jax

        if jax.devices()[0].platform == "tpu":
            return False
    return None


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

    Without `position_query`/`position_key` the logits are a scaled dot product
    plus an additive bias, so the layer can hand the whole attention to
    `keras.ops.dot_product_attention` (a fused or flash kernel on a GPU; the same
    einsums on a CPU). `attention_implementation` chooses:

    - `"einsum"`: always the reference path (logits, softmax, dropout, values).
    - `"fused"`: `dot_product_attention`, with the positional term and the
      padding folded into one float32 `bias`. A call with
      `position_query`/`position_key` (BERT-A^d) raises.
    - `"auto"`: fused where it computes the same as the einsum path, einsum
      otherwise (BERT-A^d; and a positional bias under a float16 compute
      dtype, see below).

    Either fused setting takes the einsum path in a training call with
    `dropout > 0` (`dot_product_attention` has no dropout on the probabilities).
    Backends cast `bias` to the compute dtype: bfloat16 keeps float32's range;
    float16's ends at 65504, hence `"auto"`'s einsum path there.

    Args:
        untied_scaling: bool. Scale the content term by `1/sqrt(2 d_h)` (TUPE)
            instead of `1/sqrt(d_h)` (BERT). Defaults to `True`.
        attention_implementation: `"auto"`, `"einsum"` or `"fused"`.
            Defaults to `"auto"`.
        num_heads, dropout, kernel_initializer, bias_initializer: as in
            `PositionalAttentionBase`.

    Call arguments: those of `PositionalAttentionBase`, and
        position_query, position_key: optional float `(1, n, h, d_h)`.

    Example:
    >>> attention = UntiedPositionalAttention(num_heads=4)
    >>> attention(keras.ops.ones((2, 10, 64))).shape
    (2, 10, 64)
    """

    def __init__(self, num_heads, untied_scaling=True, attention_implementation="auto", **kwargs):
        super().__init__(num_heads, **kwargs)
        check_attention_implementation(attention_implementation)
        self.untied_scaling = untied_scaling
        self.attention_implementation = attention_implementation

    def _scale(self):
        return 1.0 / math.sqrt((2 if self.untied_scaling else 1) * self.head_dim)

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
        # Scale the queries, not the logits: it keeps float16 products in range.
        logits = ops.einsum("bqhd,bkhd->bhqk", query * self._scale(), key)  # (B, h, q, k)
        return ops.cast(logits, "float32")

    def fused_context(self, query, key, value, padding_mask, attention_bias, training,
                      position_query=None, position_key=None):
        if self.attention_implementation == "einsum":
            return None
        if position_query is not None or position_key is not None:
            if self.attention_implementation == "fused":
                raise ValueError(
                    "attention_implementation='fused' needs logits that are a scaled "
                    "dot product plus an additive bias; `position_query`/`position_key` "
                    "(BERT-A^d) are added to the queries and keys. Use 'auto' or 'einsum'."
                )
            return None
        if training and self.dropout > 0:
            return None  # dot_product_attention has no dropout on the probabilities.
        if (
            attention_bias is not None
            and self.attention_implementation == "auto"
            and keras.backend.standardize_dtype(self.compute_dtype) == "float16"
        ):
            return None  # The backend would cast the bias to float16 (max 65504).
        bias = mask = None
        if attention_bias is not None:
            # One additive float32 bias: the backends take either `bias` or
            # `mask` (PyTorch refuses both), and cast it to the compute dtype.
            bias = ops.cast(attention_bias, "float32")  # (1 or B, h, n, n)
            if padding_mask is not None:
                negative = mask_negative(self.compute_dtype)
                bias = bias + attention_mask_to_bias(padding_mask, negative)  # (B, h, n, n)
        elif padding_mask is not None:
            mask = ops.cast(padding_mask, "bool")[:, None, None, :]  # (B, 1, 1, n)
        # Queries pre-scaled as in `attention_logits`, so both paths round alike.
        return ops.dot_product_attention(
            query * self._scale(),
            key,
            value,
            bias=bias,
            mask=mask,
            scale=1.0,
            flash_attention=flash_attention_setting(),
        )  # (B, n, h, d_h)

    def get_config(self):
        config = super().get_config()
        config["untied_scaling"] = self.untied_scaling
        config["attention_implementation"] = self.attention_implementation
        return config
