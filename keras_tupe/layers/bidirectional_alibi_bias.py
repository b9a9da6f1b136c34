"""The bidirectional ALiBi bias: a fixed slope per head times `-|i - j|`."""

import math

import keras
from keras import ops

from keras_tupe.layers.utils import relative_positions


def alibi_slopes(num_heads):
    """Press et al.'s head slopes, a list of `num_heads` floats.

    For `n` heads a power of 2 the slopes are the geometric sequence
    `2^(-8/n), 2^(-16/n), ..., 2^(-8)` (start and ratio `2^(-8/n)`). For
    other `n` the paper interpolates: the slopes of the closest power of 2
    below, `2^⌊log2 n⌋`, then every other slope of `2^(⌊log2 n⌋ + 1)` heads
    (its odd-numbered ones, which fall between the first ones) until there
    are `n` (Press et al. 2022, §3; their `get_slopes`).
    """
    if not isinstance(num_heads, int) or num_heads < 1:
        raise ValueError(f"`num_heads` must be a positive int. Received: num_heads={num_heads!r}")

    def power_of_2(n):
        start = 2.0 ** (-8.0 / n)
        return [start ** (i + 1) for i in range(n)]

    if num_heads & (num_heads - 1) == 0:
        return power_of_2(num_heads)
    closest = 2 ** int(math.floor(math.log2(num_heads)))
    return power_of_2(closest) + alibi_slopes(2 * closest)[0::2][: num_heads - closest]


@keras.saving.register_keras_serializable(package="keras_tupe")
class BidirectionalAlibiBias(keras.layers.Layer):
    """ALiBi's linear bias, in the bidirectional (encoder) form.

    Each head `h` gets a fixed, not learned, slope `m_h` (`alibi_slopes`) and
    the logits

        α_ij = q_i·k_j / sqrt(d_h) - m_h · |i - j|

    (Press, Smith, Lewis, "Train Short, Test Long", ICLR 2022, Eq. in §3; the
    paper's causal form has `j ≤ i`, so `-m·(i - j)`; an encoder needs the
    distance in both directions, hence `|i - j|`). Like `RelativeBucketBias`
    it depends only on the length, so the encoder computes it once,
    `(1, h, n, n)`, adds it unscaled to every layer's logits, and the fused
    attention takes it as its `bias`.

    keras-hub's `AlibiBias` is not this bias: it adds `m_h · (j - (n - 1))`,
    which depends on the key position only, `(1, h, 1, n)`. Under a causal mask
    it equals `-m_h (i - j)` up to a constant per row (which the softmax
    cancels); without the mask every query would prefer the last keys.

    Args:
        num_heads: int. Number of attention heads.

    Call arguments and output (float32 under every dtype policy): as in
    `RelativeBucketBias`.

    Example:
    >>> bias = BidirectionalAlibiBias(num_heads=4)(keras.ops.zeros((2, 10, 64)))
    >>> bias.shape
    (1, 4, 10, 10)

    Reference:
        Press, Smith, Lewis. Train Short, Test Long: Attention with Linear
        Biases Enables Input Length Extrapolation. ICLR 2022.
    """

    def __init__(self, num_heads, **kwargs):
        kwargs.setdefault("autocast", False)
        super().__init__(**kwargs)
        self.slopes = alibi_slopes(num_heads)  # Validates num_heads.
        self.num_heads = num_heads
        self.built = True

    def call(self, query, key=None):
        query_length = ops.shape(query)[1]
        key_length = query_length if key is None else ops.shape(key)[1]
        distance = ops.abs(relative_positions(query_length, key_length))  # (q, k)
        slopes = ops.convert_to_tensor(self.slopes, dtype="float32")  # (h,)
        bias = -slopes[:, None, None] * ops.cast(distance, "float32")[None]  # (h, q, k)
        return bias[None]  # (1, h, q, k)

    def compute_output_spec(self, query, key=None):
        key_length = query.shape[1] if key is None else key.shape[1]
        return keras.KerasTensor(
            (1, self.num_heads, query.shape[1], key_length), dtype="float32"
        )

    def get_config(self):
        config = super().get_config()
        config["num_heads"] = self.num_heads
        return config
