"""TUPE's untied [CLS] (Eq. 9): the paper's learned θ, and the authors' code's variant."""

import keras
from keras import ops

# "paper": Eq. 9, learned θ1, θ2 replace the whole position-only term (`ClsReset`).
# "fairseq": the TUPE authors' code (github.com/guolinke/TUPE at 4c64ff7), which
# resets the untied and the relative part separately (`reset_cls_from_reserved_rows`,
# `reset_cls_buckets`).
CLS_RESET_STYLES = ("paper", "fairseq")


def _reset_cls(values, cls_to_others, others_to_cls):
    """`values` `(..., q, k)` with row 0 set to θ1, then the rest of column 0 to θ2."""
    shape = ops.shape(values)
    is_cls_query = ops.arange(shape[-2])[:, None] == 0  # (q, 1)
    is_cls_key = ops.arange(shape[-1])[None, :] == 0  # (1, k)
    return ops.where(is_cls_query, cls_to_others, ops.where(is_cls_key, others_to_cls, values))


def reset_cls_from_reserved_rows(correlation):
    """The authors' [CLS] reset of the untied correlation, with the position offset +1.

    The fork's position table has one row more than the longest input; token
    position `t` uses row `t + 1`. From the correlation of table rows `0..n`,

        out_ij = A_{i+1, j+1}   if i != 0 and j != 0
                 A_{0, 0}       if i = 0             ([CLS] to all, (0, 0) included)
                 A_{1, 1}       if i != 0 and j = 0  (all to [CLS])

    so θ1 = p_0·p_0 and θ2 = p_1·p_1 come from the table, not from learned
    scalars. The fork sets column 0 first and then row 0; the result is the
    same as this `where` (row 0 wins).

    Args:
        correlation: float tensor `(..., h, n + 1, n + 1)`.

    Returns:
        A tensor `(..., h, n, n)` of the same dtype.
    """
    theta1 = correlation[..., 0:1, 0:1]  # (..., h, 1, 1)
    theta2 = correlation[..., 1:2, 1:2]  # (..., h, 1, 1)
    return _reset_cls(correlation[..., 1:, 1:], theta1, theta2)  # (..., h, n, n)


def reset_cls_buckets(buckets, num_buckets):
    """The authors' [CLS] reset of T5 buckets: two buckets of their own.

    Column 0 (all to [CLS]) gets bucket `num_buckets`, an extra row of the
    table; then row 0 ([CLS] to all, (0, 0) included) gets `num_buckets // 2`,
    which the bidirectional bucket function never produces (a key after the
    query has distance >= 1, so its bucket is >= num_buckets // 2 + 1).

    Args:
        buckets: int tensor `(q_len, k_len)`, bidirectional T5 buckets.
        num_buckets: int, the bucket count of `buckets`.

    Returns:
        An int32 tensor `(q_len, k_len)` with values in `[0, num_buckets]`.
    """
    return _reset_cls(ops.cast(buckets, "int32"), num_buckets // 2, num_buckets)


@keras.saving.register_keras_serializable(package="keras_tupe")
class ClsReset(keras.layers.Layer):
    """Replaces the positional correlation of [CLS] by learned per-head scalars.

    TUPE (Ke et al., ICLR 2021, Eq. 9): [CLS] is not a word at a position, so
    its position-only correlation with every token is reset:

        reset(v)_ij = θ1^h   if i = 0              (row 0, (0, 0) included)
                      θ2^h   if i ≠ 0 and j = 0    (column 0)
                      v_ij   otherwise

    `v` is the content-free term of one head (the untied correlation, plus the
    T5 bias for TUPE-R). One pair `θ1, θ2 ∈ R^h` serves the whole encoder. The
    result is float32 under every dtype policy, like its input.

    This is `cls_reset_style="paper"`; for `"fairseq"` see `CLS_RESET_STYLES`.

    Args:
        num_heads: int. Number of attention heads.
        theta_initializer: initializer of θ1 and θ2. Defaults to `"zeros"`.

    Call arguments:
        inputs: float tensor `(B or 1, h, q_len, k_len)`, the positional term.

    Returns:
        float32 tensor of the same shape.

    Example:
    >>> ClsReset(num_heads=2)(keras.ops.ones((1, 2, 3, 3))).shape
    (1, 2, 3, 3)
    """

    def __init__(self, num_heads, theta_initializer="zeros", **kwargs):
        kwargs.setdefault("autocast", False)
        super().__init__(**kwargs)
        if num_heads < 1:
            raise ValueError(f"`num_heads` must be >= 1. Received: num_heads={num_heads}")
        self.num_heads = num_heads
        self.theta_initializer = keras.initializers.get(theta_initializer)

    def build(self, inputs_shape):
        if inputs_shape[-3] is not None and inputs_shape[-3] != self.num_heads:
            raise ValueError(
                f"ClsReset expects a positional term of shape (B, num_heads={self.num_heads}, "
                f"q_len, k_len). Received: shape {tuple(inputs_shape)}"
            )
        weight = dict(shape=(self.num_heads,), initializer=self.theta_initializer,
                      dtype=self.variable_dtype)
        self.cls_to_others = self.add_weight(name="cls_to_others", **weight)  # θ1
        self.others_to_cls = self.add_weight(name="others_to_cls", **weight)  # θ2
        self.built = True

    @property
    def decay_exempt_weights(self):
        """θ1 and θ2: the [CLS] reset's scalar logits, which take no weight decay.

        They replace whole rows and columns of the positional term, as a bias
        would (TUPE Eq. 9); decay would pull [CLS]'s attention towards the flat
        logit 0. `keras_tupe.optimization.decay_exclusions` collects them.
        """
        return [self.cls_to_others, self.others_to_cls]

    def call(self, inputs):
        theta1 = ops.cast(self.cls_to_others, "float32")[:, None, None]  # (h, 1, 1)
        theta2 = ops.cast(self.others_to_cls, "float32")[:, None, None]
        # Row 0 wins over column 0, so (0, 0) gets θ1 as Eq. 9 says.
        return _reset_cls(ops.cast(inputs, "float32"), theta1, theta2)

    def compute_output_spec(self, inputs):
        return keras.KerasTensor(inputs.shape, "float32")

    def get_config(self):
        return {
            **super().get_config(),
            "num_heads": self.num_heads,
            "theta_initializer": keras.initializers.serialize(self.theta_initializer),
        }
