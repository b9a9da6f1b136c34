"""The T5 bucketed relative position bias (BERT-R, TUPE-R)."""

import math

import keras
from keras import ops

from keras_tupe.layers.cls_reset import reset_cls_buckets
from keras_tupe.layers.utils import clone_initializer, initializer_or_default, relative_positions


def t5_relative_position_bucket(
    relative_position, bidirectional=True, num_buckets=32, max_distance=128
):
    """Maps relative positions `j - i` to T5 buckets.

    Distances below `num_buckets // 4` (8 with the defaults) each get their own
    bucket; larger ones share logarithmically wider buckets up to
    `max_distance`, beyond which all distances share the last bucket. With
    `bidirectional=True` keys after the query (`j > i`) use the upper half of the
    buckets. The logarithm is taken in float32, as in T5 (Raffel et al., 2020).

    Args:
        relative_position: int tensor of any shape, key position minus query
            position.
        bidirectional: bool. Whether keys after the query get their own buckets.
            Defaults to `True`.
        num_buckets: int. Number of buckets. Defaults to `32`.
        max_distance: int. Distance from which all distances share one bucket.
            Defaults to `128`.

    Returns:
        An int32 tensor of the same shape with values in `[0, num_buckets)`.
    """
    relative_position = ops.cast(relative_position, "int32")
    bucket = ops.zeros_like(relative_position)
    if bidirectional:
        num_buckets //= 2
        bucket = bucket + ops.cast(relative_position > 0, "int32") * num_buckets
        distance = ops.abs(relative_position)
    else:
        distance = ops.maximum(-relative_position, 0)
    max_exact = num_buckets // 2
    # Clamp to 1 inside the log: log(0) = -inf would cast to garbage in the
    # branch that `where` discards anyway.
    log_ratio = ops.log(ops.cast(ops.maximum(distance, 1), "float32") / max_exact)
    large = max_exact + ops.cast(
        log_ratio / math.log(max_distance / max_exact) * (num_buckets - max_exact),
        "int32",
    )
    large = ops.minimum(large, num_buckets - 1)
    return bucket + ops.where(distance < max_exact, distance, large)


@keras.saving.register_keras_serializable(package="keras_tupe")
class RelativeBucketBias(keras.layers.Layer):
    """A learned scalar bias per head and T5 relative-position bucket.

    Computes `b^h[bucket(j - i)]` (Raffel et al. 2020; TUPE Eq. 8), one table
    `b ∈ R^{num_buckets × h}` for the whole encoder. It depends only on the
    sequence length, so an encoder computes it once and adds it, unscaled, to
    every layer's attention logits.

    With `reserved_cls_buckets=True` [CLS] gets buckets of its own
    (`reset_cls_buckets`), the relative half of the TUPE authors' [CLS] reset.

    The output is float32 under every dtype policy (`autocast` is off): attention
    logits are accumulated in float32.

    Args:
        num_heads: int. Number of attention heads.
        num_buckets: int. Number of buckets. Defaults to `32`.
        max_distance: int. Distance from which all distances share one bucket.
            Defaults to `128`.
        bidirectional: bool. Defaults to `True`.
        reserved_cls_buckets: bool. [CLS] buckets as above; the table has
            `num_buckets + 1` rows. Needs `bidirectional`. Defaults to `False`.
        embeddings_initializer: initializer of the table. Defaults to a
            truncated normal with stddev 0.02.

    Call arguments:
        query: tensor `(B, q_len, ...)`; only its length is used.
        key: optional tensor `(B, k_len, ...)`; defaults to `query`.

    Returns:
        float32 tensor `(1, num_heads, q_len, k_len)`.

    Example:
    >>> bias = RelativeBucketBias(num_heads=4)(keras.ops.zeros((2, 10, 64)))
    >>> bias.shape
    (1, 4, 10, 10)
    """

    def __init__(
        self,
        num_heads,
        num_buckets=32,
        max_distance=128,
        bidirectional=True,
        reserved_cls_buckets=False,
        embeddings_initializer=None,
        **kwargs,
    ):
        kwargs.setdefault("autocast", False)
        super().__init__(**kwargs)
        if num_heads < 1:
            raise ValueError(f"`num_heads` must be >= 1. Received: num_heads={num_heads}")
        if num_buckets < 4 or (bidirectional and num_buckets % 2):
            raise ValueError(
                "`num_buckets` must be at least 4 (and even when bidirectional). "
                f"Received: num_buckets={num_buckets}"
            )
        if max_distance <= num_buckets // (4 if bidirectional else 2):
            raise ValueError(
                "`max_distance` must exceed the exact-distance range "
                f"num_buckets // {4 if bidirectional else 2}. "
                f"Received: max_distance={max_distance}, num_buckets={num_buckets}"
            )
        if reserved_cls_buckets and not bidirectional:
            raise ValueError(
                "`reserved_cls_buckets=True` gives [CLS]'s row the bucket num_buckets // 2, "
                "which only the bidirectional buckets leave unused; it needs "
                f"bidirectional=True. Received: bidirectional={bidirectional!r}"
            )
        self.num_heads = num_heads
        self.num_buckets = num_buckets
        self.max_distance = max_distance
        self.bidirectional = bidirectional
        self.reserved_cls_buckets = reserved_cls_buckets
        self.embeddings_initializer = initializer_or_default(embeddings_initializer)

    def build(self, query_shape, key_shape=None):
        self.relative_attention_bias = self.add_weight(
            name="relative_attention_bias",
            shape=(self.num_buckets + int(self.reserved_cls_buckets), self.num_heads),
            initializer=clone_initializer(self.embeddings_initializer),
            dtype=self.variable_dtype,
        )
        self.built = True

    @property
    def decay_exempt_weights(self):
        """The bias table: a bias, not a kernel, so no weight decay.

        It is added straight to the logits, as T5 learns it (Raffel et al.
        2020), and decay would only pull every head's positional preference
        towards 0. `keras_tupe.optimization.decay_exclusions` collects it.
        """
        return [self.relative_attention_bias]

    def call(self, query, key=None):
        query_length = ops.shape(query)[1]
        key_length = query_length if key is None else ops.shape(key)[1]
        buckets = t5_relative_position_bucket(
            relative_positions(query_length, key_length),
            bidirectional=self.bidirectional,
            num_buckets=self.num_buckets,
            max_distance=self.max_distance,
        )  # (q, k)
        if self.reserved_cls_buckets:
            buckets = reset_cls_buckets(buckets, self.num_buckets)  # (q, k)
        table = ops.cast(self.relative_attention_bias, "float32")
        bias = ops.take(table, buckets, axis=0)  # (q, k, h)
        return ops.transpose(bias, (2, 0, 1))[None]  # (1, h, q, k)

    def compute_output_spec(self, query, key=None):
        key_length = query.shape[1] if key is None else key.shape[1]
        return keras.KerasTensor(
            (1, self.num_heads, query.shape[1], key_length), dtype="float32"
        )

    def get_config(self):
        return {
            **super().get_config(),
            "num_heads": self.num_heads,
            "num_buckets": self.num_buckets,
            "max_distance": self.max_distance,
            "bidirectional": self.bidirectional,
            "reserved_cls_buckets": self.reserved_cls_buckets,
            "embeddings_initializer": keras.initializers.serialize(self.embeddings_initializer),
        }
