"""DeBERTa's disentangled self-attention: content and relative-position terms."""

import math

import keras
from keras import ops

from keras_tupe.layers.positional_attention_base import PositionalAttentionBase
from keras_tupe.layers.utils import relative_positions


def check_bucket_size(bucket_size, max_position, scale="max_position"):
    """Raises a clear error unless DeBERTa's log buckets are defined (see the message).

    `scale` is `max_position` as the caller calls it (the backbone's
    `max_sequence_length`).
    """
    if (isinstance(bucket_size, int) and bucket_size >= 2 and isinstance(max_position, int)
            and max_position > bucket_size // 2 + 1):
        return
    raise ValueError(
        "relative_position='disentangled' needs `bucket_size` k, an int >= 2 (distances "
        f"exact up to k // 2), and `{scale}`, an int above k // 2 + 1 (the log buckets "
        f"divide by log(({scale} - 1) / (k // 2))). "
        f"Received: bucket_size={bucket_size!r}, {scale}={max_position!r}"
    )


def deberta_log_bucket_position(relative_position, bucket_size, max_position):
    """DeBERTa's log buckets of relative positions `δ = i - j` (query minus key).

    With `mid = bucket_size // 2`: distances `|δ| <= mid` keep their value;
    larger ones become `sign(δ) (mid + ceil(log(|δ| / mid) (mid - 1) /
    log((max_position - 1) / mid)))`, so `|δ| = max_position - 1` maps to
    `2 mid - 1` (DeBERTaV3's `make_log_bucket_position`, as keras-hub and HF
    compute it, the logarithms in float32). The bucket is an odd function of
    `δ`.

    Args:
        relative_position: int tensor of any shape, `i - j`.
        bucket_size: int `k >= 2`.
        max_position: int, the distance scale of the log buckets; must exceed
            `bucket_size // 2 + 1`.

    Returns:
        int32 tensor of the same shape.
    """
    relative_position = ops.cast(relative_position, "int32")
    mid = bucket_size // 2
    sign = ops.sign(relative_position)
    inside = (relative_position < mid) & (relative_position > -mid)
    distance = ops.where(inside, mid - 1, ops.abs(relative_position))
    # The log branch is only used where distance > mid; the clamp keeps log(0)
    # (mid = 1) out of the discarded entries.
    numerator = ops.log(ops.cast(ops.maximum(distance, 1), "float32") / float(mid)) * float(
        mid - 1
    )
    denominator = ops.log(ops.cast(max_position - 1, "float32") / float(mid))
    log_position = ops.cast(ops.ceil(numerator / denominator), "int32") + mid
    return ops.where(distance <= mid, relative_position, log_position * sign)


def disentangled_index(query_length, key_length, bucket_size, max_position):
    """Rows of the relative table each pair `(i, j)` uses, `(q, k)` in `[0, 2k)`.

    `clip(bucket(i - j) + k, 0, 2k - 1)`, as DeBERTa's `c2p_pos`. Its
    `p2c_pos` is `clip(-bucket(j - i) + k)` of the transposed pair, the same
    rows (the bucket is odd).
    """
    delta = -relative_positions(query_length, key_length)  # (q, k): i - j
    buckets = deberta_log_bucket_position(delta, bucket_size, max_position)
    return ops.clip(buckets + bucket_size, 0, 2 * bucket_size - 1)  # (q, k)


def _gather_rows(scores, index):
    """`scores[b, h, i, index[i, j]]`, `(B, h, q, k)`, from `(B, h, q, 2k)` scores.

    A flat `take` on `(B, h, q·2k)`: works with a dynamic batch and length on
    every backend (keras-hub works around `take_along_axis` on TensorFlow).
    """
    batch, num_heads, query_length, span = (ops.shape(scores)[a] for a in range(4))
    key_length = ops.shape(index)[1]
    flat = ops.reshape(scores, (batch, num_heads, -1))  # (B, h, q·2k)
    offsets = ops.arange(query_length, dtype="int32")[:, None] * span  # (q, 1)
    positions = ops.reshape(index + offsets, (-1,))  # (q·k,)
    gathered = ops.take(flat, positions, axis=2)  # (B, h, q·k)
    return ops.reshape(gathered, (batch, num_heads, query_length, key_length))


@keras.saving.register_keras_serializable(package="keras_tupe")
class DisentangledAttention(PositionalAttentionBase):
    """DeBERTa's disentangled self-attention: content, c2p and p2c terms.

    With the shared relative embeddings `P` (`DisentangledRelativeEmbedding`,
    `(2k, d)`), this layer's own projections `K^r = P W^K + b^K`,
    `Q^r = P W^Q + b^Q` (DeBERTaV3 shares them with the content), and
    `δ(i, j) = clip(bucket(i - j) + k, 0, 2k - 1)` (`disentangled_index`):

        α_ij = (q_i·k_j + q_i·K^r_δ(i,j) + k_j·Q^r_δ(i,j)) / sqrt(3 d_h)

    (He et al., ICLR 2021, Eq. 4, with the log buckets of DeBERTaV3). The
    position-to-content term uses the same `δ(i, j) = i - j` as the
    content-to-position term, as DeBERTa's code (microsoft/DeBERTa, HF and
    keras-hub's `DisentangledSelfAttention`) computes it; Eq. 4 writes
    `δ(j, i)`. Matches keras-hub's `DebertaV3Backbone` attention number for
    number (see the tests), including the dropout on `P` (rate `dropout`)
    before the projections.

    The scores are computed against all `2k` rows, `(B, h, n, 2k)`, and the
    needed row of each pair gathered, instead of gathering `(n, n, d_h)`
    embeddings. The logits are no scaled dot product plus a bias, so there is
    no fused path.

    Args:
        bucket_size: int `k`, the attention span: the table has `2k` rows,
            distances up to `k // 2` are exact. Defaults to `256`.
        max_position: int. Distance scale of the log buckets (DeBERTa's
            `max_position_embeddings`). Defaults to `512`.
        num_heads, dropout, kernel_initializer, bias_initializer: as in
            `PositionalAttentionBase`.

    Call arguments: those of `PositionalAttentionBase`, and
        relative_embeddings: `(1, 2k, d)` (or `(2k, d)`), the shared table.

    Example:
    >>> attention = DisentangledAttention(num_heads=4, bucket_size=8, max_position=32)
    >>> attention(keras.ops.ones((2, 10, 64)),
    ...           relative_embeddings=keras.ops.ones((1, 16, 64))).shape
    (2, 10, 64)

    References:
        He, Liu, Gao, Chen. DeBERTa: Decoding-enhanced BERT with Disentangled
        Attention. ICLR 2021. He, Gao, Chen. DeBERTaV3. ICLR 2023.
    """

    def __init__(self, num_heads, bucket_size=256, max_position=512, **kwargs):
        super().__init__(num_heads, **kwargs)
        check_bucket_size(bucket_size, max_position)
        self.bucket_size = bucket_size
        self.max_position = max_position

    def build(self, inputs_shape):
        super().build(inputs_shape)
        self.position_dropout = keras.layers.Dropout(
            self.dropout, dtype=self.dtype_policy, name="position_dropout"
        )

    def call(self, inputs, relative_embeddings=None, padding_mask=None, attention_bias=None,
             training=None):
        if relative_embeddings is None:
            raise ValueError(
                "DisentangledAttention needs `relative_embeddings`, the shared "
                "(1, 2 * bucket_size, d) table of `DisentangledRelativeEmbedding`."
            )
        relative_embeddings = ops.cast(relative_embeddings, self.compute_dtype)
        if len(relative_embeddings.shape) == 2:
            relative_embeddings = relative_embeddings[None]  # (1, 2k, d)
        relative_embeddings = self.position_dropout(relative_embeddings, training=training)
        return super().call(
            inputs,
            padding_mask=padding_mask,
            attention_bias=attention_bias,
            training=training,
            relative_embeddings=relative_embeddings,
        )

    def attention_logits(self, query, key, relative_embeddings):
        scale = 1.0 / math.sqrt(3 * self.head_dim)
        position_query = self.query_dense(relative_embeddings)[0]  # (2k, h, d_h)
        position_key = self.key_dense(relative_embeddings)[0]  # (2k, h, d_h)
        query = query * scale
        index = disentangled_index(
            ops.shape(query)[1], ops.shape(key)[1], self.bucket_size, self.max_position
        )  # (q, k)
        content = ops.einsum("bqhd,bkhd->bhqk", query, key)  # (B, h, q, k)
        c2p = ops.einsum("bqhd,rhd->bhqr", query, position_key)  # (B, h, q, 2k)
        c2p = _gather_rows(c2p, index)  # (B, h, q, k)
        # Key j against every row; the pair (i, j) needs row index[i, j].
        p2c = ops.einsum("bkhd,rhd->bhkr", key * scale, position_query)  # (B, h, k, 2k)
        p2c = _gather_rows(p2c, ops.transpose(index))  # (B, h, k, q)
        logits = content + c2p + ops.transpose(p2c, (0, 1, 3, 2))  # (B, h, q, k)
        return ops.cast(logits, "float32")

    def get_config(self):
        config = super().get_config()
        config["bucket_size"] = self.bucket_size
        config["max_position"] = self.max_position
        return config
